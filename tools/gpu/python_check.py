#!/usr/bin/env python3
"""The GPU check's Python leg (tools/gpu-check.sh runs it where torch has CUDA):

  1. bytes: a whole epoch through shardfeed.Loader(device="cuda:N") equals the CPU path's, field
     by field (labels and ids included), and every field is on the device;
  2. training: a small conv net trained at batch 256 from the Loader; the consumer's wait (the
     loop blocked in the Loader: stats() wait_seconds + device_wait_seconds) must be at most 2%
     of the time of the steps;
  3. memory: torch.cuda.memory_allocated() and the device's free memory (cudaMemGetInfo) are the
     same after each of 20 epochs as after the first.

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


def train(shardfeed, torch, ds, device, epochs, batch_size):
    """Trains for `epochs`; returns (consumer wait fraction of the steps after the first
    epoch, [(memory_allocated, free) after each epoch], step seconds)."""
    cuda = device != "host-copy"
    tdev = torch.device(device if cuda else "cpu")
    torch.manual_seed(0)
    with shardfeed.Loader(ds, batch_size, shuffle="global", seed=1, device=device,
                          prefetch=4) as ld:
        first = next(iter(ld))
        model = small_convnet(torch, first["img"].shape[1], 1000).to(tdev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        del first
        memory = []
        waited = steps_s = 0.0
        for epoch in range(epochs):
            ld.set_epoch(epoch)
            before = ld.stats()
            t0 = time.perf_counter()
            for b in ld:
                x = b["img"].float()
                loss = torch.nn.functional.cross_entropy(model(x), b["label"])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                del b, x, loss
            if cuda:
                torch.cuda.synchronize(tdev)
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
        print(f"python_check: loader stats: {ld.stats()['verdict']}, "
              f"device_bytes {ld.stats()['device_bytes']}")
    return (waited / steps_s if steps_s else 0.0), memory, steps_s


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
    wait, memory, steps_s = train(shardfeed, torch, args.dataset, args.device, args.epochs,
                                  args.batch_size)
    check("consumer wait", wait <= args.max_wait,
          f"{100 * wait:.2f}% of {steps_s:.2f} s of training steps (at most {100 * args.max_wait:g}%)")
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
