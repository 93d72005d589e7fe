"""Helpers shared by the Python module's tests (tests/python/test_*.py).

ctest runs each test file with PYTHONPATH pointing at build/python and
SHARDFEED (the CLI), SF_SOURCE_DIR, SF_TEST_TMP in the environment. By hand:

  cmake --build build && PYTHONPATH=build/python SHARDFEED=build/shardfeed \\
      /usr/bin/python3 tests/python/test_loader.py -v
"""
import os
import subprocess
import sys
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
# Running the CLI, scratch folders and .npy samples: the CLI tests' helpers.
from clitest import SOURCE_DIR, remove, run, scratch, write_samples  # noqa: E402,F401

PYTHON = os.environ.get("SF_TEST_PYTHON", sys.executable)
FASHION_DIR = "/usr/share/datasets/fashion-mnist"

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    torch = None
    HAVE_TORCH = False


def cli(*args):
    """shardfeed ARGS, which must exit 0: its stdout."""
    return run(*args, check=0).stdout


def pack(src, out, *opts):
    cli("pack", src, "-o", out, "--quiet", *opts)
    return out


def make_fashion(d, limit, split="train"):
    subprocess.run([PYTHON, os.path.join(SOURCE_DIR, "tools", "make-npy-samples.py"),
                    "fashion-mnist", d, "--limit", str(limit), "--split", split],
                   check=True, capture_output=True)


def have_fashion():
    return os.path.exists(os.path.join(FASHION_DIR, "train-images-idx3-ubyte.gz"))


def fashion_mlp():
    """A small Fashion-MNIST classifier, seeded: Debian's torch uses the reference BLAS, so
    keep it small (2x2 average pooling to 14x14, then a 196-64-10 MLP) and on one thread."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    return torch.nn.Sequential(
        torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(14 * 14, 64),
        torch.nn.ReLU(), torch.nn.Linear(64, 10))


def load_source(src, field, key):
    return np.load(os.path.join(src, f"{field}_{key}.npy"))


def rekey(d, offset):
    """Renames every FIELD_K.npy in folder `d` (write_samples) to FIELD_{K + offset}.npy, offset
    at least the number of samples: the same fields and sizes under other keys, so another
    dataset_id once packed (SPEC.md: it comes from the keys, sizes, schema and options)."""
    for name in os.listdir(d):
        field, key = name[:-len(".npy")].rsplit("_", 1)
        os.rename(os.path.join(d, name), os.path.join(d, f"{field}_{int(key) + offset}.npy"))


def as_numpy(x):
    if HAVE_TORCH and isinstance(x, torch.Tensor):
        return x.cpu().numpy()
    return np.asarray(x)


def epoch_ids(loader):
    """Every batch's ids (a list of lists) for one iteration of `loader`."""
    return [as_numpy(b.ids).tolist() for b in loader]


def drain_shared(it, record, threads=3):
    """(what record(batch) gives for every batch, errors) of `threads` threads sharing one
    iterator. Each retries while another thread's next() is under way (refused: one thread
    iterates a Loader at a time); any other exception is an error that stops its thread."""
    got, errors = [], []

    def work():
        while True:
            try:
                b = next(it)
            except StopIteration:
                return
            except RuntimeError as e:
                if "in use by another thread" in str(e):
                    continue
                errors.append(e)
                return
            except BaseException as e:  # an AssertionError in the mix, say
                errors.append(e)
                return
            got.append(record(b))

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return got, errors


class BusyReader:
    """Stands in for a Loader's reader whose restore() fails as the real one's does while
    another thread is inside its next(): what iter() from a second thread meets."""

    def __init__(self, reader):
        self.reader = reader

    def __getattr__(self, name):
        return getattr(self.reader, name)

    def restore(self, epoch, batch):
        raise RuntimeError("shardfeed: the reader is in use by another thread")


class ReaderWithHook:
    """Stands in for a Loader's reader (loader._reader = ReaderWithHook(loader._reader)): each
    function appended to .hook runs once inside the next next(), after the read, where the
    real call has let go of the GIL: what another thread may do at that moment, every time."""

    def __init__(self, reader):
        self.reader = reader
        self.hook = []

    def __getattr__(self, name):
        return getattr(self.reader, name)

    def next(self):
        b = self.reader.next()
        while self.hook:
            self.hook.pop(0)()
        return b
