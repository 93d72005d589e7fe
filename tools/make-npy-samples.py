#!/usr/bin/python3
"""Write sample files in the layout `shardfeed pack` reads: img_{i}.npy + label_{i}.npy.

  make-npy-samples.py fashion-mnist OUT_DIR [--split train|t10k] [--limit N]
      Fashion-MNIST from Debian's dataset-fashion-mnist package
      (/usr/share/datasets/fashion-mnist): img uint8 (28, 28), label int64 ().
  make-npy-samples.py synthetic OUT_DIR --count N [--shape 3,224,224] [--dtype float32] [--seed S]
      Random arrays, label int64 = i % 1000; deterministic for a given seed.
  make-npy-samples.py imagefolder OUT_DIR --count N [--classes C] [--seed S]
      An ImageFolder tree OUT_DIR/class NN/nNNNNNN.JPEG of N files of random bytes,
      20-200 kB each (about ImageNet's sizes; pack does not decode them).
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np

FASHION_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """Parse an IDX file (the MNIST container format) into a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        sys.exit(f"{path}: not an IDX file")
    dtype = {0x08: np.uint8}.get(data[2])
    if dtype is None:
        sys.exit(f"{path}: unsupported IDX type 0x{data[2]:02x}")
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=dtype, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        sys.exit(f"{path}: truncated")
    return arr.reshape(dims)


def fashion(args):
    images = read_idx(os.path.join(FASHION_DIR, f"{args.split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(FASHION_DIR, f"{args.split}-labels-idx1-ubyte.gz"))
    n = len(images) if args.limit is None else min(args.limit, len(images))
    os.makedirs(args.out, exist_ok=True)
    for i in range(n):
        np.save(os.path.join(args.out, f"img_{i}.npy"), images[i])
        np.save(os.path.join(args.out, f"label_{i}.npy"), np.int64(labels[i]))
    print(f"wrote {n} Fashion-MNIST samples ({args.split}) to {args.out}")


def synthetic(args):
    shape = tuple(int(x) for x in args.shape.split(","))
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)
    for i in range(args.count):
        if np.issubdtype(np.dtype(args.dtype), np.floating):
            a = rng.standard_normal(shape, dtype=np.float32).astype(args.dtype)
        else:
            a = rng.integers(0, 255, size=shape).astype(args.dtype)
        np.save(os.path.join(args.out, f"img_{i}.npy"), a)
        np.save(os.path.join(args.out, f"label_{i}.npy"), np.int64(i % 1000))
    print(f"wrote {args.count} synthetic samples {shape} {args.dtype} to {args.out}")


def imagefolder(args):
    rng = np.random.default_rng(args.seed)
    for i in range(args.count):
        d = os.path.join(args.out, f"class {i % args.classes:02d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"n{i:06d}.JPEG"), "wb") as f:
            f.write(rng.bytes(int(rng.integers(20_000, 200_001))))
    print(f"wrote {args.count} files in {args.classes} classes to {args.out}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fashion-mnist")
    f.add_argument("out")
    f.add_argument("--split", choices=["train", "t10k"], default="train")
    f.add_argument("--limit", type=int)
    s = sub.add_parser("synthetic")
    s.add_argument("out")
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--shape", default="3,224,224")
    s.add_argument("--dtype", default="float32")
    s.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("imagefolder")
    t.add_argument("out")
    t.add_argument("--count", type=int, required=True)
    t.add_argument("--classes", type=int, default=10)
    t.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    {"fashion-mnist": fashion, "synthetic": synthetic, "imagefolder": imagefolder}[args.cmd](args)


if __name__ == "__main__":
    main()
