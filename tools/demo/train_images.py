"""README "Images": an ImageFolder tree to a trained model through shardfeed.

    build/shardfeed pack TREE -o DATASET
    PYTHONPATH=build/python /usr/bin/python3 tools/demo/train_images.py DATASET [--size 64] [--epochs 1]

One epoch (by default) of a small CNN on RandomResizedCrop + flip batches that
the reader's I/O threads decode (uint8 [B, 3, size, size]), normalised with
shardfeed.image.normalize on the training device; then the accuracy on the
same images through CenterCrop (the evaluation transform). CPU, or the GPU
when torch sees one."""
import argparse
import time

import shardfeed
import torch

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def model(classes, size):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, classes))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    classes = len(shardfeed.open(a.dataset).class_names)
    train = shardfeed.Loader(a.dataset, batch_size=a.batch_size, shuffle="global", seed=0, transforms={
        "image": shardfeed.image.RandomResizedCrop(a.size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip=0.5)})
    net = model(classes, a.size).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    t = time.time()
    seen = 0
    for epoch in range(a.epochs):
        train.set_epoch(epoch)
        for b in train:
            x = shardfeed.image.normalize(b["image"].to(dev, non_blocking=True), MEAN, STD)
            y = b["label"].to(dev)
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(y)
    elapsed = time.time() - t
    evaluate = shardfeed.Loader(a.dataset, batch_size=a.batch_size, shuffle="none", transforms={
        "image": shardfeed.image.CenterCrop(a.size, resize=a.size * 8 // 7)})
    right = total = 0
    with torch.no_grad():
        for b in evaluate:
            x = shardfeed.image.normalize(b["image"].to(dev), MEAN, STD)
            right += (net(x).argmax(1).cpu() == b["label"]).sum().item()
            total += len(b["label"])
    print(f"trained {a.epochs} epoch(s), {seen} images in {elapsed:.1f} s ({seen / elapsed:.0f} images/s) "
          f"on {dev}; last loss {loss.item():.3f}; accuracy on the training images (center crop) "
          f"{right / total:.1%} of {total}")


if __name__ == "__main__":
    main()
