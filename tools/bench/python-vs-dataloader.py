#!/usr/bin/python3
"""Samples per second through Python: shardfeed.Loader against torch's DataLoader.

  tools/bench/python-vs-dataloader.py [--quick] [--json] [--fashion] [options]

On the same samples (default: 2,000 synthetic float32 3x224x224 images + int64
labels as img_{i}.npy / label_{i}.npy, packed with `shardfeed pack`):

  (a) a Python loop over shardfeed.Loader batches (torch tensors, zero-copy);
  (b) a Python loop over torch.utils.data.DataLoader on the original .npy files,
      a Dataset doing np.load per item, default collate, num_workers 0 and 2
      (persistent workers, so worker start-up is not counted).

Both shuffle, use the same batch size (32; 256 with --fashion), and touch every
batch (a few elements of each field, or --touch sum: tensor.sum() of everything).
Each loader runs one warm-up epoch (page cache warm for both), then --epochs timed
epochs; the best epoch counts. --fashion uses Fashion-MNIST (28x28 uint8, Debian's
dataset-fashion-mnist) instead: small samples, where per-sample overhead dominates.

Data is written once under --work (default $TMPDIR/shardfeed-bench) and reused.
Needs the built module (build/python) and CLI (build/shardfeed): see --build.
"""
import argparse
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smaller run (400 samples, 1 timed epoch)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--fashion", action="store_true",
                   help="Fashion-MNIST 28x28 uint8 samples (default count 60000, batch 256)")
    p.add_argument("--samples", type=int, help="samples (default 2000; --fashion 60000; --quick 400/10000)")
    p.add_argument("--shape", default="3,224,224", help="synthetic sample shape (default 3,224,224)")
    p.add_argument("--batch", type=int, help="batch size (default 32; --fashion 256)")
    p.add_argument("--workers", default="0,2", help="DataLoader num_workers values (default 0,2)")
    p.add_argument("--epochs", type=int, help="timed epochs per loader, best counts (default 2; --quick 1)")
    p.add_argument("--touch", choices=["few", "sum"], default="few",
                   help="per batch: sum a few elements of each field (default) or all of them")
    p.add_argument("--prefetch", type=int, default=4, help="shardfeed prefetch slots (default 4)")
    p.add_argument("--engine", default="auto", help="shardfeed engine: auto, uring, pread, mmap")
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "shardfeed-bench"),
                   help="where the .npy files and the dataset go")
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="build directory with shardfeed (CLI) and python/ (default: build)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.samples is None:
        a.samples = (10000 if a.quick else 60000) if a.fashion else (400 if a.quick else 2000)
    if a.batch is None:
        a.batch = 256 if a.fashion else 32
    if a.epochs is None:
        a.epochs = 1 if a.quick else 2
    a.workers = [int(w) for w in a.workers.split(",") if w != ""]
    return a


def log(args, msg):
    print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)


def prepare(args):
    """Writes the .npy files and packs them (once per configuration)."""
    if args.fashion:
        tag = f"fashion-{args.samples}"
        gen = ["fashion-mnist", "--limit", str(args.samples)]
        align = ["--align", "64"]
    else:
        tag = f"synthetic-{args.samples}-{args.shape.replace(',', 'x')}"
        gen = ["synthetic", "--count", str(args.samples), "--shape", args.shape]
        align = []
    base = os.path.join(args.work, tag)
    npy, ds, done = os.path.join(base, "npy"), os.path.join(base, "dataset"), os.path.join(base, ".done")
    if not os.path.exists(done):
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
        log(args, f"writing {args.samples} samples to {npy} ...")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-npy-samples.py"), gen[0], npy,
                        *gen[1:]], check=True, stdout=subprocess.DEVNULL)
        log(args, f"packing into {ds} ...")
        subprocess.run([os.path.join(args.build, "shardfeed"), "pack", npy, "-o", ds, "--quiet", *align],
                       check=True)
        open(done, "w").close()
    return npy, ds


