"""shardfeed.open(): inspection and random access. See sfpytest.py for how to run it by hand."""
import gc
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import (HAVE_TORCH, as_numpy, load_source, pack, remove, scratch, shardfeed,  # noqa: E402
                      torch, write_samples)

N = 57
TMP = SRC = DS = None


def setUpModule():
    global TMP, SRC, DS
    TMP = scratch("dataset-")
    SRC = os.path.join(TMP, "npy")
    write_samples(SRC, N, shape=(2, 5), dtype=np.float64,
                    extra={"mask": lambda i: np.arange(12, dtype=np.uint8).reshape(3, 4) * i % 7 == 0,
                           "half": lambda i: np.full((3,), i, dtype=np.float16),
                           "small": lambda i: np.int16(-i),
                           "u16": lambda i: np.arange(3, dtype=np.uint16) * i,
                           "u32": lambda i: np.uint32(i + 2 ** 31),
                           "u64": lambda i: np.arange(2, dtype=np.uint64) + 2 ** 63,
                           "i8": lambda i: np.arange(-4, 4, dtype=np.int8).reshape(2, 4),
                           "c64": lambda i: np.full((2,), i - 1j, dtype=np.complex64),
                           "c128": lambda i: np.complex128(i + 2j)})
    DS = pack(SRC, os.path.join(TMP, "ds"), "--shard-size", "8KiB")


def tearDownModule():
    remove(TMP)


class Inspect(unittest.TestCase):
    def test_schema(self):
        ds = shardfeed.open(DS)
        self.assertEqual(len(ds), N)
        by = {f.name: f for f in ds.fields}
        self.assertEqual(sorted(by), ["c128", "c64", "half", "i8", "img", "label", "mask", "small",
                                      "u16", "u32", "u64"])
        self.assertEqual((by["img"].dtype, by["img"].shape, by["img"].storage), ("float64", (2, 5), "fixed"))
        self.assertEqual((by["label"].dtype, by["label"].shape, by["label"].storage), ("int64", (), "inline"))
        self.assertEqual(by["mask"].dtype, "bool")
        self.assertEqual(by["half"].descr, "<f2")
        self.assertEqual(by["small"].item_size, 2)
        self.assertEqual(ds.class_names, [])
        self.assertEqual(ds.align, 4096)
        self.assertIn("57 samples", repr(ds))

    def test_shards(self):
        ds = shardfeed.open(DS)
        shards = ds.shards
        self.assertGreater(len(shards), 1)
        self.assertEqual(sum(s.num_samples for s in shards), N)
        first = 0
        for s in shards:
            self.assertEqual(s.first_sample, first)
            self.assertEqual(os.path.getsize(os.path.join(DS, s.name)), s.file_size)
            first += s.num_samples

    def test_keys(self):
        ds = shardfeed.open(DS)
        keys = ds.keys()
        self.assertEqual(sorted(keys, key=int), [str(i) for i in range(N)])
        self.assertEqual(keys, [str(i) for i in range(N)])  # natural order
        for i in (0, 9, 10, N - 1):
            self.assertEqual(ds.key(i), keys[i])
            self.assertEqual(ds.index(keys[i]), i)
        self.assertEqual(ds.key(-1), keys[-1])


