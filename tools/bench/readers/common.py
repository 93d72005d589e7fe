"""What every reader loop of tools/bench/run shares: its command line and its
report. Each loop runs in its own process:

    python3 tools/bench/readers/LOOP.py DATA_DIR BATCH EPOCHS [EXTRA...]

DATA_DIR is one prepared set (tools/bench/run's --work): npy/ (per-sample
files), shards/ (the shardfeed dataset), img.npy + label.npy (one array each),
data.h5, lmdb/. A loop runs one warm-up epoch, then EPOCHS timed ones touching
every batch, and prints one JSON line: samples, seconds, bytes."""
import json
import os
import sys
from collections import namedtuple

import numpy as np

Setup = namedtuple("Setup", "d batch epochs extra first n item")


def setup():
    d, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    first = np.load(os.path.join(d, "npy", "img_0.npy"))
    n = len(np.load(os.path.join(d, "label.npy"), mmap_mode="r"))
    return Setup(d, batch, epochs, sys.argv[4:], first, n, first.nbytes + 8)


def report(s, samples, seconds):
    print(json.dumps(dict(samples=samples, seconds=seconds, bytes=samples * s.item)))


def random_batches(n, batch, rng):
    """One epoch of random batches of sample ids, as the peers are read."""
    return np.array_split(rng.permutation(n), max(1, n // batch))
