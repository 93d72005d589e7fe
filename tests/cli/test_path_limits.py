"""Folders whose paths come near the kernel's PATH_MAX (4096 bytes with the NUL): a path
shardfeed makes in one (a folder's path and a file name) that would not fit is refused
as too long, never cut short, which would name another file.

A path that long is made of nested folders (a name is at most 255 bytes) under the
scratch folder. Run by ctest (SHARDFEED, SF_TEST_TMP in the environment) or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_path_limits.py -v
"""
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import ScratchTest, run, write_samples  # noqa: E402

PATH_CAP = 4096  # PATH_MAX: the longest path is 4095 bytes


def long_path(base, length):
    """A path of exactly `length` bytes under `base` (folders of at most 255-byte names),
    not made."""
    path = base
    while len(path) < length:
        room = length - len(path) - 1  # for the "/"
        n = min(255, room)
        if 0 < room - n < 2:  # leave at least "/x" for the last name
            n = room - 2
        path += "/" + "d" * n
    assert len(path) == length, (len(path), length)
    return path


def long_dir(base, length):
    """long_path(base, length), made."""
    path = long_path(base, length)
    os.makedirs(path)
    return path


def copy_within(folder, src, dst):
    """Copies folder/src to folder/dst, through the folder's descriptor: folder/src itself
    may be too long a path to open."""
    d = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        i = os.open(src, os.O_RDONLY, dir_fd=d)
        o = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=d)
        with os.fdopen(i, "rb") as fi, os.fdopen(o, "wb") as fo:
            shutil.copyfileobj(fi, fo)
    finally:
        os.close(d)


class Base(ScratchTest):
    def setUp(self):
        super().setUp()
        self.tmp = os.path.abspath(self.tmp)
        self.inp = os.path.join(self.tmp, "in")


class Pack(Base):
    # The longest name pack writes in its output folder: a shard's temporary,
    # "/.shard-1048575.sfs.<16 hex>.tmp" (40 bytes with the "/").
    LONGEST = 40

    def test_an_output_folder_too_long_for_the_temporary_names_is_refused(self):
        write_samples(self.inp, 4, shape=(4,))
        # 4060 + "/.shard-000000.sfs.<16 hex>.tmp" is 4099 bytes: cut to 4095, pack wrote
        # every shard under another name than its own temporary one.
        out = long_path(os.path.join(self.tmp, "o"), 4060)
        p = run("pack", self.inp, "-o", out)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("the output folder's path is too long (4060 bytes; at most 4055", p.stderr)
        self.assertFalse(os.path.exists(out), "refused before anything is made")

    def test_an_output_folder_just_short_enough_is_packed(self):
        write_samples(self.inp, 4, shape=(4,))
        out = long_path(os.path.join(self.tmp, "o"), PATH_CAP - 1 - self.LONGEST)
        run("pack", self.inp, "-o", out, check=0)
        self.assertEqual(sorted(os.listdir(out)), ["manifest.sfm", "shard-000000.sfs"])
        run("verify", out, check=0)

    def test_an_npy_input_folder_too_long_for_a_file_path_is_refused(self):
        # 4085 bytes: "<in>/img_0.npy" fits (4095), "<in>/label_0.npy" (4097) does not: pack
        # listed the folder through its descriptor but opened "<in>/label_0.np", another file.
        write_samples(self.inp, 2, shape=(4,))
        far = long_path(os.path.join(self.tmp, "i"), 4085)
        os.makedirs(os.path.dirname(far))
        os.rename(self.inp, far)
        out = os.path.join(self.tmp, "ds")
        p = run("pack", far, "-o", out)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("the folder's path is too long (4085 bytes; with /label_0.npy at most 4083)", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))


class Merge(Base):
    def pack_parts(self, n=2):
        write_samples(self.inp, 8, shape=(256,))
        parts = []
        for k in range(n):
            d = os.path.join(self.tmp, f"part{k}")
            run("pack", self.inp, "-o", d, "--part", f"{k}/{n}", "--shard-size", "4KiB", "--align", "64",
                check=0)
            parts.append(d)
        return parts

    def test_an_output_folder_too_long_for_the_temporary_names_is_refused(self):
        parts = self.pack_parts()
        out = long_path(os.path.join(self.tmp, "o"), 4060)
        p = run("merge", *parts, "-o", out)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("the output folder's path is too long (4060 bytes; at most 4055", p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_a_part_folder_too_long_for_its_shard_names_is_refused(self):
        parts = self.pack_parts()
        # 4080 bytes: "<part>/manifest.sfm" fits (4093), "<part>/shard-000000.sfs" (4097)
        # does not. Cut to 4095 bytes it was "<part>/shard-000000.s": here a copy of the
        # part's shard 0, which merge read as if it were that shard.
        far = long_path(os.path.join(self.tmp, "p"), 4080)
        os.makedirs(os.path.dirname(far))
        shutil.move(parts[1], far)
        copy_within(far, "shard-000000.sfs", "shard-000000.s")
        out = os.path.join(self.tmp, "whole")
        p = run("merge", parts[0], far, "-o", out)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("the folder's path is too long (4080 bytes; with /shard-000000.sfs at most 4078)",
                      p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))


class Verify(Base):
    def test_a_folder_too_long_for_shard_paths_is_verified_through_the_folder(self):
        # 4080 bytes: "<ds>/manifest.sfm" fits, "<ds>/shard-000000.sfs" (4097) does not; cut to
        # 4095 bytes it was "<ds>/shard-000000.s", which verify opened instead (here: not
        # there, "shard file is missing"). verify opens the shards in the folder, as open does.
        write_samples(self.inp, 4, shape=(4,))
        ds = long_path(os.path.join(self.tmp, "v"), 4080)
        os.makedirs(os.path.dirname(ds))
        run("pack", self.inp, "-o", os.path.join(self.tmp, "ds"), check=0)
        os.rename(os.path.join(self.tmp, "ds"), ds)
        p = run("verify", ds)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class Push(Base):
    def test_a_folder_too_long_for_its_lock_file_is_refused(self):
        # 4080 bytes: "<ds>/manifest.sfm" fits, "<ds>/.shardfeed.lock" (4096) does not. Its
        # open failed and push went on unlocked, as for a folder it may not write, until a
        # shard's path failed in the kernel; it is refused, naming the folder, first.
        write_samples(self.inp, 4, shape=(4,))
        ds = long_path(os.path.join(self.tmp, "u"), 4080)
        os.makedirs(os.path.dirname(ds))
        run("pack", self.inp, "-o", os.path.join(self.tmp, "ds"), check=0)
        os.rename(os.path.join(self.tmp, "ds"), ds)
        p = run("push", ds, "http://127.0.0.1:9/ds")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("the folder's path is too long (4080 bytes; with /.shardfeed.lock at most 4079)",
                      p.stderr)


if __name__ == "__main__":
    unittest.main()
