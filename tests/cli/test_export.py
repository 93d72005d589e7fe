"""`shardfeed export` never loses, overwrites or half-writes a sample: an output folder
that is not empty is refused; two samples (or a sample and the generated list.csv) that
would write the same name, or a file where a folder must go, stop the export before it
writes anything, naming both; a name too long for the file system says so; the count it
prints is the number of files on disk.

Datasets with such keys are written with tests/python/sfwrite.py (pack cannot make most
of them). Run by ctest (SHARDFEED, SF_TEST_TMP in the environment) or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_export.py -v
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import ScratchTest, run  # noqa: E402
import sfwrite  # noqa: E402

LIST_FIELDS = [("data", "bytes", sfwrite.VAR, None), ("label", "int64", sfwrite.INLINE, ())]


def files_under(root):
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def list_samples(n):
    return [{"data": b"file %d" % i, "label": np.int64(i)} for i in range(n)]


class Base(ScratchTest):
    def setUp(self):
        super().setUp()
        self.out = os.path.join(self.tmp, "out")

    def dataset(self, name, fields, samples, keys, source=None, **kw):
        meta = {"source": source.encode()} if source else None
        return sfwrite.write_dataset(os.path.join(self.tmp, name), fields, samples, keys=keys,
                                     metadata=meta, **kw)

    def assert_refused(self, p, *needles):
        """Exit 1 (the dataset is fine; export cannot write it), the message names what
        clashes, and nothing was written: the output folder it created is gone."""
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        for n in needles:
            self.assertIn(n, p.stderr)
        self.assertFalse(os.path.exists(self.out), files_under(self.out) if os.path.isdir(self.out) else "")


class Collisions(Base):
    def test_key_list_csv_against_the_generated_list(self):
        ds = self.dataset("ds", LIST_FIELDS, list_samples(3), ["a.txt", "list.csv", "b.txt"], "list")
        run("verify", ds, check=0)
        self.assert_refused(run("export", ds, "-o", self.out), "list.csv", "sample 1",
                            "key 'list.csv'", "the generated list.csv")

    def test_npy_field_key_names_that_meet(self):
        # img_x_1.npy is field "img" of key "x_1" and field "img_x" of key "1".
        fields = [("img", "int32", sfwrite.FIXED, (2,)), ("img_x", "int32", sfwrite.FIXED, (2,))]
        samples = [{"img": np.arange(2, dtype=np.int32) + i, "img_x": np.arange(2, dtype=np.int32)}
                   for i in range(2)]
        ds = self.dataset("ds", fields, samples, ["x_1", "1"])
        p = run("export", ds, "-o", self.out, "--npy")
        self.assert_refused(p, "img_x_1.npy", "sample 0 (key 'x_1', field 'img')",
                            "sample 1 (key '1', field 'img_x')")

    def test_file_where_a_folder_must_go(self):
        # tar layout: key "a" writes the file a.cls; key "a.cls/b" needs a folder a.cls.
        fields = [("cls", "bytes", sfwrite.VAR, None)]
        for keys in (["a", "a.cls/b"], ["a.cls/b", "a"]):
            with self.subTest(keys=keys):
                ds = self.dataset("ds-" + keys[0].replace("/", "_"), fields, [{"cls": b"1"}] * 2, keys, "tar")
                self.assert_refused(run("export", ds, "-o", self.out), "'a.cls'",
                                    "one as a file, the other as a folder", "key 'a'", "key 'a.cls/b'")

    def test_list_folder_and_file(self):
        ds = self.dataset("ds", LIST_FIELDS, list_samples(3), ["x/y.bin", "x", "z.bin"], "list")
        self.assert_refused(run("export", ds, "-o", self.out), "'x'", "key 'x/y.bin'", "key 'x'")

    def test_distinct_names_export(self):
        # Names that differ only in case are distinct here (a case-sensitive file system);
        # a file next to a folder of a longer name is fine.
        ds = self.dataset("ds", LIST_FIELDS, list_samples(4), ["A.bin", "a.bin", "a", "ab/c"], "list")
        p = run("export", ds, "-o", self.out, check=0)
        on_disk = files_under(self.out)
        self.assertEqual(on_disk, ["A.bin", "a", "a.bin", "ab/c", "list.csv"])
        self.assertIn(f"exported {len(on_disk)} files", p.stdout)
        with open(os.path.join(self.out, "a.bin"), "rb") as f:
            self.assertEqual(f.read(), b"file 1")


class OutputFolder(Base):
    def setUp(self):
        super().setUp()
        self.ds = self.dataset("ds", LIST_FIELDS, list_samples(2), ["a.txt", "b.txt"], "list")

    def test_not_empty_is_refused_and_untouched(self):
        os.makedirs(self.out)
        with open(os.path.join(self.out, "a.txt"), "wb") as f:
            f.write(b"precious")
        p = run("export", self.ds, "-o", self.out)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("not empty", p.stderr)
        self.assertEqual(files_under(self.out), ["a.txt"])
        with open(os.path.join(self.out, "a.txt"), "rb") as f:
            self.assertEqual(f.read(), b"precious")

    def test_hard_link_to_a_file_outside_is_never_written_through(self):
        outside = os.path.join(self.tmp, "outside.txt")
        with open(outside, "wb") as f:
            f.write(b"precious")
        os.makedirs(self.out)
        os.link(outside, os.path.join(self.out, "a.txt"))
        p = run("export", self.ds, "-o", self.out)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        with open(outside, "rb") as f:
            self.assertEqual(f.read(), b"precious")

    def test_empty_folder_is_used(self):
        os.makedirs(self.out)
        p = run("export", self.ds, "-o", self.out, check=0)
        self.assertEqual(files_under(self.out), ["a.txt", "b.txt", "list.csv"])
        self.assertIn("exported 3 files", p.stdout)


class Names(Base):
    def test_name_over_the_file_system_limit(self):
        # A valid 250-byte key: img_<key>.npy is 258 bytes, over NAME_MAX (255).
        key = "k" * 250
        fields = [("img", "uint8", sfwrite.FIXED, (3,))]
        ds = self.dataset("ds", fields, [{"img": np.arange(3, dtype=np.uint8)}], [key])
        run("verify", ds, check=0)
        p = run("export", ds, "-o", self.out)
        self.assert_refused(p, "too long", "258 bytes", "key '" + key + "'")
        self.assertNotIn("not a safe relative path", p.stderr)

    def test_count_on_failure_is_what_was_written(self):
        # The second sample fails its checksum: the first one's files stay, counted.
        fields = [("img", "uint8", sfwrite.FIXED, (64,))]
        samples = [{"img": np.full(64, i, np.uint8)} for i in range(3)]
        ds = self.dataset("ds", fields, samples, ["a", "b", "c"], per_shard=3)
        path = os.path.join(ds, "shard-000000.sfs")
        data = bytearray(open(path, "rb").read())
        data[data.index(bytes([1] * 64))] ^= 0xFF
        open(path, "wb").write(data)
        p = run("export", ds, "-o", self.out)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(files_under(self.out), ["img_a.npy"])
        self.assertIn("stopped after writing 1 files", p.stderr)


if __name__ == "__main__":
    unittest.main()
