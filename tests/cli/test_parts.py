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


def drop_metadata(dataset_dir, key):
    """Rewrites DATASET_DIR's manifest without the metadata entry KEY, as a shardfeed that
    did not write it would have (the manifest checksum made again)."""
    import ctypes
    import struct
    xxh = ctypes.CDLL("libxxhash.so.0")
    xxh.XXH3_64bits.restype = ctypes.c_uint64
    xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    path = os.path.join(dataset_dir, "manifest.sfm")
    with open(path, "rb") as f:
        b = bytearray(f.read())
    meta_size, = struct.unpack_from("<I", b, 44)
    m = sfspec.read_manifest(dataset_dir)
    assert key in m["metadata"]
    start = len(b) - 8 - meta_size
    entries = b"".join(struct.pack("<II", len(k), len(v)) + k.encode() + v
                       for k, v in m["metadata"].items() if k != key)
    b = b[:start] + entries
    struct.pack_into("<I", b, 44, len(entries))
    b += struct.pack("<Q", xxh.XXH3_64bits(bytes(b), len(b)))
    with open(path, "wb") as f:
        f.write(b)


def set_mtime(path, delta_ns=1):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + delta_ns))


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
        # Each refusal names the part that is missing or repeated, not only how many came.
        for args, needle in ((dirs[:2], "part 2 of 3 is missing: 2 part(s) given, the run made 3"),
                             ([dirs[0], dirs[2]], "part 1 of 3 is missing"),
                             ([dirs[1], dirs[2], dirs[0], dirs[1]],
                              f"{dirs[1]} and {dirs[1]} are both part 1 of 3"),
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
        halves = self.pack_parts(2, tag="halves")
        out, p = self.merge([dirs[0], dirs[1], halves[1]], check=1)
        self.assertIn("parts of different runs", p.stderr)
        self.assertIn(f"{halves[1]} part 1 of 2", p.stderr)
        # A damaged shard in a part is caught before anything is written under its name:
        # corrupt data, exit 2 as from every command that reads a dataset.
        shard = os.path.join(dirs[1], "shard-000000.sfs")
        with open(shard, "r+b") as f:
            f.seek(os.path.getsize(shard) - 100)
            f.write(b"\xff")
        out, p = self.merge(dirs, check=2)
        self.assertIn("shard-000000.sfs", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))

    def test_merging_into_one_of_the_parts_is_refused_also_with_force(self):
        # With --force, preparing the output deleted that part's manifest and shards before
        # they were copied: the merge then failed, and the part was gone.
        write_samples(self.inp, 200, **MNIST_LIKE)
        dirs = self.pack_parts(2)
        before = files(dirs[0])
        link = os.path.join(self.tmp, "link-to-p0")
        os.symlink(dirs[0], link)
        for out in (dirs[0], link):
            for force in ((), ("--force",)):
                p = run("merge", *dirs, "-o", out, *force, check=1)
                self.assertIn("the output folder is the part", p.stderr)
                self.assertEqual(files(dirs[0]), before)
                run("verify", dirs[0], check=0)

    def test_a_part_with_a_damaged_record_is_refused(self):
        """One payload byte flipped in the last part's first shard: header, index and footer
        are intact, only the record's checksum tells. merge refuses it as verify does (exit
        2), naming the shard file, the record and the byte offset, and leaves no shard or
        manifest under its final name (nor a temporary) in the output folder. Was: merged
        with exit 0 into a dataset that verify refused."""
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        dirs = self.pack_parts(3)
        shard = os.path.join(dirs[2], "shard-000000.sfs")
        with open(shard, "r+b") as f:
            f.seek(130)  # record 0's image: data starts at 128 (--align 64)
            b = f.read(1)
            f.seek(130)
            f.write(bytes([b[0] ^ 0xFF]))
        v = run("verify", dirs[2], check=2)
        self.assertIn("record 0", v.stdout + v.stderr)
        out = os.path.join(self.tmp, "merged")
        os.makedirs(out)  # made beforehand, so merge leaves the folder itself
        for order in (dirs, dirs[::-1]):
            p = run("merge", *order, "-o", out, check=2)
            self.assertIn(f"{shard}: record 0: checksum mismatch in its payload at bytes 128..", p.stderr)
            self.assertIn("a damaged part", p.stderr)
            self.assertEqual(os.listdir(out), [])
        # The part mended: the merge goes through and writes the single pack's bytes.
        with open(shard, "r+b") as f:
            f.seek(130)
            f.write(b)
        run("merge", *dirs, "-o", out, check=0)
        self.assertEqual(files(out), files(self.whole))

    def test_a_forced_merge_that_fails_leaves_the_dataset_it_was_to_replace(self):
        """merge --force over a complete dataset, one part damaged: refused (exit 2), and the
        dataset already in the folder is byte for byte as it was (the old one is removed only
        once every merged shard is written). Was: --force removed it first, so a refused merge
        left neither."""
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        dirs = self.pack_parts(3)
        other = os.path.join(self.tmp, "other-input")
        write_samples(other, 150, seed=9, **MNIST_LIKE)
        out = os.path.join(self.tmp, "merged")
        run("pack", other, "-o", out, "--shard-size", self.SHARD, check=0)
        before = files(out)
        shard = os.path.join(dirs[2], "shard-000000.sfs")
        with open(shard, "r+b") as f:
            f.seek(130)
            b = f.read(1)
            f.seek(130)
            f.write(bytes([b[0] ^ 0xFF]))
        p = run("merge", *dirs, "-o", out, "--force", check=2)
        self.assertIn("a damaged part", p.stderr)
        self.assertIn(f"the dataset in {out} is as it was", p.stderr)
        self.assertEqual(files(out), before)
        run("verify", out, check=0)
        with open(shard, "r+b") as f:
            f.seek(130)
            f.write(b)
        run("merge", *dirs, "-o", out, "--force", check=0)
        self.assertEqual(files(out), files(self.whole))

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
        self.assertIn("the same names and sizes but different modification times", p.stderr)
        self.assertIn("ignore_mtimes", p.stderr)
        run("merge", p0, p1, "-o", out, "--ignore-mtimes", check=0)
        self.assertEqual(files(out), files(self.whole))

    def test_part_without_input_identity_is_refused(self):
        """A part as shardfeed wrote them before format 1.2: no part_input."""
        write_samples(self.inp, 200, **MNIST_LIKE)
        dirs = self.pack_parts(2)
        drop_metadata(dirs[1], "part_input")
        run("verify", dirs[1], check=0)
        out, p = self.merge(dirs, check=1)
        self.assertIn(f"{dirs[1]}: part without an input identity", p.stderr)

    def test_parts_of_format_1_2_merge_only_when_their_files_agree(self):
        """A part as shardfeed wrote them in format 1.2: part_input, no part_files. Parts
        whose one hash of names, sizes and times agree merge as before; when it differs,
        nothing tells whether only the times do, so --ignore-mtimes refuses them too."""
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        a = self.pack_parts(2, tag="a")
        for d in a:
            drop_metadata(d, "part_files")
        out, _ = self.merge(a)
        self.assertEqual(files(out), files(self.whole))
        set_mtime(os.path.join(self.inp, "img_199.npy"))
        b = self.pack_parts(2, tag="b")
        for old, mixed in ((a[0], [a[0], b[1]]), (a[1], [b[0], a[1]])):
            out, p = self.merge(mixed, check=1)
            self.assertIn("differ in names, sizes or modification times", p.stderr)
            self.assertIn(f"{old} was packed by a shardfeed before format 1.3", p.stderr)
            p = run("merge", *mixed, "-o", out, "--ignore-mtimes", check=1)
            self.assertIn(f"{old} was packed by a shardfeed before format 1.3", p.stderr)
            self.assertIn("cannot tell that only the times differ", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))

    def test_a_part_carries_its_input_identity(self):
        write_samples(self.inp, 200, **MNIST_LIKE)
        self.pack_whole()
        for d in self.pack_parts(2):
            m = sfspec.read_manifest(d)
            self.assertEqual(m["version"], (1, 3))
            meta = m["metadata"]
            self.assertEqual(list(meta), ["source", "part", "part_input", "part_files"])
            self.assertEqual(len(meta["part_input"]), 16)
            self.assertEqual(len(meta["part_files"]), 16)
        meta = sfspec.read_manifest(self.whole)["metadata"]
        self.assertNotIn("part_input", meta)
        self.assertNotIn("part_files", meta)
        # A list input: the list file's size, hash and base name too.
        lst = self.write_list([i % 3 for i in range(40)])
        run("pack", lst, "-o", os.path.join(self.tmp, "l0"), "--part", "0/2", "--shard-size", "4096",
            "--align", "64", check=0)
        v = sfspec.read_manifest(os.path.join(self.tmp, "l0"))["metadata"]["part_files"]
        self.assertEqual(len(v), 32 + len("list.csv"))
        self.assertEqual(int.from_bytes(v[16:24], "little"), os.path.getsize(lst))
        self.assertEqual(v[32:], b"list.csv")

    def write_list(self, labels, name="list.csv"):
        """40 files of 100 bytes each under self.tmp/ml, and a list of them with LABELS."""
        d = os.path.join(self.tmp, "ml")
        os.makedirs(d, exist_ok=True)
        for i in range(40):
            with open(os.path.join(d, f"{i:03d}.bin"), "wb") as f:
                f.write(bytes([i]) * 100)
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write("path,label\n" + "".join(f"{i:03d}.bin,{labels[i]}\n" for i in range(40)))
        return path

    def pack_list_part(self, lst, k, tag):
        d = os.path.join(self.tmp, f"{tag}{k}")
        run("pack", lst, "-o", d, "--part", f"{k}/2", "--shard-size", "4096", "--align", "64", check=0)
        return d

    def test_parts_of_two_versions_of_a_list_are_refused(self):
        """Part 0 packed from a list, part 1 from the list with other labels (the same paths,
        so the same dataset_id; labels changed only outside each shard's first record, so
        the sampled values agree): refused with and without --ignore-mtimes, naming the list
        file and how it differs. Was: merge blamed the modification times, and
        --ignore-mtimes merged labels of neither list."""
        v1 = [i % 3 for i in range(40)]
        lst = self.write_list(v1)
        whole = os.path.join(self.tmp, "whole")
        run("pack", lst, "-o", whole, "--shard-size", "4096", "--align", "64", check=0)
        firsts = {s["first"] for s in sfspec.read_manifest(whole)["shards"]}
        self.assertGreater(len(firsts), 1)
        p0 = self.pack_list_part(lst, 0, "a")
        size1 = os.path.getsize(lst)
        # Another size: labels 100 and up.
        self.write_list([x if i in firsts else x + 100 for i, x in enumerate(v1)])
        size2 = os.path.getsize(lst)
        self.assertNotEqual(size1, size2)
        p1 = self.pack_list_part(lst, 1, "b")
        # The same size: labels 0 and 1 swapped.
        self.write_list([x if i in firsts or x == 2 else 1 - x for i, x in enumerate(v1)])
        self.assertEqual(os.path.getsize(lst), size1)
        q1 = self.pack_list_part(lst, 1, "c")
        out = os.path.join(self.tmp, "merged")
        for second, needle in ((p1, f"'list.csv' ({size1} bytes for {p0}, {size2} bytes for {p1})"),
                               (q1, f"'list.csv' (the same size, {size1} bytes, other bytes)")):
            for extra in ([], ["--ignore-mtimes"]):
                p = run("merge", p0, second, "-o", out, *extra, check=1)
                self.assertIn("different versions of the list file", p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertNotIn("modification times", p.stderr)
                self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))
        # A list of another name with the same rows: its name is what differs.
        other = self.write_list(v1, name="other.csv")
        p = run("merge", p0, self.pack_list_part(other, 1, "d"), "-o", out, "--ignore-mtimes", check=1)
        self.assertIn("list files of different names ('list.csv' and 'other.csv')", p.stderr)

    def test_a_list_copied_without_times_merges_with_ignore_mtimes(self):
        """The same list and files, the list's and one file's times changed (a copy without
        -p): refused as differing in modification times only; --ignore-mtimes merges them
        into the single pack's bytes."""
        lst = self.write_list([i % 3 for i in range(40)])
        whole = os.path.join(self.tmp, "whole")
        run("pack", lst, "-o", whole, "--shard-size", "4096", "--align", "64", check=0)
        p0 = self.pack_list_part(lst, 0, "a")
        set_mtime(lst)
        set_mtime(os.path.join(os.path.dirname(lst), "039.bin"))
        p1 = self.pack_list_part(lst, 1, "b")
        out = os.path.join(self.tmp, "merged")
        p = run("merge", p0, p1, "-o", out, check=1)
        self.assertIn("the same names and sizes but different modification times", p.stderr)
        self.assertIn("ignore_mtimes", p.stderr)
        run("merge", p0, p1, "-o", out, "--ignore-mtimes", check=0)
        self.assertEqual(files(out), files(whole))

    def test_input_files_of_other_sizes_are_refused_also_with_ignore_mtimes(self):
        """A .tar.gz compressed again at another level: the same members (so the same
        dataset_id and values), another file size. Refused, also under --ignore-mtimes."""
        import gzip
        import io
        import tarfile
        os.makedirs(self.inp)
        buf = io.BytesIO()
        rng = random.Random(3)
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
            for i in range(60):
                data = bytes(rng.randrange(4) for _ in range(rng.randrange(100, 900)))
                ti = tarfile.TarInfo(f"s/{i:04d}.bin")
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
        tar = os.path.join(self.inp, "s.tar.gz")
        with open(tar, "wb") as f:
            f.write(gzip.compress(buf.getvalue(), compresslevel=1, mtime=0))
        self.SHARD = "8KiB"
        a = self.pack_parts(2, tag="a")
        size1 = os.path.getsize(tar)
        with open(tar, "wb") as f:
            f.write(gzip.compress(buf.getvalue(), compresslevel=9, mtime=0))
        self.assertNotEqual(os.path.getsize(tar), size1)
        b = self.pack_parts(2, tag="b")
        for extra in ([], ["--ignore-mtimes"]):
            out = os.path.join(self.tmp, "merged")
            p = run("merge", a[0], b[1], "-o", out, *extra, check=1)
            self.assertIn("the same names but different sizes", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))
        out, _ = self.merge(b)

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
