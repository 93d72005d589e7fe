"""Writes the peers' copies of a prepared set's per-sample .npy files:

    python3 tools/bench/prepare/peers.py memmap|h5py|lmdb DATA_DIR N

memmap: img.npy (all images, one array) + label.npy; h5py: data.h5 from those;
lmdb: lmdb/ with one record per sample (image bytes, then the int64 label)."""
import os
import sys

import numpy as np


def memmap(d, n):
    first = np.load(os.path.join(d, "npy", "img_0.npy"))
    imgs = np.lib.format.open_memmap(os.path.join(d, "img.npy"), mode="w+", dtype=first.dtype,
                                     shape=(n,) + first.shape)
    labels = np.empty(n, np.int64)
    for i in range(n):
        imgs[i] = np.load(os.path.join(d, "npy", f"img_{i}.npy"))
        labels[i] = np.load(os.path.join(d, "npy", f"label_{i}.npy"))
    imgs.flush()
    np.save(os.path.join(d, "label.npy"), labels)


def h5(d, n):
    import h5py
    imgs = np.load(os.path.join(d, "img.npy"), mmap_mode="r")
    with h5py.File(os.path.join(d, "data.h5"), "w") as f:
        f.create_dataset("img", data=imgs)
        f.create_dataset("label", data=np.load(os.path.join(d, "label.npy")))


def lmdb_db(d, n):
    import lmdb
    imgs = np.load(os.path.join(d, "img.npy"), mmap_mode="r")
    labels = np.load(os.path.join(d, "label.npy"))
    env = lmdb.open(os.path.join(d, "lmdb"), map_size=imgs.nbytes * 2 + (1 << 30))
    with env.begin(write=True) as txn:
        for i in range(len(labels)):
            txn.put(b"%08d" % i, np.ascontiguousarray(imgs[i]).tobytes() + labels[i].tobytes())
    env.close()


if __name__ == "__main__":
    what, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    {"memmap": memmap, "h5py": h5, "lmdb": lmdb_db}[what](d, n)
