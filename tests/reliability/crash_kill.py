#!/usr/bin/python3
"""Crash safety of `shardfeed pack`: SIGKILL at random moments.

Packs a synthetic input (SF_CRASH_SAMPLES samples of 3x32x32 float32, 64 KiB
shards, -j 2: about 75 shards) once, completely, into a reference
directory. Then, until SF_CRASH_RUNS (default 200) packs were killed:
  1. start the same pack into an empty directory and SIGKILL it after a
     random delay: in 80% of the runs while shards are being written (from
     0 to the earliest kill so far that found every shard), else up to the
     end of the pack (the packer then idles up to 200 ms before writing the
     manifest, see lib/packer/pack.c run_workers);
  2. check the partial state: every file under a final name
     (shard-NNNNNN.sfs, manifest.sfm) is byte-identical to the reference's
     (so it is complete and valid); a manifest only ever appears with all
     shards; nothing else but the packer's hidden .NAME.<dataset_id>.tmp
     files and its lock file (.shardfeed.lock) exists;
  3. in half of the runs, re-run the pack and kill that too (a resumed run
     can die as well), and check again;
  4. re-run the same command to completion: it must succeed, keep the
     finished shards, leave no temporaries, and produce a directory
     byte-identical to the reference; `shardfeed verify` must pass (a
     re-run on a pack that had finished says "already complete", exit 0).

Then, SF_CRASH_AB_RUNS times (default 15% of SF_CRASH_RUNS, at least 10:
30), the same with two inputs: A and
B have the same file names and sizes (so the same dataset_id) and other
values. A pack of A is killed at a random moment (or left to finish), then
B is packed into the same directory. The result must be byte-identical to
a reference pack of B (whose every value is checked against B's files)
and verify: no shard of A may be kept. When A had finished, B without
--force is refused as a different dataset, leaving A's pack as it was;
with --force, killed at a random moment, A's pack is still whole (B's
temporaries beside it) unless B finished; run again, it becomes B's.

Environment: SHARDFEED (the binary), SF_SOURCE_DIR (the source tree, for
tools/make-npy-samples.py), SF_TEST_TMP (scratch space), SF_CRASH_RUNS,
SF_CRASH_SAMPLES, SF_CRASH_SEED, SF_CRASH_AB_RUNS. Prints the counts; exit 0 on success.
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
RUNS = int(os.environ.get("SF_CRASH_RUNS", "200"))
SAMPLES = int(os.environ.get("SF_CRASH_SAMPLES", "300"))
SEED = int(os.environ.get("SF_CRASH_SEED", "12345"))
# 30 with the default 200 kill runs; fewer where fewer kills are asked for (ASan).
AB_RUNS = int(os.environ.get("SF_CRASH_AB_RUNS", str(max(10, RUNS * 3 // 20))))
SHARD_RE = re.compile(r"^shard-\d{6}\.sfs$")
# Temporaries carry the run's dataset_id; the lock file stays after a kill.
TEMP_RE = re.compile(r"^\.(shard-\d{6}\.sfs|manifest\.sfm)\.[0-9a-f]{16}\.tmp$")
LOCK_NAME = ".shardfeed.lock"

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)
    if len(failures) > 20:
        sys.exit("too many failures")


def pack_cmd(src, out):
    return [SF, "pack", src, "-o", out, "-j", "2", "--shard-size", "64KiB"]


def check_partial(out, ref, what, stats):
    """Final names hold reference bytes; only temporaries besides."""
    names = os.listdir(out) if os.path.isdir(out) else []
    finals = 0
    for name in names:
        path = os.path.join(out, name)
        if SHARD_RE.match(name) or name == "manifest.sfm":
            with open(path, "rb") as f:
                data = f.read()
            if name not in ref:
                fail(f"{what}: {name} is not part of the dataset")
            elif data != ref[name]:
                fail(f"{what}: {name} differs from the reference ({len(data)} vs {len(ref[name])} bytes): "
                     "a final name holds an incomplete or wrong file")
            finals += 1
        elif TEMP_RE.match(name):
            stats["temps_seen"] += 1
        elif name == LOCK_NAME:
            stats["locks_seen"] += 1
        else:
            fail(f"{what}: unexpected file {name}")
    if "manifest.sfm" in names:
        missing = [n for n in ref if n not in names]
        if missing:
            fail(f"{what}: manifest present but {len(missing)} shard(s) missing, e.g. {missing[0]}")
        stats["manifest_seen"] += 1
    return finals


def start_and_kill(cmd, delay):
    """Starts cmd and SIGKILLs it after `delay` seconds unless it ended:
    (exit status, stderr)."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
    _, err = p.communicate()
    return p.returncode, err


