#!/usr/bin/python3
"""Writes a dataset of N tiny records fast, for the scale measurements (opening a dataset of
10 million samples, the epoch boundary): one field `x`, uint8[8] (every byte of sample i is
i % 251), keys "0", "1", ..., --align 64, a shard per million records (--per-shard).

  tools/bench/prepare/tiny_records.py OUT_DIR N [--per-shard K]

`shardfeed pack` would need N input files; this writes the same format (SPEC.md) with numpy,
a shard at a time (write_tiny_dataset of tests/python/sfwrite.py, the tests' second writer):
about 5 s per 10 million records plus the disk. `shardfeed verify` accepts what it writes."""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tests", "python"))
import sfwrite  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("n", type=int)
    p.add_argument("--per-shard", type=int, default=1_000_000)
    a = p.parse_args()
    sfwrite.write_tiny_dataset(a.out, a.n, a.per_shard)


if __name__ == "__main__":
    main()
