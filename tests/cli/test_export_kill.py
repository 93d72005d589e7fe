"""`shardfeed export` killed at random moments (SIGKILL, SIGTERM, SIGINT) never leaves a
file cut short under its final name: every file it leaves is byte-equal to the one a
complete export writes, and nothing else is there but folders (and, where the output's file
system has no O_TMPFILE, hidden .shardfeed-* temporaries).

The dataset's values are several MB each, so that most kills land while a file is being
written; the test checks that enough kills landed inside the export (some files written, not
all): every other kill is timed from the first file under a final name rather than from the
start. SF_EXPORT_KILL_RUNS (default 24) kills, SF_EXPORT_KILL_SEED the random delays. Run by
ctest or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_export_kill.py -v
"""
import os
import random
import signal
import subprocess
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import SHARDFEED, ScratchTest, remove, run  # noqa: E402
import sfwrite  # noqa: E402

RUNS = int(os.environ.get("SF_EXPORT_KILL_RUNS", "24"))
SEED = int(os.environ.get("SF_EXPORT_KILL_SEED", "2026"))
SAMPLES = 10
VALUE_BYTES = 6 << 20
SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]


def read_tree(root):
    """{relative path: bytes} of the files under root, and the set of its folders."""
    files, folders = {}, set()
    for d, dirs, names in os.walk(root):
        folders.update(os.path.relpath(os.path.join(d, n), root) for n in dirs)
        for n in names:
            path = os.path.join(d, n)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = f.read()
    return files, folders


class KilledExport(ScratchTest):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(SEED)
        fields = [("data", "bytes", sfwrite.VAR, None), ("label", "int64", sfwrite.INLINE, ())]
        samples = [{"data": rng.integers(0, 256, VALUE_BYTES, dtype=np.uint8).tobytes(),
                    "label": np.int64(i)} for i in range(SAMPLES)]
        # Keys in folders: the export makes them as it goes.
        keys = [f"part{i % 3}/sample_{i:02d}.bin" for i in range(SAMPLES)]
        self.ds = sfwrite.write_dataset(os.path.join(self.tmp, "ds"), fields, samples, keys=keys,
                                        metadata={"source": b"list"}, per_shard=4)
        # The reference, and the time a full export takes (the second of two runs: the
        # first also reads the dataset into the page cache); the kills land within it.
        times = []
        for name in ("ref", "ref-again"):
            start = time.monotonic()
            run("export", self.ds, "-o", os.path.join(self.tmp, name), check=0)
            times.append(time.monotonic() - start)
        self.full_s = times[1]
        self.ref, _ = read_tree(os.path.join(self.tmp, "ref"))
        remove(os.path.join(self.tmp, "ref-again"))
        self.assertEqual(len(self.ref), SAMPLES + 1)  # and list.csv

    def check_left(self, out, what):
        """Every file under a final name is the reference's; returns how many there are."""
        files, _ = read_tree(out) if os.path.isdir(out) else ({}, set())
        finals = 0
        for rel, data in files.items():
            if os.path.basename(rel).startswith(".shardfeed-"):
                continue  # a hidden temporary or probe: not a final name
            self.assertIn(rel, self.ref, f"{what}: an unexpected file {rel}")
            self.assertEqual(len(data), len(self.ref[rel]),
                             f"{what}: {rel} is cut short: {len(data)} of {len(self.ref[rel])} bytes")
            self.assertTrue(data == self.ref[rel], f"{what}: {rel} differs from a complete export's")
            finals += 1
        if "list.csv" in files:
            self.assertEqual(finals, len(self.ref), f"{what}: list.csv before every file")
        return finals

    @staticmethod
    def wait_for_a_final(out, p):
        """Waits until a file under a final name is under out or p exits; True for the former."""
        while p.poll() is None:
            for _, _, names in os.walk(out):
                if any(not n.startswith(".shardfeed-") for n in names):
                    return True
            time.sleep(0.0005)
        return False

    def test_kill_at_random_moments(self):
        rnd = random.Random(SEED)
        inside = 0  # kills that found some files written, not all
        latest = self.full_s  # kills land before it: the earliest so far that found the export done
        latest_after = self.full_s  # the same for the kills timed from the first file
        for k in range(RUNS):
            out = os.path.join(self.tmp, f"out-{k}")
            sig = SIGNALS[k % len(SIGNALS)]
            delay = rnd.uniform(0, latest)
            p = subprocess.Popen([SHARDFEED, "export", self.ds, "-o", out],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if k % 2:
                # Every other kill waits for the first file under a final name, then its
                # delay: on a loaded machine the process's start alone can outlast full_s,
                # and kills timed from the start then seldom land while files are written.
                first = self.wait_for_a_final(out, p)
                delay = rnd.uniform(0, latest_after)
            time.sleep(delay)
            p.send_signal(sig)
            rc = p.wait()
            what = (f"run {k} ({sig.name} {delay * 1000:.0f} ms after "
                    f"{'the first file' if k % 2 and first else 'the start'}, exit {rc})")
            finals = self.check_left(out, what)
            if rc != 0 and 0 < finals < len(self.ref):
                inside += 1
            elif finals == len(self.ref) and k % 2:
                latest_after = delay
            elif finals == len(self.ref):
                latest = delay
            remove(out)
        print(f"\n{RUNS} kills, {inside} inside the export (a full export: "
              f"{self.full_s * 1000:.0f} ms)", file=sys.stderr)
        self.assertGreaterEqual(inside, RUNS // 4, "too few kills landed inside the export")


if __name__ == "__main__":
    unittest.main()