def kill_run(cmd, delay, stats, fresh=False):
    """Starts cmd, SIGKILLs it after `delay` seconds. True if it was killed.
    A fresh run that finished first lowers the timing estimate."""
    t0 = time.monotonic()
    returncode, err = start_and_kill(cmd, delay)
    if returncode == -signal.SIGKILL:
        stats["killed"] += 1
        return True
    if returncode == 0:
        stats["finished_before_kill"] += 1
        if fresh:
            stats["t_pack"] = min(stats["t_pack"], time.monotonic() - t0)
    else:
        fail(f"pack exited {returncode} before the kill: {err.decode(errors='replace')}")
    return False


def killed_forced_b(out, src_b, ref_a, ref_b, delay, what, st):
    """`pack B --force` over the complete A, killed after `delay`: the folder holds A whole
    (B's temporaries beside it) or, once B finished, B whole; only a kill among the final
    renames (no data written there) may leave no manifest, with every final name A's or
    B's bytes."""
    returncode, err = start_and_kill(pack_cmd(src_b, out) + ["--force"], delay)
    if returncode not in (0, -signal.SIGKILL):
        fail(f"{what}: pack B --force exited {returncode}: {err.decode(errors='replace')}")
        return
    finals = {n: v for n, v in read_dir(out).items() if SHARD_RE.match(n) or n == "manifest.sfm"}
    if "manifest.sfm" in finals:
        if finals == ref_a:
            st["forced_killed_a_kept"] += 1
        elif finals == ref_b:
            st["forced_killed_b_done"] += 1
        else:
            fail(f"{what}: killed pack B --force left a manifest with neither A's nor B's dataset")
    else:
        st["forced_killed_in_swap"] += 1
        mixed = [n for n, v in finals.items() if v not in (ref_a.get(n), ref_b.get(n))]
        if mixed:
            fail(f"{what}: killed pack B --force left {mixed[:3]} holding neither A's nor B's bytes")


