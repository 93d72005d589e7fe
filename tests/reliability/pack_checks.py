"""Helpers the pack reliability suites share (crash_kill.py, concurrent_pack.py):
inputs, whole-directory snapshots and checking a dataset's values against
its input files."""
import os
import subprocess
import sys

SRC = os.environ.get("SF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def make_input(path, count, shape, seed):
    """img_{i}.npy + label_{i}.npy: the same names and sizes for any seed."""
    subprocess.run([sys.executable, os.path.join(SRC, "tools", "make-npy-samples.py"), "synthetic", path,
                    "--count", str(count), "--shape", shape, "--seed", str(seed)],
                   check=True, stdout=subprocess.DEVNULL)


def read_dir(d):
    """{name: bytes} of every file in d."""
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


def value_mismatches(dataset, inp):
    """(values compared, [field/key of each value that differs from the .npy
    file it was packed from]), read with tests/cli/sfspec.py."""
    sys.path.insert(0, os.path.join(SRC, "tests", "cli"))
    import numpy as np
    import sfspec
    n, bad = 0, []
    for key, rec in sfspec.read_records(dataset):
        for field, value in rec.items():
            want = np.load(os.path.join(inp, f"{field}_{key}.npy"))
            if want.shape != value.shape or not np.array_equal(want, value):
                bad.append(f"{field}_{key}")
            n += 1
    return n, bad
