"""Scale-out packing: `shardfeed pack --part K/N` (or K/N from the launcher's
environment) writes slices of one shard plan as datasets of their own, and
`shardfeed merge` joins them into exactly the bytes a single pack writes; also
under `mpirun -n 2` (Debian's openmpi-bin) when it is installed.

Run by ctest (SHARDFEED, SF_TEST_TMP in the environment) or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_parts.py -v
"""
import os
import random
import shutil
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import SHARDFEED, ScratchTest, run, write_samples  # noqa: E402
import sfspec  # noqa: E402

MPIRUN = shutil.which("mpirun")
# What launchers set and pack takes as its part: none may leak in from whatever runs the tests.
LAUNCHER_VARS = ["SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "PMI_RANK", "PMI_SIZE"]
# Samples like Fashion-MNIST's: 28x28 uint8 images, labels 0..9.
MNIST_LIKE = dict(shape=(28, 28), dtype=np.uint8, label=lambda i: i % 10)


def setUpModule():
    for var in LAUNCHER_VARS:
        os.environ.pop(var, None)


def clean_env(**extra):
    return dict(os.environ, **extra)


def files(d):
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


def write_imagefolder(root, n_per_class=40):
    rng = random.Random(1)
    for c in ["a", "b b", "ç"]:
        os.makedirs(os.path.join(root, c))
        for i in range(n_per_class):
            with open(os.path.join(root, c, f"{i}.png"), "wb") as f:
                f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000))))


