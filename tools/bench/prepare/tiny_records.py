#!/usr/bin/python3
"""Writes a dataset of N tiny records fast, for the scale measurements (opening a dataset of
10 million samples, the epoch boundary): one field `x`, uint8[8] (every byte of sample i is
i % 251), keys "0", "1", ..., --align 64, a shard per million records.

  tools/bench/prepare/tiny_records.py OUT_DIR N [--per-shard K]

`shardfeed pack` would need N input files; this writes the same format (SPEC.md) with numpy,
a shard at a time, as tests/python/sfwrite.py does record by record (it reuses that module's
XXH3 and layout): about 5 s per 10 million records plus the disk. `shardfeed verify` accepts
what it writes."""
import argparse
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tests", "python"))
import sfwrite  # noqa: E402

ALIGN = 64
ITEM = 8          # bytes of x per record
DATASET_ID = 0x7115


def field_table():
    code, _ = sfwrite.DTYPES["uint8"]
    return (b"x".ljust(64, b"\0") + struct.pack("<BBBB4x", code, 1, sfwrite.FIXED, 0)
            + struct.pack("<8Q", ITEM, 0, 0, 0, 0, 0, 0, 0) + struct.pack("<Q", ITEM))


def shard(path, si, first, count, schema_hash, sums):
    """Writes shard si (records first .. first+count) and returns its manifest row."""
    ids = np.arange(first, first + count, dtype=np.int64)
    data_offset = sfwrite.align_up(128, ALIGN)
    body = np.zeros((count, ALIGN), np.uint8)  # each record padded to the alignment
    body[:, :ITEM] = (ids % 251).astype(np.uint8)[:, None]
    keys = [str(i).encode() for i in range(first, first + count)]
    klen = np.fromiter((len(k) for k in keys), np.uint16, count)
    koff = np.zeros(count, np.uint32)
    np.cumsum(klen[:-1], out=koff[1:])
    ent = np.zeros(count, np.dtype([("off", "<u8"), ("size", "<u8"), ("sum", "<u8"), ("koff", "<u4"),
                                    ("klen", "<u2"), ("z", "<u2")]))
    ent["off"] = data_offset + np.arange(count, dtype=np.uint64) * ALIGN
    ent["size"] = ITEM
    ent["sum"] = sums[ids % 251]
    ent["koff"] = koff
    ent["klen"] = klen
    index = ent.tobytes() + b"".join(keys)
    index_offset = data_offset + count * ALIGN
    head = struct.pack("<8sHHIIIQQQQQQIIQQ24x", b"\x89SFSHRD\n", 1, 0, 0, 0, ALIGN, si, count, first,
                       data_offset, index_offset, len(index), 32, 1, schema_hash, DATASET_ID)
    hsum, isum = sfwrite.xxh3(head), sfwrite.xxh3(index)
    foot = struct.pack("<QQQQQ8x", index_offset, len(index), count, isum, hsum)
    foot += struct.pack("<Q", sfwrite.xxh3(foot)) + b"\x89SFSEND\n"
    with open(path, "wb") as f:
        f.write(head + struct.pack("<Q", hsum))
        f.write(body.tobytes())
        f.write(index)
        f.write(foot)
        size = f.tell()
    return struct.pack("<QQQQQ8x", count, first, size, hsum, isum)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("n", type=int)
    p.add_argument("--per-shard", type=int, default=1_000_000)
    a = p.parse_args()
    os.makedirs(a.out)
    table = field_table()
    schema_hash = sfwrite.xxh3(table)
    sums = np.array([sfwrite.xxh3(bytes([v]) * ITEM) for v in range(251)], np.uint64)
    rows = []
    for si, first in enumerate(range(0, a.n, a.per_shard)):
        count = min(a.per_shard, a.n - first)
        rows.append(shard(os.path.join(a.out, "shard-%06d.sfs" % si), si, first, count, schema_hash, sums))
    man = struct.pack("<8sHHIIIQQIIQ8x", b"\x89SFMANI\n", 1, 0, 0, 0, 1, len(rows), a.n, ALIGN, 0,
                      DATASET_ID)
    man += table + b"".join(rows)
    man += struct.pack("<Q", sfwrite.xxh3(man))
    with open(os.path.join(a.out, "manifest.sfm"), "wb") as f:
        f.write(man)


if __name__ == "__main__":
    main()
