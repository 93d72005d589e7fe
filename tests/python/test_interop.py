"""The DataLoader-shaped API: fields= tuples, Batch iteration, loader.dataset / batch_size /
drop_last, direct=True/False, prefetch=1 refused, docstrings, and as_iterable_dataset()
iterated (and a model trained) by a real torch.utils.data.DataLoader. See sfpytest.py for how
to run it by hand."""
import inspect
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import (HAVE_TORCH, as_numpy, fashion_mlp, have_fashion, load_source,  # noqa: E402
                      make_fashion, pack, remove, scratch, shardfeed, torch, write_samples)

N = 77           # not a multiple of B
B = 8
TMP = SRC = DS = None


def setUpModule():
    global TMP, SRC, DS
    TMP = scratch("interop-")
    SRC = os.path.join(TMP, "npy")
    write_samples(SRC, N)
    DS = pack(SRC, os.path.join(TMP, "ds"), "--align", "64")


def tearDownModule():
    remove(TMP)


def loader(**kw):
    kw.setdefault("output", "numpy")
    return shardfeed.Loader(DS, kw.pop("batch_size", B), **kw)


class Fields(unittest.TestCase):
    def test_tuples_in_the_order_asked(self):
        ref = [(as_numpy(b["img"]).copy(), as_numpy(b["label"]).copy()) for b in loader(seed=4)]
        got = 0
        for k, (y, x) in enumerate(loader(seed=4, fields=("label", "img"))):
            np.testing.assert_array_equal(as_numpy(x), ref[k][0])
            np.testing.assert_array_equal(as_numpy(y), ref[k][1])
            got += 1
        self.assertEqual(got, len(ref))
        one = next(iter(loader(fields=["img"])))
        self.assertIsInstance(one, tuple)
        self.assertEqual(len(one), 1)

    def test_values_are_the_samples(self):
        keys = shardfeed.open(DS).keys()
        for x, y in loader(shuffle="none", fields=("img", "label")):
            for j in range(len(y)):
                i = int(as_numpy(y)[j]) // 7  # label(i) = 7 i (i < 143)
                np.testing.assert_array_equal(as_numpy(x)[j], load_source(SRC, "img", keys[i]))

    def test_bad_fields(self):
        with self.assertRaisesRegex(ValueError, r"no field 'image'.*'img', 'label'"):
            loader(fields=("image", "label"))
        with self.assertRaisesRegex(TypeError, r"fields='img': a tuple of field names"):
            loader(fields="img")
        with self.assertRaisesRegex(ValueError, "twice"):
            loader(fields=("img", "img"))
        with self.assertRaisesRegex(ValueError, "at least one"):
            loader(fields=())

    def test_resume_with_fields(self):
        ld = loader(seed=2, fields=("label",))
        it = iter(ld)
        next(it), next(it)
        new = loader(seed=2, fields=("label",))
        new.load_state_dict(ld.state_dict())
        rest = [as_numpy(y).tolist() for (y,) in new]
        ref = [as_numpy(b["label"]).tolist() for b in loader(seed=2)]
        self.assertEqual(rest, ref[2:])


class BatchIteration(unittest.TestCase):
    def test_unpacking_a_batch_raises(self):
        b = next(iter(loader()))
        with self.assertRaisesRegex(TypeError, r"fields=\('img', 'label'\)"):
            x, y = b
        with self.assertRaises(TypeError):
            for _ in b:
                pass

    def test_mapping_use_still_works(self):
        b = next(iter(loader()))
        self.assertEqual(sorted(b.keys()), ["img", "label"])
        self.assertEqual(sorted(dict(b)), ["img", "label"])
        self.assertEqual(sorted({**b}), ["img", "label"])
        self.assertIn("img", b)
        self.assertEqual(len(b), 2)
        self.assertIs(dict(b)["img"], b["img"])
        self.assertEqual(as_numpy(b.sources).tolist(), [0] * b.size)


