"""The Loader's slots: how large they are (sized from what a batch can hold, reported by
stats() and `shardfeed bench`) and who holds them (the error names the batches held).
See sfpytest.py for how to run it by hand."""
import gc
import json
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import cli, pack, remove, scratch, shardfeed, write_samples  # noqa: E402

PAGE = os.sysconf("SC_PAGESIZE")
TMP = None


def setUpModule():
    global TMP
    TMP = scratch("slots-")


def tearDownModule():
    remove(TMP)


def align(n):
    return (n + PAGE - 1) // PAGE * PAGE


def bench_json(ds, *args):
    return json.loads(cli("bench", ds, "--json", *args))


class SlabSize(unittest.TestCase):
    def test_one_large_image_among_small_ones(self):
        # An ImageFolder tree: 200 images of 2-6 KB and one of 12 MB. Batch 64 used to
        # take 64 x 12 MB per slot (3 GB for 4 slots); now a slot holds the 64 largest.
        src = os.path.join(TMP, "tree")
        rng = np.random.default_rng(1)
        sizes = {}
        for i in range(201):
            cls = os.path.join(src, f"c{i % 3}")
            os.makedirs(cls, exist_ok=True)
            n = 12 << 20 if i == 100 else int(rng.integers(2000, 6000))
            name = os.path.join(cls, f"img{i:04d}.png")
            with open(name, "wb") as f:
                f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            sizes[os.path.relpath(name, src)] = n
        ds = pack(src, os.path.join(TMP, "tree-ds"))
        one_batch = sum(sorted(sizes.values())[-64:]) + 64 * 8  # images + int64 labels
        ld = shardfeed.Loader(ds, 64, engine="pread", output="numpy")
        slab = ld.stats()["slab_bytes"]
        self.assertLess(slab, 5 * one_batch)
        self.assertGreaterEqual(slab, 4 * one_batch)
        keys = shardfeed.open(ds).keys()
        seen = 0
        for b in ld:
            for i, img in zip(b.ids.tolist(), b["image"]):
                self.assertEqual(len(img), sizes[keys[i]])
            seen += b.size
        self.assertEqual(seen, 201)
        ld.close()
        self.assertEqual(bench_json(ds, "--batch-size", "64")["options"]["slab_bytes"], slab)

    def test_batch_larger_than_the_dataset(self):
        src = os.path.join(TMP, "npy")
        write_samples(src, 50, shape=(1024,), dtype=np.float32)  # 4 KiB per image
        ds = pack(src, os.path.join(TMP, "npy-ds"), "--align", "64")
        # img [50, 1024] float32 and label [50] int64: sized for the 50 samples there are,
        # not for 5000 (4 slots given: the default gives small slots more).
        want = 4 * (align(50 * 4096) + align(50 * 8))
        ld = shardfeed.Loader(ds, 5000, output="numpy", prefetch=4)
        self.assertEqual(ld.stats()["slab_bytes"], want)
        batches = list(b.size for b in ld)
        self.assertEqual(batches, [50])
        self.assertEqual(bench_json(ds, "--batch-size", "5000", "--prefetch", "4")["options"]["slab_bytes"],
                         want)
        # The normal case is what it always was: batch 16 of 50.
        self.assertEqual(shardfeed.Loader(ds, 16, prefetch=4).stats()["slab_bytes"],
                         4 * (align(16 * 4096) + align(16 * 8)))


class HeldBatches(unittest.TestCase):
    def test_the_error_names_the_batches_still_held(self):
        src = os.path.join(TMP, "held-npy")
        write_samples(src, 100, shape=(4,))
        ds = pack(src, os.path.join(TMP, "held-ds"), "--align", "64")
        ld = shardfeed.Loader(ds, 8, prefetch=3, output="numpy")
        ld.set_epoch(2)
        it = iter(ld)
        first = next(it)
        kept = next(it)["img"]  # a tensor keeps its batch's slot
        third = next(it)
        with self.assertRaises(shardfeed.Error) as cm:
            next(it)
        msg = str(cm.exception)
        self.assertEqual(cm.exception.code, shardfeed.E_STATE)
        self.assertIn("batches still held (epoch, index): (2, 0) (2, 1) (2, 2)", msg)
        self.assertIn(".epoch and .index", msg)
        del first, third
        gc.collect()
        b = next(it)
        with self.assertRaises(shardfeed.Error) as cm:
            next(it), next(it)
        self.assertIn("(epoch, index): (2, 1)", str(cm.exception))
        del kept, b
        gc.collect()


if __name__ == "__main__":
    unittest.main()
