#!/usr/bin/python3
"""The gaps between batches at epoch boundaries, against the median gap.

  tools/bench/epoch_gaps.py DATASET [--batch-size B] [--epochs E] [--shuffle S] [--json]

Runs `shardfeed bench DATASET --trace FILE` (the C reader, checksums on) and reads, from the
trace, the time each batch was handed to the consumer. A gap is the time between two batches
handed one after the other; a boundary's gap is the longest of those that end within --window
batches (default 8: twice the read-ahead) before or after the first batch of an epoch after
the first (read-ahead runs into the next epoch, so a stall of the schedule at the crossing
shows a few batches before the boundary). Prints the median gap, each boundary's gap and the
largest one's ratio to the median (the scale target: at most 2), and for comparison the same
window's longest gap anywhere else (the median over every window of that width away from the
boundaries): on a machine shared with other work, any window of 17 gaps holds a few long ones.
Also the share of those windows whose longest gap is over 2x the median by itself, and from it
the chance that at least one of the boundaries' windows would be with nothing special about
them: a boundary over 2x is a stall only where that chance is small. The trace holds at most
65,536 batches: choose the batch size so that E epochs fit (10 million samples: --batch-size
1024, 3 epochs)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--shuffle", default="global")
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--sf", default=os.environ.get("SHARDFEED", os.path.join(ROOT, "build", "shardfeed")))
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        subprocess.run([a.sf, "bench", a.dataset, "--batch-size", str(a.batch_size), "--epochs",
                        str(a.epochs), "--shuffle", a.shuffle, "--trace", trace], check=True,
                       stdout=subprocess.DEVNULL)
        with open(trace) as f:
            doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    handed = sorted((e["args"]["handed"], e["args"]["epoch"], e["args"]["index"]) for e in events
                    if e.get("cat") == "batch" and e["args"].get("delivered") and "handed" in e["args"])
    if len(handed) < 3:
        sys.exit("too few batches in the trace")
    gaps = [(b[0] - a_[0], b[1], b[2]) for a_, b in zip(handed, handed[1:])]
    median = statistics.median(g for g, _, _ in gaps)
    starts = [k for k, (_, e, i) in enumerate(gaps) if i == 0 and e > 0]
    boundary = [(max(g for g, _, _ in gaps[max(0, k - a.window):k + a.window + 1]), gaps[k][1])
                for k in starts]
    worst = max((g for g, _ in boundary), default=0.0)
    w = 2 * a.window + 1
    near = set(j for k in starts for j in range(k - w, k + w + 1))
    elsewhere = [max(g for g, _, _ in gaps[k:k + w]) for k in range(0, len(gaps) - w, w)
                 if k not in near and k + w not in near]
    typical = statistics.median(elsewhere) if elsewhere else None
    # How often a window away from the boundaries is over the target by itself (a thread
    # descheduled on a shared machine), and so how often at least one of the boundaries
    # would be with nothing special about them.
    over = sum(1 for g in elsewhere if g > 2 * median) / len(elsewhere) if elsewhere else None
    chance = 1 - (1 - over) ** len(boundary) if over is not None else None
    res = dict(batches=len(handed), median_gap_us=median, max_gap_us=max(g for g, _, _ in gaps),
               boundary_gaps_us={str(e): g for g, e in boundary},
               boundary_vs_median=worst / median if median > 0 else None,
               window_max_elsewhere_us=typical, windows_elsewhere_over_2x=over,
               boundary_over_2x_by_chance=chance)
    if a.json:
        print(json.dumps(res))
        return
    print(f"{len(handed)} batches: median gap {median:.1f} us, largest gap {res['max_gap_us']:.1f} us")
    for g, e in boundary:
        print(f"  into epoch {e}: {g:.1f} us ({g / median:.2f}x the median; the longest gap "
              f"within {a.window} batches of the boundary)")
    if typical is not None:
        print(f"the longest gap in a window of {w} gaps away from the boundaries: median "
              f"{typical:.1f} us ({typical / median:.2f}x the median gap)")
    if over is not None:
        print(f"windows away from the boundaries over 2x the median gap: {100 * over:.1f}% of "
              f"{len(elsewhere)}; at least one of {len(boundary)} such windows by chance: "
              f"{100 * chance:.0f}%")
    if res["boundary_vs_median"] is not None:
        print(f"largest boundary gap / median gap: {res['boundary_vs_median']:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
