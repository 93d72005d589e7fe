"""One LMDB get per sample, np.frombuffer, stacked into a batch."""
import os
import time

import lmdb
import numpy as np

import common

s = common.setup()
env = lmdb.open(os.path.join(s.d, "lmdb"), readonly=True, lock=False)
rng = np.random.default_rng(0)
shape, dtype, size = s.first.shape, s.first.dtype, s.first.size


def epoch():
    n = 0
    with env.begin() as txn:
        for idx in common.random_batches(s.n, s.batch, rng):
            recs = [txn.get(b"%08d" % i) for i in idx]
            x = np.stack([np.frombuffer(r, dtype, size).reshape(shape) for r in recs])
            y = np.array([np.frombuffer(r, np.int64, 1, s.first.nbytes)[0] for r in recs])
            n += len(y)
            float(x.reshape(-1)[0])
    return n


epoch()
t = time.perf_counter()
n = sum(epoch() for _ in range(s.epochs))
common.report(s, n, time.perf_counter() - t)
