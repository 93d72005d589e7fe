"""zstd-compressed fields (SPEC.md "Compression") through shardfeed.Loader and
shardfeed.open: the same samples written uncompressed and with zstd on a fixed float32
field and two variable-length fields must read identically. sfwrite.py writes both (zstd
through ctypes on libzstd); `shardfeed verify --decompress` checks them first."""
import json
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import as_numpy, cli, remove, scratch, shardfeed  # noqa: E402
import sfwrite  # noqa: E402

N = 53
B = 7
TMP = PLAIN = ZSTD = None


def sample(i):
    return {
        "x": (np.arange(48, dtype=np.float32).reshape(4, 12) % 5 + i).astype(np.float32),
        "text": bytes((i + j % 4) % 256 for j in range(i * 7 % 23)),  # empty for i % 23 == 0
        "tokens": (np.arange(i % 6, dtype=np.int32) - i),
        "label": np.int64(i * 11),
    }


SAMPLES = [sample(i) for i in range(N)]


def fields(codec):
    return [("x", "float32", sfwrite.FIXED, (4, 12), codec), ("text", "bytes", sfwrite.VAR, None, codec),
            ("tokens", "int32", sfwrite.VAR, None, codec), ("label", "int64", sfwrite.INLINE, ())]


def setUpModule():
    global TMP, PLAIN, ZSTD
    TMP = scratch("compressed-")
    PLAIN = sfwrite.write_dataset(os.path.join(TMP, "plain"), fields("none"), SAMPLES, align=16,
                                  per_shard=20)
    ZSTD = sfwrite.write_dataset(os.path.join(TMP, "zstd"), fields("zstd"), SAMPLES, align=16,
                                 per_shard=20)
    cli("verify", "--decompress", ZSTD)  # the C library agrees the writer followed SPEC.md


def tearDownModule():
    remove(TMP)


class Compressed(unittest.TestCase):
    def test_open(self):
        with shardfeed.open(PLAIN) as p, shardfeed.open(ZSTD) as z:
            self.assertEqual([f.codec for f in z.fields], ["zstd", "zstd", "zstd", "none"])
            self.assertEqual([f.codec for f in p.fields], ["none"] * 4)
            for i in range(N):
                a, b = p[i], z[i]
                self.assertEqual(b["text"], SAMPLES[i]["text"])
                self.assertEqual(b["text"], a["text"])
                for k in ("x", "tokens", "label"):
                    self.assertEqual(b[k].dtype, a[k].dtype)
                    self.assertEqual(b[k].shape, a[k].shape)
                    np.testing.assert_array_equal(b[k], a[k])
                np.testing.assert_array_equal(b["x"], SAMPLES[i]["x"])

    def test_cli_inspect_shows_the_codec(self):
        info = json.loads(cli("inspect", ZSTD, "--json"))
        self.assertEqual([f["codec"] for f in info["fields"]], ["zstd", "zstd", "zstd", "none"])
        self.assertIn("zstd", cli("inspect", ZSTD))

    def test_loader(self):
        for varlen in ("list", "pair"):
            lp = shardfeed.Loader(PLAIN, B, seed=4, varlen=varlen, output="numpy")
            lz = shardfeed.Loader(ZSTD, B, seed=4, varlen=varlen, output="numpy")
            n = 0
            for a, b in zip(lp, lz):
                np.testing.assert_array_equal(as_numpy(a.ids), as_numpy(b.ids))
                np.testing.assert_array_equal(as_numpy(a["x"]), as_numpy(b["x"]))
                np.testing.assert_array_equal(as_numpy(a["label"]), as_numpy(b["label"]))
                for k in ("text", "tokens"):
                    if varlen == "pair":
                        for u, v in zip(a[k], b[k]):
                            np.testing.assert_array_equal(as_numpy(u), as_numpy(v))
                    else:
                        for u, v in zip(a[k], b[k]):
                            if isinstance(u, bytes):
                                self.assertEqual(u, v)
                            else:
                                np.testing.assert_array_equal(as_numpy(u), as_numpy(v))
                n += b.size
            self.assertEqual(n, N)
            lp.close()
            lz.close()


class StoredSizes(unittest.TestCase):
    """Records whose stored bytes are small go a claim at a time (staged.c,
    reader_staged_claim), larger ones (over 128 KiB stored, compressed or not) one at a time:
    both read exactly like the uncompressed dataset with every copy engine, and a damaged
    record is caught and substituted in either."""

    def run_sizes(self, size, blob_codec="zstd"):
        rng = np.random.default_rng(size)
        samples = [{"blob": rng.integers(0, 256, size, dtype=np.uint8),  # incompressible
                    "x": np.full(8, i, np.int16), "label": np.int64(i)} for i in range(30)]
        label = [("label", "int64", sfwrite.INLINE, ())]
        root = os.path.join(TMP, f"sizes-{size}-{blob_codec}")
        plain = sfwrite.write_dataset(os.path.join(root, "plain"),
                                      [("blob", "uint8", sfwrite.FIXED, (size,), "none"),
                                       ("x", "int16", sfwrite.FIXED, (8,), "none")] + label,
                                      samples, per_shard=12)
        z = sfwrite.write_dataset(os.path.join(root, "zstd"),
                                  [("blob", "uint8", sfwrite.FIXED, (size,), blob_codec),
                                   ("x", "int16", sfwrite.FIXED, (8,), "zstd")] + label,
                                  samples, per_shard=12)
        for engine in ("pread", "mmap"):
            runs = [shardfeed.Loader(d, 4, seed=3, engine=engine, output="numpy") for d in (plain, z)]
            n = 0
            for a, b in zip(*runs):
                for k in ("blob", "x", "label"):
                    np.testing.assert_array_equal(as_numpy(a[k]), as_numpy(b[k]))
                n += b.size
            self.assertEqual(n, 30)
            self.assertEqual(runs[1].stats()["engine"], engine)
            for r in runs:
                r.close()
        # One byte flipped in record 17's stored blob (shard 1, record 5): its checksum fails.
        frame = samples[17]["blob"].tobytes()
        frame = sfwrite.zstd_compress(frame) if blob_codec == "zstd" else frame
        path = os.path.join(z, "shard-000001.sfs")
        with open(path, "r+b") as f:
            blob = f.read()
            at = blob.index(frame) + len(frame) // 2
            f.seek(at)
            f.write(bytes([blob[at] ^ 0x10]))
        for engine in ("pread", "mmap"):
            with self.assertRaises(shardfeed.Error) as cm:
                for _ in shardfeed.Loader(z, 4, seed=3, engine=engine, output="numpy"):
                    pass
            self.assertIn("shard-000001.sfs", str(cm.exception))
            self.assertIn("checksum", str(cm.exception))
            subst, ids = 0, []
            for b in shardfeed.Loader(z, 4, seed=3, engine=engine, output="numpy", on_corrupt="skip"):
                subst += b.substituted
                ids += as_numpy(b["label"]).tolist()
                for k, i in enumerate(as_numpy(b["label"]).tolist()):
                    np.testing.assert_array_equal(as_numpy(b["blob"])[k], samples[i]["blob"])
            self.assertEqual(subst, 1, engine)
            self.assertNotIn(17, ids)

    def test_small_stored_records(self):
        self.run_sizes(1000)

    def test_large_stored_records(self):
        self.run_sizes(150_000)

    def test_a_large_plain_field_beside_a_compressed_one(self):
        # Few compressed bytes, but 150 kB stored in all: read record by record.
        self.run_sizes(150_000, blob_codec="none")


if __name__ == "__main__":
    unittest.main()
