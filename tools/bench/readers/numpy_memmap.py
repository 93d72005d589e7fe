"""Fancy-index gathers of random batches from one memory-mapped .npy array."""
import os
import time

import numpy as np

import common

s = common.setup()
imgs = np.load(os.path.join(s.d, "img.npy"), mmap_mode="r")
labels = np.load(os.path.join(s.d, "label.npy"))
rng = np.random.default_rng(0)


def epoch():
    n = 0
    for idx in common.random_batches(s.n, s.batch, rng):
        x, y = imgs[idx], labels[idx]
        n += len(y)
        float(x.reshape(-1)[0])
    return n


epoch()
t = time.perf_counter()
n = sum(epoch() for _ in range(s.epochs))
common.report(s, n, time.perf_counter() - t)
