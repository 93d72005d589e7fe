"""SPEC.md rules every reader enforces, with the messages that say what is wrong: a bad
key is described by what is wrong with it, the same way by verify and by every pack input;
a field that cannot be stored names the file it came from.

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
