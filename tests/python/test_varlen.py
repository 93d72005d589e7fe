"""Variable-length fields through shardfeed.Loader (varlen="list" and "pair") and
shardfeed.open, numeric ones (int32 tokens) next to bytes. `shardfeed pack` writes variable-
length fields only as bytes (list, tar, ImageFolder inputs), so sfwrite.py writes this dataset
from SPEC.md, and `shardfeed verify` checks it first (packed bytes fields are covered by
test_imagefolder.py and test_compressed.py). See sfpytest.py for how to run it."""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import HAVE_TORCH, as_numpy, cli, remove, scratch, shardfeed, torch  # noqa: E402
import sfwrite  # noqa: E402

N = 61
B = 8
TMP = DS = None


def sample(i):
    return {
        "img": (np.arange(12, dtype=np.uint8).reshape(3, 4) + i).astype(np.uint8),
        "text": bytes((i * 3 + j) % 256 for j in range(i * 7 % 23)),  # empty for i % 23 == 0
        "tokens": (np.arange(i % 6, dtype=np.int32) - i),
        "label": np.int64(i * 11),
    }


SAMPLES = [sample(i) for i in range(N)]


def setUpModule():
    global TMP, DS
    TMP = scratch("varlen-")
    DS = sfwrite.write_dataset(
        os.path.join(TMP, "ds"),
        [("img", "uint8", sfwrite.FIXED, (3, 4)), ("text", "bytes", sfwrite.VAR, None),
         ("tokens", "int32", sfwrite.VAR, None), ("label", "int64", sfwrite.INLINE, ())],
        SAMPLES, align=16, per_shard=25)
    cli("verify", DS)  # the C library agrees the writer followed SPEC.md


def tearDownModule():
    remove(TMP)


class VarLen(unittest.TestCase):
    def test_dataset(self):
        ds = shardfeed.open(DS)
        self.assertEqual([f.storage for f in ds.fields], ["fixed", "variable", "variable", "inline"])
        self.assertEqual(ds.fields[1].dtype, "bytes")
        for i in range(N):
            s = ds[i]
            self.assertEqual(s["text"], SAMPLES[i]["text"])
            self.assertIsInstance(s["text"], bytes)
            np.testing.assert_array_equal(s["tokens"], SAMPLES[i]["tokens"])
            self.assertEqual(s["tokens"].dtype, np.int32)
            np.testing.assert_array_equal(s["img"], SAMPLES[i]["img"])
            self.assertEqual(s["label"], SAMPLES[i]["label"])

    def check(self, output):
        seen = []
        for b in shardfeed.Loader(DS, B, seed=3, output=output):
            ids = as_numpy(b.ids)
            self.assertEqual(len(b["text"]), b.size)
            self.assertEqual(len(b["tokens"]), b.size)
            for j, i in enumerate(ids):
                ref = SAMPLES[int(i)]
                self.assertEqual(b["text"][j], ref["text"])
                np.testing.assert_array_equal(as_numpy(b["tokens"][j]), ref["tokens"])
                np.testing.assert_array_equal(as_numpy(b["img"][j]), ref["img"])
                self.assertEqual(int(b["label"][j]), int(ref["label"]))
            seen += ids.tolist()
        self.assertEqual(sorted(seen), list(range(N)))

    def test_list_numpy(self):
        self.check("numpy")

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_list_torch(self):
        self.check("torch")

    def check_pair(self, output):
        for b in shardfeed.Loader(DS, B, shuffle="none", output=output, varlen="pair"):
            ids = as_numpy(b.ids)
            data, offs = (as_numpy(x) for x in b["text"])
            tdata, toffs = (as_numpy(x) for x in b["tokens"])
            self.assertEqual(offs.dtype, np.int64)
            self.assertEqual(len(offs), b.size + 1)
            self.assertEqual(data.dtype, np.uint8)
            self.assertEqual(tdata.dtype, np.int32)
            self.assertEqual(offs[0], 0)
            for j, i in enumerate(ids):
                ref = SAMPLES[int(i)]
                self.assertEqual(data[offs[j]:offs[j + 1]].tobytes(), ref["text"])
                np.testing.assert_array_equal(tdata[toffs[j] // 4:toffs[j + 1] // 4], ref["tokens"])

    def test_pair_numpy(self):
        self.check_pair("numpy")

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_pair_torch(self):
        self.check_pair("torch")
        b = next(iter(shardfeed.Loader(DS, B, output="torch", varlen="pair")))
        self.assertIsInstance(b["text"][0], torch.Tensor)


if __name__ == "__main__":
    unittest.main()