def warm(paths):
    """Reads every file once so both loaders start from a warm page cache."""
    for d in paths:
        for name in os.listdir(d):
            with open(os.path.join(d, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def touch(batch, how):
    """Makes the loop depend on the batch's bytes."""
    s = 0.0
    for t in batch:
        if how == "sum":
            s += float(t.sum())
        else:
            s += float(t.reshape(t.shape[0], -1)[:, :4].sum())
    return s


def time_epochs(args, make_iter, epochs):
    """Warm-up epoch, then `epochs` timed ones: (best seconds, samples per epoch)."""
    best, n = None, 0
    for e in range(epochs + 1):
        n = 0
        t0 = time.perf_counter()
        for batch in make_iter(e):
            touch(batch, args.touch)
            n += batch[0].shape[0]
        dt = time.perf_counter() - t0
        if e > 0:
            best = dt if best is None else min(best, dt)
    return best, n


def bench_shardfeed(args, ds):
    import shardfeed
    loader = shardfeed.Loader(ds, args.batch, shuffle="global", seed=args.seed, prefetch=args.prefetch,
                              engine=args.engine, output="torch")
    fields = None

    def batches(epoch):
        nonlocal fields
        loader.set_epoch(epoch)
        for b in loader:
            if fields is None:
                fields = list(b.keys())
            yield [b[f] for f in fields]

    secs, n = time_epochs(args, batches, args.epochs)
    stats = loader.stats()
    loader.close()
    del loader
    gc.collect()
    return secs, n, stats


class NpyDataset:
    """The usual per-file Dataset: np.load of each field of one sample."""

    def __init__(self, root):
        import numpy as np
        self.np = np
        self.root = root
        self.keys = sorted({n[len("img_"):-len(".npy")] for n in os.listdir(root) if n.startswith("img_")},
                           key=int)

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        k = self.keys[i]
        img = self.np.load(os.path.join(self.root, f"img_{k}.npy"))
        label = self.np.load(os.path.join(self.root, f"label_{k}.npy"))
        return img, label


def bench_dataloader(args, npy, workers):
    import torch
    from torch.utils.data import DataLoader
    g = torch.Generator()
    g.manual_seed(args.seed)
    dl = DataLoader(NpyDataset(npy), batch_size=args.batch, shuffle=True, num_workers=workers,
                    persistent_workers=workers > 0, generator=g)
    secs, n = time_epochs(args, lambda e: iter(dl), args.epochs)
    del dl
    gc.collect()
    return secs, n


def main():
    args = parse()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import torch
    torch.set_num_threads(1)  # the loops only touch data; keep torch's pool out of the way
    npy, ds = prepare(args)
    warm([npy, ds])

    rows = []
    log(args, "timing shardfeed.Loader ...")
    secs, n, stats = bench_shardfeed(args, ds)
    rows.append({"loader": "shardfeed.Loader", "workers": None, "seconds": secs, "samples": n})
    for w in args.workers:
        log(args, f"timing DataLoader num_workers={w} ...")
        secs, n2 = bench_dataloader(args, npy, w)
        rows.append({"loader": f"DataLoader np.load, num_workers={w}", "workers": w, "seconds": secs,
                     "samples": n2})
    for r in rows:
        r["samples_per_s"] = r["samples"] / r["seconds"]
    dl_rows = [r for r in rows if r["workers"] is not None]
    best_dl = max((r["samples_per_s"] for r in dl_rows), default=None)
    for r in rows:
        r["vs_best_dataloader"] = r["samples_per_s"] / best_dl if best_dl else None

    sample_bytes = sum(os.path.getsize(os.path.join(npy, f)) for f in os.listdir(npy)) / max(1, args.samples)
    config = {"data": "fashion-mnist 28x28 uint8" if args.fashion else f"synthetic float32 {args.shape}",
              "samples": args.samples, "batch": args.batch, "epochs_timed": args.epochs,
              "touch": args.touch, "npy_bytes_per_sample": round(sample_bytes), "cpus": os.cpu_count(),
              "python": platform.python_version(), "torch": torch.__version__,
              "shardfeed_engine": stats.get("engine"), "shardfeed_io_threads": stats.get("io_threads"),
              "shardfeed_prefetch": stats.get("prefetch"),
              "shardfeed_wait_seconds_total": round(stats.get("wait_seconds", 0.0), 3)}
    if args.json:
        print(json.dumps({"config": config, "results": rows}, indent=2))
        return
    print()
    print(f"{config['data']}, {args.samples} samples ({sample_bytes / 1e3:.1f} kB of .npy each), "
          f"batch {args.batch}, shuffled, best of {args.epochs} epoch(s) after a warm-up, "
          f"touch={args.touch}, {config['cpus']} CPUs, torch {torch.__version__}")
    print(f"shardfeed: engine {config['shardfeed_engine']}, {config['shardfeed_io_threads']} I/O threads, "
          f"prefetch {config['shardfeed_prefetch']}")
    print()
    print(f"{'loader':<34} {'samples/s':>11} {'s/epoch':>9} {'vs best DataLoader':>19}")
    for r in rows:
        ratio = f"{r['vs_best_dataloader']:.2f}x" if r["vs_best_dataloader"] else "-"
        print(f"{r['loader']:<34} {r['samples_per_s']:>11,.0f} {r['seconds']:>9.3f} {ratio:>19}")


if __name__ == "__main__":
    main()
