#!/usr/bin/env python3
"""The GPU check's Python leg (tools/gpu-check.sh runs it where torch has CUDA):

  1. bytes: a whole epoch through shardfeed.Loader(device="cuda:N") equals the CPU path's, field
     by field (labels and ids included), and every field is on the device;
  2. consumer wait: a small conv net trained at batch 256 from the Loader by a loop that logs
     its loss every step (loss.item(): the GPU finishes each step before the loop asks for the
     next batch); the loop's wait in the Loader (stats() wait_seconds + device_wait_seconds)
     must be at most 2% of the time of the steps;
  3. GPU fed: the same net by a loop that queues its steps without waiting for them (no
     .item()), so the GPU runs behind and sets the pace; an epoch from the Loader must take at
     most 2% longer than the same number of steps on batches already on the GPU (medians of 5
     epochs, measured alternately). The loop blocks in the Loader here, as it would in torch's
     launch queue without one: that wait is the GPU's, and the Loader's verdict must say so
     ("consumer-bound": its I/O threads waited for slots whose copies queue behind the steps);
  4. memory: torch.cuda.memory_allocated() and the device's free memory (cudaMemGetInfo) are the
     same after each of 20 epochs (of check 2) as after the first.

  python_check.py DATASET [--device cuda:0] [--epochs 20] [--batch-size 256]

--device host-copy runs the same logic on the library's stand-in device with CPU torch (no
GPU): a dry run of the script, whose timings and memory figures mean nothing. Prints one line per
check and "python_check: all checks passed"; exit status 1 when a check fails, 77 when torch
has no CUDA (and --device is not host-copy)."""
import argparse
import sys
import time

import numpy as np


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--max-wait", type=float, default=0.02)
    return p.parse_args()


def check_bytes(shardfeed, torch, ds, device, batch_size):
    """An epoch on the device equals the CPU path's; returns the batches compared."""
    cpu = {}
    with shardfeed.Loader(ds, batch_size, shuffle="global", seed=7, output="numpy") as ld:
        for b in ld:
            cpu[b.index] = ({k: np.array(v) for k, v in b.items()}, np.array(b.ids))
    n = 0
    with shardfeed.Loader(ds, batch_size, shuffle="global", seed=7, device=device) as ld:
        want_type = "cpu" if device == "host-copy" else "cuda"
        for b in ld:
            fields, ids = cpu[b.index]
            for k, v in b.items():
                if v.device.type != want_type:
                    raise AssertionError(f"field {k} of batch {b.index} is on {v.device}")
                got = v.cpu().numpy()  # on the import stream: after the copy
                if not np.array_equal(got, fields[k]):
                    raise AssertionError(f"field {k} of batch {b.index} differs from the CPU path")
            if b.ids.device.type != want_type or not np.array_equal(b.ids.cpu().numpy(), ids):
                raise AssertionError(f"ids of batch {b.index} differ or are not on the device")
            n += 1
    if n != len(cpu):
        raise AssertionError(f"{n} batches on the device, {len(cpu)} on the CPU")
    return n


def small_convnet(torch, channels, classes):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(channels, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1),
        nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, classes))


def make_step(torch, model, opt):
    def step(img, label):
        loss = torch.nn.functional.cross_entropy(model(img.float()), label)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step


def open_loader(shardfeed, ds, device, batch_size):
    return shardfeed.Loader(ds, batch_size, shuffle="global", seed=1, device=device, prefetch=4)