class RandomAccess(unittest.TestCase):
    def test_values(self):
        ds = shardfeed.open(DS)
        for i in list(range(N)) + [-1, -N]:
            s = ds[i]
            key = ds.key(i)
            self.assertEqual(sorted(s), sorted(f.name for f in ds.fields))
            for name, v in s.items():
                ref = load_source(SRC, name, key)
                self.assertIsInstance(v, np.ndarray)
                self.assertEqual(v.dtype, ref.dtype, name)
                self.assertEqual(v.shape, ref.shape, name)
                np.testing.assert_array_equal(v, ref)
        self.assertEqual(len(ds[2:5]), 3)
        self.assertEqual(sum(1 for _ in ds), N)

    def test_indexes(self):
        ds = shardfeed.open(DS)
        want = ds.key(5)
        for i in (5, np.int64(5), np.uint8(5), -N + 5) + ((torch.tensor(5),) if HAVE_TORCH else ()):
            self.assertEqual(ds.key(i), want, repr(i))
            self.assertEqual(ds[i]["label"], ds[5]["label"])
        # A bool is no index: ds[True] read sample 1 (a one-element mask, a flag passed by mistake).
        for b in (True, False, np.bool_(True)) + ((torch.tensor(True),) if HAVE_TORCH else ()):
            with self.assertRaisesRegex(TypeError, "not a bool"):
                ds[b]
            with self.assertRaisesRegex(TypeError, "not a bool"):
                ds.key(b)
        for bad in (1.0, "1", None, (1,)):
            with self.assertRaises(TypeError):
                ds[bad]
        # Out of range: the message names the index given, not one shifted by the size.
        # Beyond 64 bits too (an OverflowError from the conversion to C before).
        for i in (N, -N - 1, 2 ** 63 - 1, -2 ** 63, 2 ** 63, 2 ** 70, -2 ** 70, np.uint64(2 ** 63 + 5)):
            with self.assertRaisesRegex(IndexError, rf"sample {int(i)} out of range \(the dataset has {N}\)"):
                ds[i]
            with self.assertRaisesRegex(IndexError, rf"sample {int(i)} out of range"):
                ds.key(i)

        class ClosesIt:  # an index whose conversion closes the dataset
            def __index__(self):
                ds.close()
                return 1
        with self.assertRaisesRegex(ValueError, "closed"):
            ds._ds.get(ClosesIt(), 0, True)

    def test_values_are_writable_copies(self):
        # The common __getitem__ pattern: torch.from_numpy(ds[i]["img"]).add_(1).
        # Values used to be read-only views of the shard mmaps, and writing
        # through a tensor made from one was a segfault.
        ds = shardfeed.open(DS)
        ref = load_source(SRC, "img", str(N - 1))
        img = ds[N - 1]["img"]
        label = ds[N - 1]["label"]
        self.assertTrue(img.flags.writeable)
        self.assertTrue(img.flags.owndata or img.base is not None)
        if HAVE_TORCH:
            torch.from_numpy(img).add_(1)
        else:
            img += 1
        np.testing.assert_array_equal(img, ref + 1)
        np.testing.assert_array_equal(ds[N - 1]["img"], ref, "the dataset is unchanged")
        self.assertEqual(ds.get(N - 1, verify=True)["img"].sum(), ref.sum())
        label[...] = -5  # 0-d inline values too
        self.assertEqual(ds[N - 1]["label"], load_source(SRC, "label", str(N - 1)))
        ds.close()
        del ds
        gc.collect()
        np.testing.assert_array_equal(img, ref + 1)  # a copy outlives the dataset

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_random_access_values_export_through_dlpack(self):
        # Writable copies, so DLPack (which has no read-only flag) may share them.
        ds = shardfeed._shardfeed.Dataset(DS)
        a = ds.get(0, 0, True)
        self.assertFalse(a.readonly)
        t = torch.utils.dlpack.from_dlpack(a.__dlpack__())
        t.add_(1)
        np.testing.assert_array_equal(np.asarray(a), t.numpy())


class EveryDtypeThroughTheLoader(unittest.TestCase):
    def check(self, output):
        ds = shardfeed.open(DS)
        n = 0
        for b in shardfeed.Loader(DS, 10, seed=1, output=output):
            for j, i in enumerate(as_numpy(b.ids)):
                ref = ds[int(i)]
                for name, v in ref.items():
                    got = as_numpy(b[name][j])
                    self.assertEqual(got.dtype, v.dtype, name)
                    np.testing.assert_array_equal(got, v, name)
                n += 1
        self.assertEqual(n, N)

    def test_numpy(self):
        self.check("numpy")

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_torch(self):
        self.check("torch")
        b = next(iter(shardfeed.Loader(DS, 10, output="torch")))
        self.assertEqual(b["mask"].dtype, torch.bool)
        self.assertEqual(b["half"].dtype, torch.float16)
        self.assertEqual(b["c64"].dtype, torch.complex64)
        # torch without unsigned 16/32/64-bit types: numpy arrays for those
        self.assertEqual(isinstance(b["u16"], np.ndarray), not hasattr(torch, "uint16"))


if __name__ == "__main__":
    unittest.main()
