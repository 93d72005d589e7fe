"""What the CLI and Python tests share: running the shardfeed binary, scratch folders, and
.npy samples to pack (tests/python/sfpytest.py builds on this module).

ctest gives SHARDFEED (the binary), SF_SOURCE_DIR and SF_TEST_TMP (where scratch folders go)
in the environment. By hand, from the source tree after a build:

  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_pack.py -v
"""
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SF_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
SHARDFEED = os.path.abspath(os.environ.get("SHARDFEED", os.path.join(SOURCE_DIR, "build", "shardfeed")))
TMP_ROOT = os.environ.get("SF_TEST_TMP")

# tests/python/sfwrite.py: datasets with what pack does not write (any key, any value).
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def run(*args, check=None, nofile=None, env=None, cwd=None, timeout=None):
    """Runs shardfeed ARGS and returns the CompletedProcess (text stdout and stderr).
    `check`: the exit status it must have (None: any); `nofile`: the limit on open files it
    runs under; `env`, `cwd`, `timeout`: as subprocess.run's."""
    limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))) if nofile else None
    p = subprocess.run([SHARDFEED, *map(str, args)], capture_output=True, text=True, preexec_fn=limit,
                       env=env, cwd=cwd, timeout=timeout)
    if check is not None and p.returncode != check:
        raise AssertionError(f"{args}: exit {p.returncode}, expected {check}\n{p.stdout}\n{p.stderr}")
    return p


def scratch(prefix=None):
    """A fresh folder under SF_TEST_TMP (or the system's temporary folder)."""
    if TMP_ROOT:
        os.makedirs(TMP_ROOT, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=TMP_ROOT)


def remove(path):
    shutil.rmtree(path, ignore_errors=True)


class ScratchTest(unittest.TestCase):
    """self.tmp: a fresh folder for each test, removed after it."""

    def setUp(self):
        self.tmp = scratch()

    def tearDown(self):
        remove(self.tmp)


def write_samples(d, n, shape=(3, 8, 8), dtype=np.float32, seed=0, label=lambda i: i * 7 % 1000,
                  extra=None):
    """img_{i}.npy and label_{i}.npy for i < n: img a `shape` array of
    `dtype` (random normal for floats, random 0..254 otherwise), label the int64 label(i).
    `extra`: {field: function(i) -> array} for more fields."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    floats = np.issubdtype(np.dtype(dtype), np.floating)
    for i in range(n):
        img = rng.standard_normal(shape) if floats else rng.integers(0, 255, size=shape)
        np.save(os.path.join(d, f"img_{i}.npy"), img.astype(dtype))
        np.save(os.path.join(d, f"label_{i}.npy"), np.int64(label(i)))
        for name, fn in (extra or {}).items():
            np.save(os.path.join(d, f"{name}_{i}.npy"), fn(i))
