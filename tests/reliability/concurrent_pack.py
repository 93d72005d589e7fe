#!/usr/bin/python3
"""Two packs into one folder at once: exactly one writes it.

SF_CONCURRENT_RUNS times (default 20), packs of inputs A and B (the same
file names and sizes, so the same dataset_id, and other values) start
together into one empty folder, one process each, released at once from
behind one pipe. The
folder's lock must let exactly one through: the other exits 1 saying
"another shardfeed pack (pid N on HOST) is writing OUT", and the folder
ends byte-identical to a reference pack of A or of B (so it holds one
input's values, checked once against its files) and verifies. To make the
two overlap on a loaded machine, the first one seen holding the lock
(/proc/locks) is stopped until the other has exited. Small
inputs with small shards, so each run takes a fraction of a second.

Environment: SHARDFEED (the binary), SF_SOURCE_DIR (the source tree, for
tools/make-npy-samples.py and tests/cli/sfspec.py), SF_TEST_TMP (scratch
space), SF_CONCURRENT_RUNS, SF_CONCURRENT_SEED. Exit 0 on success.
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from pack_checks import make_input, read_dir, value_mismatches

SF = os.environ.get("SHARDFEED", "shardfeed")
RUNS = int(os.environ.get("SF_CONCURRENT_RUNS", "20"))
SEED = int(os.environ.get("SF_CONCURRENT_SEED", "4711"))
SAMPLES = 60


def pack_cmd(src, out):
    return [SF, "pack", src, "-o", out, "-j", "2", "--shard-size", "16KiB", "-q"]


def flock_holders():
    """pids holding a flock (/proc/locks: "1: FLOCK  ADVISORY  WRITE 123 ...")."""
    with open("/proc/locks") as f:
        return {int(line.split()[4]) for line in f if line.split()[1:2] == ["FLOCK"]}


def holder_written(out, pid):
    """The holder has written "shardfeed lock: pack pid N on HOST" (right
    after taking the lock): a second pack can name it."""
    try:
        with open(os.path.join(out, ".shardfeed.lock")) as f:
            return f" pid {pid} on " in f.read()
    except OSError:
        return False


def hold_first_locker(procs, out):
    """Makes the two runs overlap whatever the scheduler does: the first
    pack seen holding the folder's lock (and having written its pid there)
    is stopped (SIGSTOP) until the other has exited, then continued. Without this a pack starved of CPU from its
    start (2 busy cores) could begin only after the other had finished, and
    meet a finished dataset instead of a lock. Returns 1 if one was held."""
    pids = {p.pid: p for p in procs.values()}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        holder = next((pid for pid in flock_holders() if pid in pids), None)
        if holder is not None and holder_written(out, holder):
            os.kill(holder, signal.SIGSTOP)
            try:
                for pid, p in pids.items():
                    if pid != holder:
                        p.wait(timeout=120)
            finally:
                os.kill(holder, signal.SIGCONT)
            return 1
        if all(p.poll() is not None for p in pids.values()):
            return 0
        time.sleep(0.0005)
    return 0


def main():
    base = os.environ.get("SF_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="sf-concurrent-", dir=base)
    rng = random.Random(SEED)
    t0 = time.monotonic()
    failures = []
    try:
        refs = {}
        for name, seed in (("A", 1), ("B", 2)):
            src = os.path.join(tmp, "in" + name)
            make_input(src, SAMPLES, "8,8", seed)
            ref = os.path.join(tmp, "ref" + name)
            subprocess.run(pack_cmd(src, ref), check=True)
            if value_mismatches(ref, src)[1]:
                failures.append(f"the reference pack of {name} does not hold {name}'s values")
            refs[name] = (src, read_dir(ref))
        if sorted(refs["A"][1]) != sorted(refs["B"][1]) or refs["A"][1] == refs["B"][1]:
            failures.append("inputs A and B do not have the same names with other values")
        shards = sum(1 for n in refs["A"][1] if n.startswith("shard-"))
        out = os.path.join(tmp, "out")
        lock_msg = re.compile(r"another shardfeed pack \(pid (\d+) on [^)]+\) is writing " + re.escape(out) + "\n")
        winners = {"A": 0, "B": 0}
        stopped = 0
        for run in range(RUNS):
            shutil.rmtree(out, ignore_errors=True)
            order = ["A", "B"] if rng.random() < 0.5 else ["B", "A"]
            # Both wait behind one pipe and exec the pack when the test writes
            # a line for each: they start together, not a process start apart.
            gate_r, gate_w = os.pipe()
            procs = {n: subprocess.Popen(["sh", "-c", f'read -r _ <&{gate_r} && exec "$@"', "sh",
                                          *pack_cmd(refs[n][0], out)], pass_fds=(gate_r,),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for n in order}
            os.close(gate_r)
            os.write(gate_w, b"go\ngo\n")
            os.close(gate_w)
            held = hold_first_locker(procs, out)
            res = {n: (p.wait(timeout=120), p.stderr.read(), p.pid) for n, p in procs.items()}
            stopped += held
            for p in procs.values():
                p.stdout.close()
                p.stderr.close()
            ok = [n for n in order if res[n][0] == 0]
            refused = [n for n in order if res[n][0] == 1 and lock_msg.search(res[n][1])]
            if len(ok) != 1 or len(refused) != 1:
                failures.append(f"run {run}: exits {({n: res[n][0] for n in order})}, not one success and one "
                                f"lock refusal: {[res[n][1] for n in order]}")
                continue
            holder = int(lock_msg.search(res[refused[0]][1]).group(1))
            if holder != res[ok[0]][2]:
                failures.append(f"run {run}: the refusal names pid {holder}, not the pack that ran")
            got = read_dir(out)
            if got != refs[ok[0]][1]:
                failures.append(f"run {run}: the folder is not {ok[0]}'s pack (files {sorted(got)[:4]}...)")
                continue
            v = subprocess.run([SF, "verify", out], capture_output=True, text=True)
            if v.returncode != 0:
                failures.append(f"run {run}: verify exited {v.returncode}: {v.stdout}{v.stderr}")
                continue
            winners[ok[0]] += 1
        print(f"{RUNS} runs of two packs started together into one folder ({shards} shards each): "
              f"A wrote it {winners['A']} times, B {winners['B']} times, the other refused by the lock each "
              f"time (the lock holder seen and held stopped until the other exited in {stopped} runs); "
              f"{time.monotonic() - t0:.1f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print("FAILED" if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
