"""An ImageFolder tree packed by `shardfeed pack` and read through shardfeed.Loader and
shardfeed.open: every batch's image bytes and labels equal what
torchvision.datasets.ImageFolder gives for the same samples, class_names equal its
classes, and decoded images equal PIL's. See sfpytest.py for how to run it."""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import as_numpy, pack, remove, scratch, shardfeed  # noqa: E402

try:
    import torchvision
    from PIL import Image
except ImportError:  # python3-torchvision, python3-pil
    torchvision = None

TMP = ROOT = DS = None
CLASSES = ["airplane", "bird nest", "Öl", "ünï"]


def setUpModule():
    global TMP, ROOT, DS
    if torchvision is None:
        return
    TMP = scratch("imagefolder-")
    ROOT = os.path.join(TMP, "tree")
    rng = np.random.default_rng(3)
    for c in CLASSES:
        for sub in ("", "more"):
            os.makedirs(os.path.join(ROOT, c, sub), exist_ok=True)
            for i in range(9):
                a = rng.integers(0, 255, (5 + i % 3, 6, 3), dtype=np.uint8)
                Image.fromarray(a).save(os.path.join(ROOT, c, sub, f"{i:03d}.png"))
    DS = pack(ROOT, os.path.join(TMP, "ds"), "--align", "64")


def tearDownModule():
    if TMP:
        remove(TMP)


@unittest.skipIf(torchvision is None, "python3-torchvision or python3-pil is not installed")
class ImageFolderLoader(unittest.TestCase):
    def setUp(self):
        self.tv = torchvision.datasets.ImageFolder(ROOT)

    def test_dataset_class_names_and_samples(self):
        ds = shardfeed.open(DS)
        self.assertEqual(ds.class_names, self.tv.classes)
        self.assertEqual(ds.source, "imagefolder")
        self.assertEqual(len(ds), len(self.tv.samples))
        for i, (path, label) in enumerate(self.tv.samples):
            s = ds[i]
            self.assertEqual(os.path.join(ROOT, ds.key(i)), path)
            self.assertEqual(int(s["label"]), label)
            with open(path, "rb") as f:
                self.assertEqual(s["image"], f.read())

    def test_shuffled_batches_match_torchvision(self):
        seen = 0
        with shardfeed.Loader(DS, batch_size=7, shuffle=True, seed=5) as loader:
            for batch in loader:
                ids = as_numpy(batch.ids).tolist()
                labels = as_numpy(batch["label"]).tolist()
                for j, i in enumerate(ids):
                    path, label = self.tv.samples[i]
                    self.assertEqual(labels[j], label)
                    with open(path, "rb") as f:
                        self.assertEqual(batch["image"][j], f.read())
                    # The stored bytes decode to the same pixels torchvision's loader gives.
                    if j == 0:
                        import io
                        got = np.asarray(Image.open(io.BytesIO(batch["image"][j])).convert("RGB"))
                        want = np.asarray(self.tv.loader(path))
                        np.testing.assert_array_equal(got, want)
                seen += len(ids)
        self.assertGreaterEqual(seen, len(self.tv.samples))


if __name__ == "__main__":
    unittest.main()
