"""tools/quickstart.sh removes only what it made: a WORK_DIR that exists and
is not its own work directory is refused before anything is built,
installed or downloaded.

The script runs from a copy in a scratch tree whose tools/install-deps.sh
and `cmake` (first on PATH) are stubs that record being called, and which
has no make-npy-samples.py: whatever the script does, it builds and
downloads nothing.

Run by ctest (SF_SOURCE_DIR, SF_TEST_TMP in the environment) or by hand:
  /usr/bin/python3 tests/cli/test_quickstart.py -v
"""
import os
import shutil
import stat
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import SOURCE_DIR as SRC, ScratchTest  # noqa: E402

MARKER = ".shardfeed-quickstart"


class Quickstart(ScratchTest):
    def setUp(self):
        super().setUp()
        self.tree = os.path.join(self.tmp, "tree")
        self.calls = os.path.join(self.tmp, "calls")
        bin_dir = os.path.join(self.tmp, "bin")
        os.makedirs(os.path.join(self.tree, "tools"))
        os.makedirs(bin_dir)
        shutil.copy(os.path.join(SRC, "tools", "quickstart.sh"), os.path.join(self.tree, "tools"))
        stub = f'#!/bin/sh\necho "$0 $*" >>{self.calls}\nexit 0\n'
        for path in (os.path.join(self.tree, "tools", "install-deps.sh"), os.path.join(bin_dir, "cmake")):
            with open(path, "w") as f:
                f.write(stub)
            os.chmod(path, stat.S_IRWXU)
        self.env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))

    def quickstart(self, work):
        return subprocess.run(["bash", os.path.join(self.tree, "tools", "quickstart.sh"), work],
                              capture_output=True, text=True, env=self.env, timeout=120)

    def calls_made(self):
        if not os.path.exists(self.calls):
            return ""
        with open(self.calls) as f:
            return f.read()

    def test_a_users_folder_is_refused_and_kept(self):
        work = os.path.join(self.tmp, "mine")
        os.makedirs(os.path.join(work, "npy"))
        files = {"thesis.tex": "years of work", os.path.join("npy", "notes.txt"): "mine too"}
        for name, text in files.items():
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        p = self.quickstart(work)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn(work, p.stderr)
        self.assertIn("not a work directory quickstart.sh made", p.stderr)
        self.assertEqual(self.calls_made(), "")  # nothing built or installed
        for name, text in files.items():
            with open(os.path.join(work, name)) as f:
                self.assertEqual(f.read(), text)

    def test_a_file_or_symlink_is_refused(self):
        path = os.path.join(self.tmp, "afile")
        with open(path, "w") as f:
            f.write("data")
        link = os.path.join(self.tmp, "alink")
        own = os.path.join(self.tmp, "own")
        os.makedirs(own)
        open(os.path.join(own, MARKER), "w").close()
        os.symlink(own, link)  # even to a work directory: what would be removed is elsewhere
        for work in (path, link):
            p = self.quickstart(work)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("not a work directory", p.stderr)
        self.assertEqual(self.calls_made(), "")
        with open(path) as f:
            self.assertEqual(f.read(), "data")

    def test_its_own_work_directory_is_accepted(self):
        work = os.path.join(self.tmp, "new")
        p = self.quickstart(work)  # stops at the missing make-npy-samples.py
        self.assertNotEqual(p.returncode, 0)
        self.assertTrue(os.path.isfile(os.path.join(work, MARKER)))
        self.assertIn("install-deps.sh", self.calls_made())
        with open(os.path.join(work, "kept.txt"), "w") as f:
            f.write("only npy/, dataset/ and exported/ are the script's")
        os.makedirs(os.path.join(work, "dataset"))
        p = self.quickstart(work)
        self.assertNotIn("not a work directory", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(work, "dataset")))
        self.assertTrue(os.path.exists(os.path.join(work, "kept.txt")))


if __name__ == "__main__":
    unittest.main()