def train_logged(shardfeed, torch, ds, device, epochs, batch_size):
    """Check 2 and 4: trains for `epochs`, reading the loss every step; returns (the loop's wait
    in the Loader as a fraction of the steps after the first epoch, [(memory_allocated, free)
    after each epoch], step seconds, verdict)."""
    cuda = device != "host-copy"
    tdev = torch.device(device if cuda else "cpu")
    torch.manual_seed(0)
    with open_loader(shardfeed, ds, device, batch_size) as ld:
        first = next(iter(ld))
        model = small_convnet(torch, first["img"].shape[1], 1000).to(tdev)
        step = make_step(torch, model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
        del first
        memory = []
        waited = steps_s = 0.0
        for epoch in range(epochs):
            ld.set_epoch(epoch)
            before = ld.stats()
            t0 = time.perf_counter()
            for b in ld:
                step(b["img"], b["label"]).item()  # a trainer logging its loss
                del b
            t1 = time.perf_counter()
            after = ld.stats()
            if epoch > 0:  # the first epoch warms up cuDNN and the page cache
                waited += (after["wait_seconds"] - before["wait_seconds"] +
                           after["device_wait_seconds"] - before["device_wait_seconds"])
                steps_s += t1 - t0
            if cuda:
                free, _ = torch.cuda.mem_get_info(tdev)
                memory.append((torch.cuda.memory_allocated(tdev), free))
            else:
                memory.append((ld.stats()["device_bytes"], 0))
        verdict = ld.stats()["verdict"]
        print(f"python_check: logged loop: loader verdict {verdict}, "
              f"device_bytes {ld.stats()['device_bytes']}")
    return (waited / steps_s if steps_s else 0.0), memory, steps_s, verdict


def train_queued(shardfeed, torch, ds, device, epochs, batch_size):
    """Check 3: an epoch of steps queued without waiting, from the Loader and from batches
    already on the device, alternately; returns (median Loader epoch s, median resident epoch
    s, the Loader's stats over its timed epochs, its verdict)."""
    cuda = device != "host-copy"
    tdev = torch.device(device if cuda else "cpu")

    def sync():
        if cuda:
            torch.cuda.synchronize(tdev)

    torch.manual_seed(0)
    with open_loader(shardfeed, ds, device, batch_size) as ld:
        # epoch 0: the resident copies (one per batch), and the warm-up
        resident = [(b["img"].clone(), b["label"].clone()) for b in ld]
        model = small_convnet(torch, resident[0][0].shape[1], 1000).to(tdev)
        step = make_step(torch, model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
        for img, label in resident:
            step(img, label)
        sync()
        loader_s, resident_s, cpu_s = [], [], 0.0
        before = ld.stats()
        for epoch in range(1, epochs + 1):
            t0 = time.perf_counter()
            for img, label in resident:
                step(img, label)
            sync()
            resident_s.append(time.perf_counter() - t0)
            ld.set_epoch(epoch)
            c0, t0 = time.process_time(), time.perf_counter()
            for b in ld:
                step(b["img"], b["label"])
                del b
            sync()
            loader_s.append(time.perf_counter() - t0)
            cpu_s += time.process_time() - c0
        after = ld.stats()
        delta = {k: after[k] - before[k] for k in
                 ("wait_seconds", "device_wait_seconds", "device_slot_wait_seconds")}
        delta["cpu_seconds"], delta["loader_seconds"] = cpu_s, sum(loader_s)
        verdict = after["verdict"]
    return float(np.median(loader_s)), float(np.median(resident_s)), delta, verdict


def main():
    args = parse()
    try:
        import torch
    except ImportError:
        print("python_check: torch is not importable: Python leg skipped")
        return 77
    if args.device != "host-copy" and not torch.cuda.is_available():
        print(f"python_check: torch {torch.__version__} has no CUDA device "
              f"(torch.cuda.is_available() is False): Python leg skipped")
        return 77
    import shardfeed
    failed = 0

    def check(name, ok, detail):
        nonlocal failed
        print(f"python_check: {name}: {'ok' if ok else 'FAILED'}: {detail}")
        failed += not ok

    if args.device == "host-copy":
        print("python_check: device host-copy (no GPU): a dry run; timings and memory mean nothing")
    try:
        n = check_bytes(shardfeed, torch, args.dataset, args.device, args.batch_size)
        check("bytes", True, f"{n} batches of an epoch equal the CPU path's, every field on the device")
    except AssertionError as e:
        check("bytes", False, str(e))
    wait, memory, steps_s, verdict = train_logged(shardfeed, torch, args.dataset, args.device,
                                                  args.epochs, args.batch_size)
    check("consumer wait", wait <= args.max_wait,
          f"{100 * wait:.2f}% of {steps_s:.2f} s of training steps, loss read every step "
          f"(at most {100 * args.max_wait:g}%); verdict {verdict}")
    loader_s, resident_s, d, verdict = train_queued(shardfeed, torch, args.dataset, args.device,
                                                    5, args.batch_size)
    over = loader_s / resident_s - 1 if resident_s else 0.0
    check("GPU fed", over <= args.max_wait and verdict == "consumer-bound",
          f"steps queued without waiting: an epoch {loader_s:.4f} s from the Loader, "
          f"{resident_s:.4f} s on batches already on the device ({100 * over:+.2f}%, at most "
          f"+{100 * args.max_wait:g}%); verdict {verdict} (must be consumer-bound: the loop "
          f"blocked {d['wait_seconds']:.3f} s in next() and {d['device_wait_seconds']:.3f} s in "
          f"releases, the I/O threads {d['device_slot_wait_seconds']:.3f} s for slots behind the "
          f"steps; the process used {d['cpu_seconds']:.2f} s of CPU in {d['loader_seconds']:.2f} s)")
    grew = [(e + 1, m) for e, m in enumerate(memory) if m != memory[0]]
    check("memory", not grew,
          f"memory_allocated, free after epoch 1: {memory[0]}; "
          + (f"changed after epochs {[e for e, _ in grew]}: {[m for _, m in grew][:3]}" if grew
             else f"the same after all {len(memory)} epochs"))
    if failed:
        print(f"python_check: {failed} check(s) failed")
        return 1
    print("python_check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
