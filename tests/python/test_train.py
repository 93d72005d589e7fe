"""A small model trained through shardfeed.Loader on Fashion-MNIST learns: the loss falls
and held-out accuracy ends well above chance (10%). CPU only, under a minute on 2 cores.
Needs python3-torch and Debian's dataset-fashion-mnist. See sfpytest.py for how to run
it by hand."""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import HAVE_TORCH, fashion_mlp, have_fashion, make_fashion, pack, remove, scratch, shardfeed, torch  # noqa: E402

TRAIN, HELD_OUT = 10000, 2000
EPOCHS = 3
TMP = None


@unittest.skipUnless(HAVE_TORCH, "torch not importable")
@unittest.skipUnless(have_fashion(), "dataset-fashion-mnist not installed")
class Train(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global TMP
        TMP = scratch("train-")
        t = time.time()
        make_fashion(os.path.join(TMP, "train-npy"), TRAIN, "train")
        make_fashion(os.path.join(TMP, "test-npy"), HELD_OUT, "t10k")
        cls.train = pack(os.path.join(TMP, "train-npy"), os.path.join(TMP, "train"), "--align", "64")
        cls.test = pack(os.path.join(TMP, "test-npy"), os.path.join(TMP, "test"), "--align", "64")
        print(f"\ndata: {time.time() - t:.1f} s", file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        remove(TMP)

    def test_mlp_learns(self):
        model = fashion_mlp()
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
        loss_fn = torch.nn.CrossEntropyLoss()
        loader = shardfeed.Loader(self.train, batch_size=128, shuffle="global", seed=1)
        self.assertEqual(len(loader), (TRAIN + 127) // 128)

        def evaluate():
            model.eval()
            correct = total = 0
            with torch.no_grad():
                for b in shardfeed.Loader(self.test, batch_size=500, shuffle="none"):
                    pred = model(b["img"].unsqueeze(1).float() / 255.0).argmax(1)
                    correct += int((pred == b["label"]).sum())
                    total += b.size
            model.train()
            self.assertEqual(total, HELD_OUT)
            return correct / total

        t = time.time()
        acc0 = evaluate()
        epoch_loss = []
        for epoch in range(EPOCHS):
            loader.set_epoch(epoch)
            total, n = 0.0, 0
            for b in loader:
                x = b["img"].unsqueeze(1).float() / 255.0
                loss = loss_fn(model(x), b["label"])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss) * b.size
                n += b.size
            self.assertEqual(n, TRAIN)
            epoch_loss.append(total / n)
        acc = evaluate()
        print(f"train: {time.time() - t:.1f} s, loss per epoch {[round(v, 3) for v in epoch_loss]}, "
              f"held-out accuracy {acc0:.3f} -> {acc:.3f}", file=sys.stderr)
        self.assertLess(epoch_loss[-1], epoch_loss[0] * 0.85)
        self.assertGreater(acc, 0.75)
        self.assertGreater(acc, acc0 + 0.4)
        self.assertEqual(loader.stats()["corrupt_substitutions"], 0)


if __name__ == "__main__":
    unittest.main()
