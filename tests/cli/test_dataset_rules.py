"""SPEC.md rules every reader enforces, with the messages that say what is wrong:
keys are distinct across the whole dataset (verify, and every command that opens one,
name both records); bool values are 0 or 1 (inline ones at open and in verify, payload
ones in verify, the streaming reader and export, compressed ones with verify --decompress;
pack refuses a .npy bool array holding anything else); a bad key is described by what is
wrong with it, the same way by verify and by every pack input; a field that cannot be
stored names the file it came from.

Run by ctest (SHARDFEED, SF_TEST_TMP in the environment) or by hand:
  SHARDFEED=build/shardfeed /usr/bin/python3 tests/cli/test_dataset_rules.py -v
"""
import io
import os
import sys
import tarfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import ScratchTest, run  # noqa: E402
import sfwrite  # noqa: E402


class Base(ScratchTest):
    def setUp(self):
        super().setUp()
        self.n = 0

    def path(self, name):
        self.n += 1
        return os.path.join(self.tmp, f"{name}-{self.n}")

    def dataset(self, fields, samples, **kw):
        return sfwrite.write_dataset(self.path("ds"), fields, samples, **kw)


FIELDS = [("img", "uint8", sfwrite.FIXED, (16,)), ("label", "int64", sfwrite.INLINE, ())]


def samples(n):
    return [{"img": np.full(16, i, np.uint8), "label": np.int64(i)} for i in range(n)]


class DistinctKeys(Base):
    def test_repeat_across_shards_names_both_records(self):
        ds = self.dataset(FIELDS, samples(6), per_shard=2, keys=["a", "b", "c", "d", "b", "e"])
        p = run("verify", ds, check=2)
        self.assertIn("shard-000002.sfs record 0", p.stdout)
        self.assertIn("key 'b' repeats the key of shard-000000.sfs record 1", p.stdout)
        self.assertIn("1 problem(s)", p.stdout)
        out = os.path.join(self.tmp, "out")
        for args in (["inspect", ds], ["export", ds, "-o", out], ["bench", ds, "--batch-size", "2"]):
            with self.subTest(command=args[0]):
                p = run(*args, check=2)
                self.assertIn("shard-000002.sfs: record 0 (sample 4) has the key 'b' of "
                              "shard-000000.sfs record 1 (sample 1)", p.stderr)
                self.assertFalse(os.path.exists(out))

    def test_every_repeat_is_reported_within_a_shard(self):
        ds = self.dataset(FIELDS, samples(5), keys=["x", "y", "x", "z", "x"])
        p = run("verify", ds, "--json", check=2)
        self.assertEqual(p.stdout.count("repeats the key of shard-000000.sfs record 0"), 2)

    def test_keys_differing_in_one_byte_are_distinct(self):
        keys = ["k%03d" % i for i in range(300)] + ["K000", "k00", "k0000"]
        ds = self.dataset(FIELDS, samples(len(keys)), per_shard=7, keys=keys)
        run("verify", ds, check=0)
        run("inspect", ds, check=0)


