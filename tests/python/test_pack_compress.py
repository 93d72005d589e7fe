"""`shardfeed pack --compress FIELD=zstd[:LEVEL]` end to end: .npy, ImageFolder and tar
inputs packed with and without compression read identically through shardfeed.Loader
(shuffled, several engines) and shardfeed.open; the compressed shards are smaller; parts
of a compressed pack merge to the single compressed pack. See sfpytest.py for how to run
it."""
import io
import os
import sys
import tarfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import as_numpy, cli, pack, remove, scratch, shardfeed, write_samples  # noqa: E402

TMP = None


def setUpModule():
    global TMP
    TMP = scratch("pack-compress-")


def tearDownModule():
    remove(TMP)


def shard_bytes(ds):
    return sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds) if f.endswith(".sfs"))


def dir_bytes(d):
    out = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as fh:
            out[f] = fh.read()
    return out


def batches(ds, engine, **kw):
    """Every batch of two shuffled epochs as {field: list of per-sample values}."""
    out = []
    with shardfeed.Loader(ds, batch_size=8, shuffle=True, seed=11, engine=engine,
                          output="numpy", **kw) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for b in loader:
                row = {"ids": as_numpy(b.ids).tolist()}
                for name in b.keys():
                    v = b[name]
                    row[name] = [bytes(x) if isinstance(x, (bytes, bytearray)) else np.asarray(x).tolist()
                                 for x in v] if isinstance(v, list) else as_numpy(v).tolist()
                out.append(row)
    return out


class PackCompress(unittest.TestCase):
    def check_same(self, plain, zstd):
        self.assertLess(shard_bytes(zstd), shard_bytes(plain))
        cli("verify", "--decompress", zstd)
        with shardfeed.open(plain) as p, shardfeed.open(zstd) as z:
            self.assertEqual(len(p), len(z))
            for i in range(len(p)):
                a, b = p[i], z[i]
                for k in a:
                    if isinstance(a[k], bytes):
                        self.assertEqual(a[k], b[k])
                    else:
                        np.testing.assert_array_equal(a[k], b[k])
        want = batches(plain, "auto")
        for engine in ("auto", "pread", "mmap"):
            self.assertEqual(batches(zstd, engine), want, engine)

    def test_npy(self):
        src = os.path.join(TMP, "npy")
        # Smooth images compress; random ones would not.
        write_samples(src, 60, shape=(4, 16, 16), dtype=np.uint8,
                        extra={"mask": lambda i: np.full((16, 16), i % 3, np.uint8)})
        plain = pack(src, os.path.join(TMP, "npy-plain"), "--align", "64")
        zstd = pack(src, os.path.join(TMP, "npy-zstd"), "--align", "64", "--compress", "mask=zstd:9",
                    "--compress", "img=zstd")
        self.check_same(plain, zstd)
        # Export of the compressed dataset gives the very .npy files of the plain one.
        a, b = os.path.join(TMP, "exp-plain"), os.path.join(TMP, "exp-zstd")
        cli("export", plain, "-o", a)
        cli("export", zstd, "-o", b)
        self.assertEqual(dir_bytes(a), dir_bytes(b))

    def test_parts_of_a_compressed_pack_merge_to_it(self):
        src = os.path.join(TMP, "npy-parts")
        write_samples(src, 150, shape=(8, 8), dtype=np.uint8)
        opts = ("--align", "64", "--shard-size", "8KiB", "--compress", "img=zstd")
        whole = pack(src, os.path.join(TMP, "parts-whole"), *opts)
        parts = [pack(src, os.path.join(TMP, f"parts-{k}"), "--part", f"{k}/3", *opts) for k in range(3)]
        merged = os.path.join(TMP, "parts-merged")
        cli("merge", *parts, "-o", merged)
        self.assertEqual(dir_bytes(merged), dir_bytes(whole))

    def test_imagefolder_and_tar(self):
        root = os.path.join(TMP, "tree")
        tar_path = os.path.join(TMP, "samples.tar")
        rng = np.random.default_rng(2)
        with tarfile.open(tar_path, "w") as tf:
            for c in ("a", "b"):
                os.makedirs(os.path.join(root, c))
                for i in range(20):
                    # PPM: a header and raw pixels, which zstd compresses well.
                    px = np.repeat(rng.integers(0, 4, (8, 1, 3), dtype=np.uint8), 8, axis=1)
                    data = b"P6 8 8 255\n" + px.tobytes()
                    with open(os.path.join(root, c, f"{i}.ppm"), "wb") as f:
                        f.write(data)
                    for name, payload in ((f"{c}{i:03d}.ppm", data), (f"{c}{i:03d}.cls", c.encode())):
                        info = tarfile.TarInfo(name)
                        info.size = len(payload)
                        tf.addfile(info, io.BytesIO(payload))
        plain = pack(root, os.path.join(TMP, "if-plain"), "--align", "64")
        zstd = pack(root, os.path.join(TMP, "if-zstd"), "--align", "64", "--compress", "image=zstd")
        self.check_same(plain, zstd)
        exp = os.path.join(TMP, "if-export")
        cli("export", zstd, "-o", exp)
        for c in ("a", "b"):
            self.assertEqual(dir_bytes(os.path.join(exp, c)), dir_bytes(os.path.join(root, c)))
        plain = pack(tar_path, os.path.join(TMP, "tar-plain"), "--align", "64")
        zstd = pack(tar_path, os.path.join(TMP, "tar-zstd"), "--align", "64", "--compress", "ppm=zstd")
        self.check_same(plain, zstd)


if __name__ == "__main__":
    unittest.main()