class DataLoaderAttributes(unittest.TestCase):
    def test_dataset_batch_size_drop_last(self):
        ld = loader(batch_size=5, drop_last=True)
        self.assertIsInstance(ld.dataset, shardfeed.Dataset)
        self.assertEqual(len(ld.dataset), N)
        key = ld.dataset.key(3)
        np.testing.assert_array_equal(ld.dataset[3]["img"], load_source(SRC, "img", key))
        self.assertEqual((ld.batch_size, ld.drop_last), (5, True))

    def test_direct_accepts_bools(self):
        self.assertEqual(loader(direct=False).direct, "off")
        # on: O_DIRECT needs a dataset packed with --align 4096; this one is not
        with self.assertRaisesRegex(shardfeed.Error, "4096"):
            loader(direct=True)

    def test_prefetch_1_is_refused_with_the_reason(self):
        with self.assertRaisesRegex(ValueError,
                                    r"prefetch=1: must be at least 2 \(a for loop holds"):
            loader(prefetch=1)
        self.assertEqual(loader(prefetch=2).prefetch, 2)

    def test_every_public_class_and_method_has_a_docstring(self):
        missing = []
        for name in shardfeed.__all__:
            obj = getattr(shardfeed, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not (obj.__doc__ or "").strip():
                missing.append(name)
            if not inspect.isclass(obj):
                continue
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr not in ("__len__", "__iter__", "__getitem__"):
                    continue
                if callable(member) or isinstance(member, property):
                    if not (getattr(member, "__doc__", None) or "").strip():
                        missing.append(f"{name}.{attr}")
        self.assertEqual(missing, [])


@unittest.skipUnless(HAVE_TORCH, "torch not importable")
class IterableDataset(unittest.TestCase):
    def test_a_torch_dataloader_yields_the_loaders_batches(self):
        ds = loader(seed=6, output="torch").as_iterable_dataset()
        self.assertIsInstance(ds, torch.utils.data.IterableDataset)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
        self.assertEqual(len(dl), (N + B - 1) // B)
        ref_labels = [b["label"].tolist() for b in loader(seed=6, output="torch")]
        got = [b["label"].tolist() for b in dl]
        self.assertEqual(got, ref_labels)
        # the next pass is the next epoch, as with the Loader itself
        nxt = loader(seed=6, output="torch")
        nxt.set_epoch(1)
        self.assertEqual([b["label"].tolist() for b in dl],
                         [b["label"].tolist() for b in nxt])

    def test_set_epoch_is_passed_through(self):
        ld = loader(seed=6, output="torch", fields=("img", "label"))
        ds = ld.as_iterable_dataset()
        ds.set_epoch(3)
        self.assertEqual(ld.epoch, 3)
        ref = loader(seed=6, output="torch")
        ref.set_epoch(3)
        dl = torch.utils.data.DataLoader(ds, batch_size=None)
        self.assertEqual([y.tolist() for _, y in dl], [b["label"].tolist() for b in ref])

    def test_workers_are_refused(self):
        ds = loader(output="torch").as_iterable_dataset()
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)
        with self.assertRaisesRegex(RuntimeError, "num_workers=0"):
            next(iter(dl))


@unittest.skipUnless(HAVE_TORCH, "torch not importable")
@unittest.skipUnless(have_fashion(), "dataset-fashion-mnist not installed")
class TrainThroughDataLoader(unittest.TestCase):
    """README "DataLoader interop": the adapter trains a model as the Loader does."""

    def test_mlp_learns(self):
        tmp = scratch("interop-train-")
        try:
            make_fashion(os.path.join(tmp, "npy"), 4000, "train")
            data = pack(os.path.join(tmp, "npy"), os.path.join(tmp, "ds"))
            model = fashion_mlp()
            opt = torch.optim.Adam(model.parameters(), lr=2e-3)
            loader = shardfeed.Loader(data, batch_size=128, seed=1, fields=("img", "label"))
            train_data = torch.utils.data.DataLoader(loader.as_iterable_dataset(), batch_size=None)
            losses = []
            for epoch in range(3):
                train_data.dataset.set_epoch(epoch)
                total = n = 0
                for x, y in train_data:
                    loss = torch.nn.functional.cross_entropy(
                        model(x.unsqueeze(1).float() / 255.0), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total, n = total + float(loss) * len(y), n + len(y)
                self.assertEqual(n, 4000)
                losses.append(total / n)
            self.assertLess(losses[-1], losses[0] * 0.85, losses)
        finally:
            remove(tmp)


if __name__ == "__main__":
    unittest.main()
