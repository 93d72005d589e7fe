"""Sorted random batch reads from one HDF5 dataset (h5py needs increasing indices)."""
import os
import time

import h5py
import numpy as np

import common

s = common.setup()
f = h5py.File(os.path.join(s.d, "data.h5"), "r")
imgs, labels = f["img"], f["label"]
rng = np.random.default_rng(0)


def epoch():
    n = 0
    for idx in common.random_batches(s.n, s.batch, rng):
        idx = np.sort(idx)
        x, y = imgs[idx], labels[idx]
        n += len(y)
        float(x.reshape(-1)[0])
    return n


epoch()
t = time.perf_counter()
n = sum(epoch() for _ in range(s.epochs))
common.report(s, n, time.perf_counter() - t)
