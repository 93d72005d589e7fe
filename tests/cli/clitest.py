"""What the CLI tests share: running the shardfeed binary and a scratch folder per test.
SHARDFEED (the binary) and SF_TEST_TMP (where scratch folders go) come from ctest."""
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import unittest

SHARDFEED = os.path.abspath(os.environ.get("SHARDFEED", "build/shardfeed"))
TMP_ROOT = os.environ.get("SF_TEST_TMP")

# tests/python/sfwrite.py: datasets with what pack does not write (any key, any value).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def run(*args, check=None, nofile=None):
    """Runs shardfeed ARGS; `check`: the exit status it must have; `nofile`: the limit on
    open files it runs under."""
    limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))) if nofile else None
    p = subprocess.run([SHARDFEED, *map(str, args)], capture_output=True, text=True, preexec_fn=limit)
    if check is not None and p.returncode != check:
        raise AssertionError(f"{args}: exit {p.returncode}, expected {check}\n{p.stdout}\n{p.stderr}")
    return p


def scratch():
    if TMP_ROOT:
        os.makedirs(TMP_ROOT, exist_ok=True)
    return tempfile.mkdtemp(dir=TMP_ROOT)


class ScratchTest(unittest.TestCase):
    """self.tmp: a fresh folder for each test, removed after it."""

    def setUp(self):
        self.tmp = scratch()

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)
