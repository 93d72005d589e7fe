#!/usr/bin/python3
"""What the Python Loader itself costs per batch, with the batches ready (issue 16 item 4): the
reader runs ahead (prefetch 32; the loop sleeps 5 ms every 16 batches to let it), so the times
below are the Loader's own work, not waits for I/O. Per batch, medians over EPOCHS epochs after
a warm-up one:

  next   next(iterator): sf_reader_next, the C batch object, the Batch of tensors or arrays
  free   dropping the Batch: the tensors' deleters, the slot's release

  PYTHONPATH=build/python /usr/bin/python3 tools/bench/python-overhead.py DATASET [--output torch]
      [--batch-size 256] [--epochs 3]

Run several times, alternating builds (PYTHONPATH), on a shared machine: a median moves with
the load."""
import argparse
import statistics
import time

import shardfeed


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset")
    p.add_argument("--output", default="torch")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()
    ld = shardfeed.Loader(a.dataset, batch_size=a.batch_size, shuffle="global", seed=0,
                          prefetch=32, output=a.output)
    for b in ld:  # warm-up epoch
        pass
    del b
    t_next, t_free = [], []
    clock = time.perf_counter_ns
    for _ in range(a.epochs):
        it = iter(ld)
        k = 0
        while True:
            if k % 16 == 0:
                time.sleep(0.005)
            k += 1
            t0 = clock()
            try:
                b = next(it)
            except StopIteration:
                break
            t1 = clock()
            for name in b.keys():
                b[name]
            t2 = clock()
            del b
            t3 = clock()
            t_next.append(t1 - t0)
            t_free.append(t3 - t2)
    med = lambda v: statistics.median(v) / 1e3  # noqa: E731
    print(f"next {med(t_next):.2f} us, free {med(t_free):.2f} us, together {med(t_next) + med(t_free):.2f} us "
          f"per batch (median of {len(t_next)} batches, output {a.output})")


if __name__ == "__main__":
    main()
