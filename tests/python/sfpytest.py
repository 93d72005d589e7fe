"""Helpers shared by the Python module's tests (tests/python/test_*.py).

ctest runs each test file with PYTHONPATH pointing at build/python and
SHARDFEED (the CLI), SF_SOURCE_DIR, SF_TEST_TMP in the environment. By hand:

  cmake --build build && PYTHONPATH=build/python SHARDFEED=build/shardfeed \\
      /usr/bin/python3 tests/python/test_loader.py -v
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SF_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
SHARDFEED = os.environ.get("SHARDFEED", os.path.join(SOURCE_DIR, "build", "shardfeed"))
TMP_ROOT = os.environ.get("SF_TEST_TMP")
PYTHON = os.environ.get("SF_TEST_PYTHON", sys.executable)
FASHION_DIR = "/usr/share/datasets/fashion-mnist"

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    torch = None
    HAVE_TORCH = False


def scratch(prefix):
    """A fresh directory under SF_TEST_TMP (or the system temp dir)."""
    if TMP_ROOT:
        os.makedirs(TMP_ROOT, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=TMP_ROOT)


def remove(path):
    shutil.rmtree(path, ignore_errors=True)


def cli(*args):
    p = subprocess.run([SHARDFEED, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"shardfeed {' '.join(map(str, args))}: exit {p.returncode}\n"
                             f"{p.stdout}\n{p.stderr}")
    return p.stdout


def write_synthetic(d, n, shape=(3, 8, 8), dtype=np.float32, seed=0, extra=None):
    """img_{i}.npy (random `shape` `dtype`) + label_{i}.npy (int64 i*7 % 1000) for i < n.
    `extra`: {field: function(i) -> array} for more fields."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        if np.issubdtype(np.dtype(dtype), np.floating):
            img = rng.standard_normal(shape).astype(dtype)
        else:
            img = rng.integers(0, 255, size=shape).astype(dtype)
        np.save(os.path.join(d, f"img_{i}.npy"), img)
        np.save(os.path.join(d, f"label_{i}.npy"), np.int64(i * 7 % 1000))
        for name, fn in (extra or {}).items():
            np.save(os.path.join(d, f"{name}_{i}.npy"), fn(i))


def pack(src, out, *opts):
    cli("pack", src, "-o", out, "--quiet", *opts)
    return out


def make_fashion(d, limit, split="train"):
    subprocess.run([PYTHON, os.path.join(SOURCE_DIR, "tools", "make-npy-samples.py"),
                    "fashion-mnist", d, "--limit", str(limit), "--split", split],
                   check=True, capture_output=True)


def have_fashion():
    return os.path.exists(os.path.join(FASHION_DIR, "train-images-idx3-ubyte.gz"))


def load_source(src, field, key):
    return np.load(os.path.join(src, f"{field}_{key}.npy"))


def as_numpy(x):
    if HAVE_TORCH and isinstance(x, torch.Tensor):
        return x.cpu().numpy()
    return np.asarray(x)


def epoch_ids(loader):
    """Every batch's ids (a list of lists) for one iteration of `loader`."""
    return [as_numpy(b.ids).tolist() for b in loader]
