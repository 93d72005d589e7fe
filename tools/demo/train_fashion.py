"""The quick start's last step: a few seconds of training a small CNN on
Fashion-MNIST through shardfeed.Loader, then its accuracy on the 10,000 held-out
images.

    PYTHONPATH=build/python /usr/bin/python3 tools/demo/train_fashion.py TRAIN_DS TEST_DS [--seconds S]

TRAIN_DS and TEST_DS are shardfeed datasets of Fashion-MNIST (img: uint8 28x28,
label: int64), as tools/quickstart.sh packs them. CPU only."""
import argparse
import time

import shardfeed
import torch

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot"]


def model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),   # 8x14x14
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),  # 16x7x7
        torch.nn.Flatten(), torch.nn.Linear(16 * 7 * 7, 10))


def images(batch):
    """uint8 [B, 28, 28] from the Loader -> float [B, 1, 28, 28] in 0..1."""
    return batch["img"].unsqueeze(1).float() / 255.0


def accuracy(net, test_ds):
    net.eval()
    correct = total = 0
    with torch.no_grad():
        for b in shardfeed.Loader(test_ds, batch_size=1000, shuffle="none"):
            correct += int((net(images(b)).argmax(1) == b["label"]).sum())
            total += b.size
    net.train()
    return correct / total, total


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("train")
    p.add_argument("test")
    p.add_argument("--seconds", type=float, default=8.0, help="training time (default 8)")
    a = p.parse_args()
    torch.manual_seed(0)
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    loader = shardfeed.Loader(a.train, batch_size=128, shuffle="global", seed=0)
    print(f"training a small CNN for {a.seconds:.0f} s: {loader.samples_per_epoch} images per epoch, "
          f"batches of {loader.batch_size} from shardfeed.Loader")
    t0 = time.perf_counter()
    steps = seen = 0
    epoch = 0
    while time.perf_counter() - t0 < a.seconds:
        loader.set_epoch(epoch)
        for b in loader:
            loss = loss_fn(net(images(b)), b["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            seen += b.size
            if steps % 100 == 0:
                print(f"  step {steps}: loss {loss.item():.3f}")
            if time.perf_counter() - t0 >= a.seconds:
                break
        epoch += 1
    took = time.perf_counter() - t0
    st = loader.stats()
    acc, n = accuracy(net, a.test)
    print(f"trained {steps} steps ({seen} images, {seen / took:,.0f} images/s) in {took:.1f} s; "
          f"the Loader waited {st['wait_seconds']:.2f} s of it (verdict: {st['verdict']})")
    print(f"held-out accuracy: {acc:.1%} of {n} images (chance: 10%)")


if __name__ == "__main__":
    main()