class Parts(ScratchTest):
    SHARD = "24KiB"

    def setUp(self):
        super().setUp()
        self.inp = os.path.join(self.tmp, "in")
        self.whole = os.path.join(self.tmp, "whole")

    def pack_whole(self, *extra):
        run("pack", self.inp, "-o", self.whole, "--shard-size", self.SHARD, "--align", "64", *extra,
            check=0)
        self.assertGreater(len(os.listdir(self.whole)), 6)

    def pack_parts(self, n, *extra, tag="p"):
        dirs = []
        for k in range(n):
            d = os.path.join(self.tmp, f"{tag}{k}")
            p = run("pack", self.inp, "-o", d, "--part", f"{k}/{n}", "--shard-size", self.SHARD,
                    "--align", "64", *extra, check=0)
            self.assertIn(f"part {k} of {n}", p.stdout)
            dirs.append(d)
        return dirs

    def merge(self, dirs, check=0):
        out = os.path.join(self.tmp, "merged")
        shutil.rmtree(out, ignore_errors=True)
        shuffled = list(dirs)
        random.Random(len(dirs)).shuffle(shuffled)  # any order
        p = run("merge", *shuffled, "-o", out, check=check)
        return out, p

    def test_npy_parts_merge_to_a_single_pack(self):
        write_samples(self.inp, 300, **MNIST_LIKE)
        self.pack_whole()
        for n in (2, 3, 5):
            dirs = self.pack_parts(n, tag=f"n{n}-")
            total = 0
            for d in dirs:
                run("verify", d, check=0)
                total += sfspec.read_manifest(d)["records"]
            self.assertEqual(total, 300)
            out, _ = self.merge(dirs)
            self.assertEqual(files(out), files(self.whole), f"{n} parts")
            run("verify", out, check=0)

    def test_imagefolder_parts_keep_class_names(self):
        write_imagefolder(self.inp)
        self.pack_whole()
        dirs = self.pack_parts(3)
        for d in dirs:
            self.assertEqual(sfspec.class_names(sfspec.read_manifest(d)), ["a", "b b", "ç"])
        out, _ = self.merge(dirs)
        self.assertEqual(files(out), files(self.whole))

    def test_part_samples_are_slices_in_order(self):
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        whole = [k for k, _ in sfspec.read_records(self.whole)]
        keys = []
        for d in self.pack_parts(4):
            keys += [k for k, _ in sfspec.read_records(d)]
        self.assertEqual(keys, whole)

    def test_parts_from_launcher_environment(self):
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        for rank_var, size_var in (("SLURM_PROCID", "SLURM_NTASKS"),
                                   ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                   ("PMI_RANK", "PMI_SIZE")):
            parts = os.path.join(self.tmp, rank_var)
            for k in range(3):
                env = clean_env(**{rank_var: str(k), size_var: "3"})
                run("pack", self.inp, "-o", os.path.join(parts, "%k"), "--shard-size", self.SHARD,
                    "--align", "64", check=0, env=env)
            out, _ = self.merge([os.path.join(parts, str(k)) for k in range(3)])
            self.assertEqual(files(out), files(self.whole), rank_var)
        # One task is the whole dataset, no part.
        one = os.path.join(self.tmp, "one")
        run("pack", self.inp, "-o", one, "--shard-size", self.SHARD, "--align", "64", check=0,
            env=clean_env(SLURM_PROCID="0", SLURM_NTASKS="1"))
        self.assertEqual(files(one), files(self.whole))
        # Without %k, parts would share a directory: refused.
        p = run("pack", self.inp, "-o", one, check=1,
                env=clean_env(OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="2"))
        self.assertIn("put %k in -o", p.stderr)

    @unittest.skipIf(MPIRUN is None, "mpirun (openmpi-bin) is not installed")
    def test_under_mpirun(self):
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        parts = os.path.join(self.tmp, "mpi")
        cmd = [MPIRUN, "-n", "2", "--oversubscribe"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += [SHARDFEED, "pack", self.inp, "-o", os.path.join(parts, "%k"), "--shard-size",
                self.SHARD, "--align", "64"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("part 0 of 2", p.stdout)
        self.assertIn("part 1 of 2", p.stdout)
        out, _ = self.merge([os.path.join(parts, "0"), os.path.join(parts, "1")])
        self.assertEqual(files(out), files(self.whole))

    def test_bad_merges_are_refused(self):
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        dirs = self.pack_parts(3)
        for args, needle in ((dirs[:2], "2 part(s) given, but the run made 3"),
                             ([dirs[0], dirs[0], dirs[1]], "are both part 0"),
                             ([dirs[0], dirs[1], self.whole], "not one part of a pack split into parts"),
                             ([dirs[0], dirs[1], os.path.join(self.tmp, "nope")],
                              "not a finished dataset part")):
            out, p = self.merge(args, check=1)
            self.assertIn(needle, p.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))
        other = self.pack_parts(3, "--align", "128", tag="other")
        out, p = self.merge([dirs[0], dirs[1], other[2]], check=1)
        self.assertIn("parts of different runs", p.stderr)
        # A damaged shard in a part is caught before anything is written under its name:
        # corrupt data, exit 2 as from every command that reads a dataset.
        shard = os.path.join(dirs[1], "shard-000000.sfs")
        with open(shard, "r+b") as f:
            f.seek(os.path.getsize(shard) - 100)
            f.write(b"\xff")
        out, p = self.merge(dirs, check=2)
        self.assertIn("shard-000000.sfs", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))

    def test_parts_of_different_inputs_with_equal_names_and_sizes_are_refused(self):
        """Part 0 of input A and part 1 of input B, B being A with other
        values (so the same dataset_id): refused, naming both parts."""
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        a = self.pack_parts(2, tag="a")
        inp_a = self.inp
        self.inp = os.path.join(self.tmp, "in_b")
        write_samples(self.inp, 200, seed=1, **MNIST_LIKE)
        b = self.pack_parts(2, tag="b")
        for mixed in ([a[0], b[1]], [b[0], a[1]]):
            out, p = self.merge(mixed, check=1)
            self.assertIn("different contents", p.stderr)
            for d in mixed:
                self.assertIn(d, p.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))
            # --ignore-mtimes does not make different contents mergeable
            p = run("merge", *mixed, "-o", out, "--ignore-mtimes", check=1)
            self.assertIn("different contents", p.stderr)
        self.inp = inp_a
        out, _ = self.merge(a)
        self.assertEqual(files(out), files(self.whole))

    def test_parts_of_an_input_whose_times_changed_need_ignore_mtimes(self):
        """An input copied to another machine without its times: the same
        contents, other modification times."""
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        p0 = self.pack_parts(2, tag="m")[0]
        name = os.path.join(self.inp, "img_199.npy")
        st = os.stat(name)
        os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
        p1 = self.pack_parts(2, tag="n")[1]
        out, p = self.merge([p0, p1], check=1)
        self.assertIn("modification times", p.stderr)
        self.assertIn("ignore_mtimes", p.stderr)
        run("merge", p0, p1, "-o", out, "--ignore-mtimes", check=0)
        self.assertEqual(files(out), files(self.whole))

    def test_part_without_input_identity_is_refused(self):
        """A part as shardfeed wrote them before format 1.2: no part_input."""
        import ctypes
        import struct
        xxh = ctypes.CDLL("libxxhash.so.0")
        xxh.XXH3_64bits.restype = ctypes.c_uint64
        xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        write_samples(self.inp, 200, **MNIST_LIKE)
        dirs = self.pack_parts(2)
        path = os.path.join(dirs[1], "manifest.sfm")
        with open(path, "rb") as f:
            b = bytearray(f.read())
        meta_size, = struct.unpack_from("<I", b, 44)
        m = sfspec.read_manifest(dirs[1])
        start = len(b) - 8 - meta_size
        entries = b"".join(struct.pack("<II", len(k), len(v)) + k.encode() + v
                           for k, v in m["metadata"].items() if k != "part_input")
        b = b[:start] + entries
        struct.pack_into("<I", b, 44, len(entries))
        b += struct.pack("<Q", xxh.XXH3_64bits(bytes(b), len(b)))
        with open(path, "wb") as f:
            f.write(b)
        run("verify", dirs[1], check=0)
        out, p = self.merge(dirs, check=1)
        self.assertIn(f"{dirs[1]}: part without an input identity", p.stderr)

    def test_a_part_carries_its_input_identity(self):
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        for d in self.pack_parts(2):
            meta = sfspec.read_manifest(d)["metadata"]
            self.assertEqual(list(meta), ["source", "part", "part_input"])
            self.assertEqual(len(meta["part_input"]), 16)
        self.assertNotIn("part_input", sfspec.read_manifest(self.whole)["metadata"])

    def test_bad_part_options(self):
        write_samples(self.inp, 20, **MNIST_LIKE)
        for arg in ("2/2", "1/0", "x/2", "1-2"):
            p = run("pack", self.inp, "-o", os.path.join(self.tmp, "o"), "--part", arg, check=1)
            self.assertIn("--part takes K/N", p.stderr)
        # More parts than shards: a clear error, not empty datasets.
        p = run("pack", self.inp, "-o", os.path.join(self.tmp, "o"), "--part", "3/4", check=1)
        self.assertIn("too few for 4 parts", p.stderr)


if __name__ == "__main__":
    unittest.main()
