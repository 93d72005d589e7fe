"""Exit codes, the same for every command that reads a dataset (README "Exit codes
everywhere"): 0 success, 1 usage or environment error (a missing folder, a folder that is
not a dataset, too many open files), 2 corrupt data (a damaged file, a value over a format
limit). One table: each command against each case.

Run by ctest (SHARDFEED, SF_TEST_TMP in the environment) or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_exit_codes.py -v
"""
import os
import shutil
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import run, scratch  # noqa: E402
import sfwrite  # noqa: E402

FIELDS = [("img", "uint8", sfwrite.FIXED, (8,)), ("label", "int64", sfwrite.INLINE, ())]


class ExitCodes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch()
        samples = [{"img": np.full(8, i, np.uint8), "label": np.int64(i)} for i in range(3)]

        def dataset(name, **kw):
            return sfwrite.write_dataset(os.path.join(cls.tmp, name), FIELDS, samples, per_shard=1, **kw)

        cls.good = dataset("good")
        cls.corrupt = dataset("corrupt")
        with open(os.path.join(cls.corrupt, "manifest.sfm"), "r+b") as f:
            f.seek(30)  # the record count: the trailer checksum no longer holds
            b = f.read(1)
            f.seek(30)
            f.write(bytes([b[0] ^ 0x01]))
        # 17 MiB of metadata: over the format's 16 MiB limit (checksums all correct).
        cls.over_limit = dataset("over-limit", metadata={"x": bytes(17 << 20)})
        cls.not_a_dataset = os.path.join(cls.tmp, "plain")
        os.makedirs(cls.not_a_dataset)
        with open(os.path.join(cls.not_a_dataset, "notes.txt"), "w") as f:
            f.write("no manifest here")
        cls.missing = os.path.join(cls.tmp, "no-such-folder")
        cls.shard_gone = dataset("shard-gone")
        os.remove(os.path.join(cls.shard_gone, "shard-000001.sfs"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def commands(self, ds):
        out = os.path.join(self.tmp, "out")
        shutil.rmtree(out, ignore_errors=True)
        return {
            "verify": ["verify", ds],
            "inspect": ["inspect", ds],
            "export": ["export", ds, "-o", out],
            "bench": ["bench", ds, "--batch-size", "1"],
            "merge": ["merge", ds, "-o", out],
        }

    def check(self, ds, status, *needles):
        for name, args in self.commands(ds).items():
            with self.subTest(command=name):
                p = run(*args)
                self.assertEqual(p.returncode, status, p.stdout + p.stderr)
                for n in needles:
                    self.assertIn(n, p.stdout + p.stderr)

    def test_success(self):
        for name, args in self.commands(self.good).items():
            with self.subTest(command=name):
                # merge reads the dataset, then finds it is not a part of a --part run
                self.assertEqual(run(*args).returncode, 1 if name == "merge" else 0)

    def test_not_a_dataset_is_1(self):
        self.check(self.not_a_dataset, 1, "manifest", "not a dataset")

    def test_missing_folder_is_1(self):
        # A mistyped path says so, not "no manifest (not a dataset ...)" as for a folder.
        self.check(self.missing, 1, "no-such-folder: No such file or directory")
        for name, args in self.commands(self.missing).items():
            with self.subTest(command=name):
                self.assertNotIn("not a dataset", run(*args).stderr)
        self.check(os.path.join(self.not_a_dataset, "notes.txt"), 1,
                   "notes.txt: not a folder (a dataset is a folder holding manifest.sfm)")

    def test_a_missing_shard_is_2(self):
        # A shard the manifest lists, gone: a damaged dataset, as verify has said (inspect,
        # export and bench said 1, "No such file or directory").
        # (merge refuses it before, as no part of a --part run: 1.)
        for name, args in self.commands(self.shard_gone).items():
            if name != "merge":
                with self.subTest(command=name):
                    p = run(*args)
                    self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                    self.assertIn("shard-000001.sfs", p.stdout + p.stderr)
                    self.assertIn("missing", p.stdout + p.stderr)

    def test_corrupt_dataset_is_2(self):
        self.check(self.corrupt, 2, "checksum")

    def test_the_same_limit_violation_is_2_everywhere(self):
        self.check(self.over_limit, 2, "limit")

    def test_usage_error_is_1(self):
        for args in (["verify"], ["inspect"], ["export", self.good], ["bench"], ["merge"],
                     ["verify", self.good, "--frobnicate"], ["inspect", self.good, "extra"],
                     ["export", self.good, "-o"], ["bench", self.good, "--batch-size", "x"],
                     ["merge", self.good, "--frobnicate"], ["frobnicate"]):
            with self.subTest(args=args):
                self.assertEqual(run(*args).returncode, 1)

    def test_too_many_open_files_says_which_limit(self):
        # With 4 descriptors (stdin, stdout, stderr and the dataset's folder), the first shard
        # cannot be opened: an environment error that names the limit and how to raise it.
        for name in ("inspect", "export", "bench"):
            with self.subTest(command=name):
                p = run(*self.commands(self.good)[name], nofile=4)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn("ulimit -n", p.stderr)
                self.assertIn("shard-000000.sfs", p.stderr)


    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("capsh"),
                         "needs root to drop CAP_IPC_LOCK (capsh)")
    def test_an_io_uring_ring_refused_by_the_memlock_limit_says_so(self):
        # Without CAP_IPC_LOCK, under RLIMIT_MEMLOCK 0, io_uring_queue_init fails: the
        # message said only "Cannot allocate memory".
        from clitest import SHARDFEED
        import subprocess
        p = subprocess.run(["capsh", "--drop=cap_ipc_lock", "--", "-c",
                            f"ulimit -l 0; exec {SHARDFEED} bench {self.good} --batch-size 1 "
                            "--engine uring"], capture_output=True, text=True, timeout=60)
        if p.returncode == 0:
            self.skipTest("this kernel does not count rings against RLIMIT_MEMLOCK")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("RLIMIT_MEMLOCK is 0 KiB", p.stderr)
        self.assertIn("engine pread", p.stderr)


if __name__ == "__main__":
    unittest.main()