def other_input_runs(tmp, src_a, ref_a, rng, t_shards, t_pack):
    """Kill a pack of A, then pack B (same names and sizes, other values)
    into the same directory: the result is exactly B's pack."""
    src_b = os.path.join(tmp, "in_b")
    make_input(src_b, SAMPLES, "3,32,32", 8)
    ref_b_dir = os.path.join(tmp, "ref_b")
    subprocess.run(pack_cmd(src_b, ref_b_dir) + ["-q"], check=True)
    ref_b = read_dir(ref_b_dir)
    if sorted(ref_b) != sorted(ref_a) or ref_b == ref_a:
        fail("inputs A and B do not have the same names and sizes with other values")
        return
    values, bad = value_mismatches(ref_b_dir, src_b)
    if bad:
        fail(f"the reference pack of B differs from B's files in {bad[:3]}")
    out = os.path.join(tmp, "out_ab")
    st = dict(killed=0, finished=0, refused=0, forced=0, ok=0, temps_seen=0, locks_seen=0, manifest_seen=0,
              forced_killed_a_kept=0, forced_killed_b_done=0, forced_killed_in_swap=0)
    for run in range(AB_RUNS):
        shutil.rmtree(out, ignore_errors=True)
        # Every 5th run lets A finish: B must then be refused unless forced.
        delay = 10 * t_pack + 1 if run % 5 == 4 else rng.uniform(0, t_shards)
        returncode, err = start_and_kill(pack_cmd(src_a, out), delay)
        if returncode == -signal.SIGKILL:
            st["killed"] += 1
        elif returncode == 0:
            st["finished"] += 1
        else:
            fail(f"A/B run {run}: pack A exited {returncode}: {err.decode(errors='replace')}")
            continue
        check_partial(out, ref_a, f"A/B run {run} after A", st)
        complete = os.path.exists(os.path.join(out, "manifest.sfm"))
        b = subprocess.run(pack_cmd(src_b, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if complete:
            if b.returncode != 1 or b"different shardfeed dataset" not in b.stderr:
                fail(f"A/B run {run}: B over a complete A exited {b.returncode}, not refused: "
                     f"{b.stderr.decode(errors='replace')}")
            elif read_dir(out) != ref_a:
                fail(f"A/B run {run}: the refused B changed A's dataset")
            st["refused"] += 1
            killed_forced_b(out, src_b, ref_a, ref_b, rng.uniform(0, t_pack), f"A/B run {run}", st)
            b = subprocess.run(pack_cmd(src_b, out) + ["--force"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
            st["forced"] += 1
        if b.returncode != 0:
            fail(f"A/B run {run}: pack B exited {b.returncode}: {b.stderr.decode(errors='replace')}")
            continue
        if b"kept" in b.stdout:
            fail(f"A/B run {run}: pack B kept shards of A: {b.stdout.decode(errors='replace')}")
        got = read_dir(out)
        if got != ref_b:
            diff = [n for n in ref_b if got.get(n) != ref_b[n]]
            fail(f"A/B run {run}: the result is not B's pack (differs in {diff[:3]}, "
                 f"extra {sorted(set(got) - set(ref_b))[:3]})")
            continue
        v = subprocess.run([SF, "verify", "-j", "2", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if v.returncode != 0:
            fail(f"A/B run {run}: verify exited {v.returncode}: {v.stdout.decode(errors='replace')}")
            continue
        st["ok"] += 1
    print(f"other input: {AB_RUNS} runs packing B over A ({st['killed']} A killed, {st['finished']} A "
          f"finished: {st['refused']} B refused then {st['forced']} forced); {st['ok']}/{AB_RUNS} hold "
          f"exactly B's pack ({values} values checked against B's files) and verified", flush=True)
    print(f"B --force over a finished A, killed: A whole {st['forced_killed_a_kept']} times, B whole "
          f"{st['forced_killed_b_done']}, killed among the renames {st['forced_killed_in_swap']}", flush=True)
    if st["forced_killed_a_kept"] == 0:
        fail("no killed pack B --force was caught while writing B (A kept)")
    if st["killed"] == 0 or st["finished"] == 0:
        fail("the A/B runs did not cover both a killed and a finished A")


def main():
    base = os.environ.get("SF_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="sf-crash-", dir=base)
    rng = random.Random(SEED)
    t_start = time.monotonic()
    try:
        src = os.path.join(tmp, "in")
        make_input(src, SAMPLES, "3,32,32", 7)
        ref_dir = os.path.join(tmp, "ref")
        times = []
        for i in range(3):
            shutil.rmtree(ref_dir, ignore_errors=True)
            t0 = time.monotonic()
            subprocess.run(pack_cmd(src, ref_dir) + ["-q"], check=True)
            times.append(time.monotonic() - t0)
        t_ref = min(times)
        ref = read_dir(ref_dir)
        n_shards = sum(1 for n in ref if SHARD_RE.match(n))
        print(f"reference: {SAMPLES} samples, {n_shards} shards, "
              f"{sum(len(v) for v in ref.values()) / 1e6:.1f} MB, pack takes {t_ref * 1000:.0f} ms", flush=True)
        if subprocess.run([SF, "verify", ref_dir], stdout=subprocess.DEVNULL).returncode != 0:
            fail("the reference does not verify")
        # When the last shard appears is learnt from the kills themselves
        # (the earliest kill that found every shard), without watching a run.
        t_shards = t_ref

        stats = dict(killed=0, finished_before_kill=0, noop_complete=0, temps_seen=0, locks_seen=0,
                     manifest_seen=0, resumed_ok=0, shards_kept=0, double_kills=0, t_pack=t_ref)
        finals_at_kill = []
        out = os.path.join(tmp, "out")
        run = 0
        while stats["killed"] < RUNS and run < 3 * RUNS:
            shutil.rmtree(out, ignore_errors=True)
            cmd = pack_cmd(src, out)
            delay = (rng.uniform(0, t_shards) if rng.random() < 0.8
                     else rng.uniform(t_shards, 1.05 * stats["t_pack"]))
            if kill_run(cmd, delay, stats, fresh=True):
                finals = check_partial(out, ref, f"run {run} after kill", stats)
                finals_at_kill.append(finals)
                if finals >= n_shards:
                    t_shards = min(t_shards, delay)
            else:
                check_partial(out, ref, f"run {run} (finished before the kill)", stats)
            if rng.random() < 0.5:
                if kill_run(cmd, rng.uniform(0, stats["t_pack"]), stats):
                    stats["double_kills"] += 1
                check_partial(out, ref, f"run {run} after killing the resumed run", stats)
            # complete it: the same command again (on a complete dataset, a no-op success)
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if p.returncode != 0:
                fail(f"run {run}: re-run failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
                run += 1
                continue
            if b"already complete" in p.stdout:
                stats["noop_complete"] += 1
            m = re.search(rb"\((\d+) finished shards kept", p.stdout)
            if m:
                stats["shards_kept"] += int(m.group(1))
            got = read_dir(out)
            if got != ref:
                extra = sorted(set(got) - set(ref))
                missing = sorted(set(ref) - set(got))
                diff = [n for n in ref if n in got and got[n] != ref[n]]
                fail(f"run {run}: after re-running, the output differs from the reference "
                     f"(extra {extra[:3]}, missing {missing[:3]}, different {diff[:3]})")
                run += 1
                continue
            v = subprocess.run([SF, "verify", "-j", "2", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if v.returncode != 0:
                fail(f"run {run}: verify after re-run exited {v.returncode}: {v.stdout.decode(errors='replace')}")
                run += 1
                continue
            stats["resumed_ok"] += 1
            run += 1

        finals_at_kill.sort()
        spread = (f"final-named files present at kill time: min {finals_at_kill[0]}, median "
                  f"{finals_at_kill[len(finals_at_kill) // 2]}, max {finals_at_kill[-1]} of {len(ref)}"
                  if finals_at_kill else "no run was killed")
        print(f"kill runs: {stats['killed']} packs killed with SIGKILL in {run} runs "
              f"({stats['killed'] - stats['double_kills']} fresh packs, {stats['double_kills']} resumed packs), "
              f"{stats['finished_before_kill']} finished before their kill; fastest pack "
              f"{stats['t_pack'] * 1000:.0f} ms, every shard written by {t_shards * 1000:.0f} ms; {spread}",
              flush=True)
        print(f"partial states: temporaries seen {stats['temps_seen']} times, lock files "
              f"{stats['locks_seen']} times, manifest seen {stats['manifest_seen']} times (always with every "
              f"shard); re-runs: {stats['resumed_ok']}/{run} byte-identical to the reference and verified, "
              f"{stats['shards_kept']} finished shards kept in total, {stats['noop_complete']} found the pack "
              f"already complete; {time.monotonic() - t_start:.1f} s", flush=True)
        if stats["killed"] < RUNS:
            fail(f"only {stats['killed']} packs were killed in {run} runs: timing is off")
        other_input_runs(tmp, src, ref, rng, t_shards, stats["t_pack"])
        print(f"{time.monotonic() - t_start:.1f} s in all", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"FAILED: {len(failures)} problem(s)")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
