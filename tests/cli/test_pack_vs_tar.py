"""tools/bench/pack-vs-tar.sh removes only what it made: a WORK_DIR that
exists and is not its own is refused untouched; its own is reused (its tar
files and dataset replaced, nothing else).

Run by ctest (SHARDFEED, SF_SOURCE_DIR, SF_TEST_TMP in the environment) or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_pack_vs_tar.py -v
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import SHARDFEED, SOURCE_DIR, ScratchTest, write_samples  # noqa: E402

SCRIPT = os.path.join(SOURCE_DIR, "tools", "bench", "pack-vs-tar.sh")


def bench(inp, work):
    return subprocess.run([SCRIPT, inp, work, "1"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, SHARDFEED=SHARDFEED))


class PackVsTar(ScratchTest):
    def test_a_users_folder_is_refused_and_kept(self):
        inp = os.path.join(self.tmp, "in")
        write_samples(inp, 4)
        work = os.path.join(self.tmp, "mine")
        os.makedirs(work)
        with open(os.path.join(work, "precious"), "w") as f:
            f.write("keep")
        p = bench(inp, work)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("was not made by this script", p.stderr)
        self.assertEqual(os.listdir(work), ["precious"])

    def test_its_own_folder_is_reused(self):
        inp = os.path.join(self.tmp, "in")
        write_samples(inp, 4)
        work = os.path.join(self.tmp, "work")
        for _ in range(2):
            p = bench(inp, work)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("shardfeed verify", p.stdout)
        self.assertEqual(sorted(os.listdir(work)), [".shardfeed-pack-vs-tar", "ds"])


if __name__ == "__main__":
    unittest.main()
