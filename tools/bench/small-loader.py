#!/usr/bin/python3
"""Small-record throughput, side by side in one run: shardfeed.Loader with the default engine
and with uring, against a numpy memmap fancy-index gather of the same samples.

  PYTHONPATH=build/python /usr/bin/python3 tools/bench/small-loader.py DATASET_DIR MEMMAP_DIR

DATASET_DIR: Fashion-MNIST packed with --align 64 (tools/make-npy-samples.py fashion-mnist, then
shardfeed pack). MEMMAP_DIR holds img.npy and label.npy: the same samples stacked. Batch 256,
global shuffle, checksums on. Each measurement: one warm-up epoch, then 5 timed epochs; three
measurements per reader, interleaved; prints the median and the three."""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build",
                                "python"))
import shardfeed  # noqa: E402

BATCH, EPOCHS = 256, 5


def loader(ds, engine):
    with shardfeed.Loader(ds, batch_size=BATCH, shuffle=True, seed=0, engine=engine) as it:
        for b in it:  # warm-up epoch
            b["img"], b["label"]
        t, n = time.perf_counter(), 0
        for e in range(1, EPOCHS + 1):
            it.set_epoch(e)
            for b in it:
                b["img"], b["label"]
                n += len(b["label"])
        return n / (time.perf_counter() - t)


def memmap(npy):
    imgs = np.load(os.path.join(npy, "img.npy"), mmap_mode="r")
    labels = np.load(os.path.join(npy, "label.npy"))
    rng = np.random.default_rng(0)
    n = len(labels)
    for i in range(0, n, BATCH):  # warm-up epoch
        imgs[rng.permutation(n)[i:i + BATCH]]
    t, c = time.perf_counter(), 0
    for _ in range(EPOCHS):
        p = rng.permutation(n)
        for i in range(0, n, BATCH):
            idx = p[i:i + BATCH]
            imgs[idx], labels[idx]
            c += len(idx)
    return c / (time.perf_counter() - t)


def main():
    ds, npy = sys.argv[1], sys.argv[2]
    readers = [("Loader, engine auto", lambda: loader(ds, "auto")),
               ("Loader, engine uring", lambda: loader(ds, "uring")),
               ("numpy memmap gather", lambda: memmap(npy))]
    runs = {name: [] for name, _ in readers}
    for _ in range(3):
        for name, fn in readers:
            runs[name].append(fn())
    print(f"load average {os.getloadavg()[0]:.2f}")
    for name, r in runs.items():
        r = sorted(r)
        print(f"{name:22s} median {r[1]:>12,.0f} samples/s  (runs {', '.join(f'{x:,.0f}' for x in r)})")


if __name__ == "__main__":
    main()