class Bools(Base):
    BOOL_FIELDS = [("flag", "bool", sfwrite.INLINE, ()), ("mask", "bool", sfwrite.FIXED, (16,))]

    def bools(self, flag2=1, mask2=1, codec=None):
        fields = self.BOOL_FIELDS if codec is None else [self.BOOL_FIELDS[0], self.BOOL_FIELDS[1] + (codec,)]
        s = [{"flag": np.array(i % 2, np.uint8), "mask": np.ones(16, np.uint8) * (i % 2)} for i in range(3)]
        s[2] = {"flag": np.array(flag2, np.uint8), "mask": np.full(16, mask2, np.uint8)}
        return self.dataset(fields, s)

    def test_intact(self):
        ds = self.bools()
        run("verify", ds, check=0)
        run("bench", ds, "--batch-size", "3", check=0)

    def test_inline_bool_is_refused_at_open_and_by_verify(self):
        ds = self.bools(flag2=2)
        p = run("verify", ds, check=2)
        self.assertIn("record 2: bool field 'flag' holds byte 0x02", p.stdout)
        for args in (["inspect", ds], ["bench", ds], ["export", ds, "-o", os.path.join(self.tmp, "o")]):
            with self.subTest(command=args[0]):
                self.assertIn("bool field 'flag' holds byte 0x02", run(*args, check=2).stderr)

    def test_payload_bool_is_refused_by_verify_reader_and_export(self):
        ds = self.bools(mask2=0xFF)
        p = run("verify", ds, check=2)
        self.assertIn("record 2: bool field 'mask' holds a byte other than 0 and 1", p.stdout)
        p = run("bench", ds, "--batch-size", "3", check=2)
        self.assertIn("record 2 (sample 2)", p.stderr)
        self.assertIn("field 'mask': bool value holds byte 0xff", p.stderr)
        p = run("export", ds, "-o", os.path.join(self.tmp, "o"), check=2)
        self.assertIn("field 'mask': bool value holds byte 0xff", p.stderr)

    def test_compressed_payload_bool_is_refused_after_decompression(self):
        ds = self.bools(mask2=2, codec="zstd")
        run("verify", ds, check=0)  # the stored bytes hash fine: --decompress looks inside
        p = run("verify", ds, "--decompress", check=2)
        self.assertIn("field 'mask': bool value holds byte 0x02", p.stdout)
        p = run("bench", ds, "--batch-size", "3", check=2)
        self.assertIn("field 'mask': bool value holds byte 0x02", p.stderr)

    def test_pack_refuses_a_npy_bool_array_with_other_bytes(self):
        inp = self.path("in")
        os.makedirs(inp)
        np.save(os.path.join(inp, "m_0.npy"), np.array([True, False]))
        np.save(os.path.join(inp, "m_1.npy"), np.frombuffer(b"\x01\x05", dtype=np.bool_))
        out = self.path("out")
        p = run("pack", inp, "-o", out, check=1)
        self.assertIn("m_1.npy: bool array holds byte 0x05 at element 1", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "manifest.sfm")))


class KeyMessages(Base):
    RULE = "a key is a relative path of 1 to 255 bytes of UTF-8"

    def test_verify_says_what_is_wrong_with_a_key(self):
        cases = {"../x": "has a '..' component at byte 0", "a//b": "has an empty component",
                 "a/./b": "has a '.' component at byte 2", "a\x01b": "has a control character at byte 1",
                 b"a\xffb": "is not well-formed UTF-8 at byte 1", "/etc": "has an empty component (a leading, trailing or doubled '/') at byte 0"}
        for key, why in cases.items():
            with self.subTest(key=key):
                ds = self.dataset(FIELDS, samples(2), keys=["ok", key])
                p = run("verify", ds, check=2)
                self.assertIn("record 1: key '", p.stdout)
                self.assertIn(why, p.stdout)
                self.assertIn(self.RULE, p.stdout)
                self.assertNotIn("A-Za-z0-9", p.stdout)

    def test_every_input_gives_the_same_key_message(self):
        # npy: the key is what follows the last '_' of img_...npy: ".."
        npy = self.path("npy")
        os.makedirs(npy)
        np.save(os.path.join(npy, "img_1.npy"), np.zeros(2, np.uint8))
        with open(os.path.join(npy, "img_...npy"), "wb") as f:
            np.save(f, np.zeros(2, np.uint8))
        # list: a path that leaves the list's folder
        lst_dir = self.path("lst")
        os.makedirs(lst_dir)
        open(os.path.join(lst_dir, "a.bin"), "wb").close()
        lst = os.path.join(lst_dir, "l.csv")
        with open(lst, "w") as f:
            f.write("a.bin,1\n../lst/a.bin,2\n")
        # tar: a member whose key has a '..' part
        tar = self.path("t") + ".tar"
        with tarfile.open(tar, "w") as t:
            for name in ("ok.cls", "a/../b.cls"):
                ti = tarfile.TarInfo(name)
                ti.size = 1
                t.addfile(ti, io.BytesIO(b"1"))
        for inp, where in ((npy, "img_...npy"), (lst, "l.csv:2"), (tar, "a/../b.cls")):
            with self.subTest(input=where):
                p = run("pack", inp, "-o", self.path("out"), check=1)
                self.assertIn(where, p.stderr)
                self.assertIn("has a '..' component", p.stderr)
                self.assertIn(self.RULE, p.stderr)
                self.assertNotIn("A-Za-z0-9._-]", p.stderr.split("key")[1])

    def test_a_field_error_names_the_file(self):
        inp = self.path("in")
        os.makedirs(inp)
        for i in range(2):
            np.save(os.path.join(inp, f"img_{i}.npy"), np.zeros((0, 3), np.float32))
            np.save(os.path.join(inp, f"label_{i}.npy"), np.int64(i))
        p = run("pack", inp, "-o", self.path("out"), check=1)
        self.assertIn(os.path.join(inp, "img_0.npy") + ": field 'img'", p.stderr)


if __name__ == "__main__":
    unittest.main()
