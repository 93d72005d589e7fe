#!/usr/bin/python3
"""`shardfeed pack` on a full disk and on a read-only output directory.

Needs root (mount). Runs in a private mount namespace (unshare -m) when it
can, so an interrupted run leaves no mounts behind; exits 77 (ctest: skipped)
when it cannot mount.

  full disk: small tmpfs mounts (2 MiB, and sizes around the point where the
    shards fit but the manifest does not): pack must exit 1 with a message
    naming the file it could not write and "No space left on device"; no
    manifest; every file under a final shard name byte-identical to a
    reference pack (nothing half-written under final names); no temporaries
    left; inputs untouched. After growing the mount, re-running the same
    command completes a dataset byte-identical to the reference. And --force
    over a complete dataset with room for one dataset but not two: refused,
    the old dataset kept byte for byte; with room, it is replaced.
  read-only: a tmpfs remounted read-only holding (a) nothing, (b) the state
    of an interrupted pack, (c) a complete dataset (with --force): pack must
    exit 1 naming the directory, and change nothing. Also a read-only bind
    mount of the input directory packs fine (inputs are only read).

Environment: SHARDFEED, SF_SOURCE_DIR, SF_TEST_TMP as for the CLI tests.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

from pack_checks import read_dir

SF = os.environ.get("SHARDFEED", "shardfeed")
SRC = os.environ.get("SF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SKIP = 77
SHARD_RE = re.compile(r"^shard-\d{6}\.sfs$")
# Temporaries carry the run's dataset_id (SPEC.md "Writer rules").
TEMP_RE = re.compile(r"^\.(shard-\d{6}\.sfs|manifest\.sfm)\.[0-9a-f]{16}\.tmp$")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def sh(*args, check=True):
    return subprocess.run(args, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    sh("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path)


def umount(path):
    subprocess.run(["umount", "-l", path], stderr=subprocess.DEVNULL)


def tree_digest(d):
    """{name: sha256} of every file under d."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def pack(src, out, *extra):
    return subprocess.run([SF, "pack", src, "-o", out, "-j", "2", "--shard-size", "64KiB", "-q", *extra],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def check_no_half_files(out, ref, what, allow_temps=False):
    for name in os.listdir(out):
        with open(os.path.join(out, name), "rb") as f:
            data = f.read()
        if SHARD_RE.match(name):
            if ref.get(name) != data:
                fail(f"{what}: {name} under a final name differs from the reference ({len(data)} bytes)")
        elif name == "manifest.sfm":
            fail(f"{what}: a manifest was written by a failed pack")
        elif TEMP_RE.match(name):
            if not allow_temps:
                fail(f"{what}: temporary {name} left behind after a clean failure")
        else:
            fail(f"{what}: unexpected file {name}")


def full_disk(tmp, src, ref, ref_pages):
    """Returns the number of cases run."""
    mnt = os.path.join(tmp, "full")
    total = ref_pages * 4096
    manifest_pages = (len(ref["manifest.sfm"]) + 4095) // 4096
    shard_pages = ref_pages - manifest_pages
    # 2 MiB (the brief's case), a few random-ish sizes, and around "every
    # shard fits, the manifest does not".
    sizes = ["2M", "1M", "600k", f"{(shard_pages - 1) * 4}k", f"{shard_pages * 4}k",
             f"{(shard_pages + 1) * 4}k"]
    manifest_failures = 0
    for size in sizes:
        what = f"full disk (tmpfs size={size}, dataset needs {total // 1024} KiB)"
        before = tree_digest(src)
        mount_tmpfs(mnt, size)
        try:
            out = os.path.join(mnt, "out")
            p = pack(src, out)
            err = p.stderr.decode(errors="replace").strip()
            if p.returncode == 0:
                # the dataset fitted after all (tmpfs rounding): it must be complete
                if read_dir(out) != ref:
                    fail(f"{what}: pack succeeded but the output differs from the reference")
                print(f"  {what}: fitted, complete", flush=True)
                continue
            if p.returncode != 1:
                fail(f"{what}: exit {p.returncode}, want 1: {err}")
            m = re.search(r"(/\S+?)(?::| )", err)
            named = m.group(1) if m else ""
            if "No space left on device" not in err or not named.startswith(out):
                fail(f"{what}: error does not name the file and the cause: {err!r}")
            if "manifest.sfm" in err:
                manifest_failures += 1
            check_no_half_files(out, ref, what)
            finals = sum(1 for n in os.listdir(out) if SHARD_RE.match(n))
            print(f"  {what}: exit 1, {finals} complete shards kept: {err}", flush=True)
            # room again: the same command completes the dataset
            sh("mount", "-o", "remount,size=64M", mnt)
            p = pack(src, out)
            if p.returncode != 0:
                fail(f"{what}: re-run with space failed: {p.stderr.decode(errors='replace')}")
            elif read_dir(out) != ref:
                fail(f"{what}: re-run with space did not give the reference bytes")
        finally:
            umount(mnt)
        if tree_digest(src) != before:
            fail(f"{what}: the input files changed")
    if manifest_failures == 0:
        print("  note: no size hit the manifest write itself", flush=True)
    return len(sizes)


def full_disk_replacing(tmp, src, ref, ref_pages):
    """pack --force of B over a complete dataset A, on a disk with room for one of them but
    not both: refused for want of room, saying so, and A is as it was, file for file (it is
    removed only once B is written). With room again, the same command replaces it."""
    src_b = os.path.join(tmp, "in_b")
    subprocess.run([sys.executable, os.path.join(SRC, "tools", "make-npy-samples.py"), "synthetic", src_b,
                    "--count", "200", "--shape", "3,32,32", "--seed", "4"], check=True, stdout=subprocess.DEVNULL)
    ref_b_dir = os.path.join(tmp, "ref_b")
    if pack(src_b, ref_b_dir).returncode != 0:
        fail("reference pack of B failed")
        return 0
    ref_b = read_dir(ref_b_dir)
    mnt = os.path.join(tmp, "full")
    size = f"{ref_pages * 4 * 3 // 2}k"
    what = f"full disk, --force over a complete dataset (tmpfs size={size}, each dataset {ref_pages * 4} KiB)"
    mount_tmpfs(mnt, size)
    try:
        out = os.path.join(mnt, "out")
        shutil.copytree(os.path.join(tmp, "ref"), out)
        p = pack(src_b, out, "--force")
        err = p.stderr.decode(errors="replace").strip()
        if p.returncode != 1 or "No space left on device" not in err:
            fail(f"{what}: exit {p.returncode}, want 1 for want of room: {err}")
        if f"the dataset in {out} is as it was" not in err or "room for both" not in err:
            fail(f"{what}: the error does not say the dataset is kept and why: {err!r}")
        if read_dir(out) != ref:
            fail(f"{what}: the dataset to be replaced changed (or a temporary was left)")
        print(f"  {what}: exit {p.returncode}, dataset kept: {err}", flush=True)
        sh("mount", "-o", "remount,size=64M", mnt)
        p = pack(src_b, out, "--force")
        if p.returncode != 0 or read_dir(out) != ref_b:
            fail(f"{what}: with room, --force did not give B's pack: {p.stderr.decode(errors='replace')}")
    finally:
        umount(mnt)
    return 1


def full_disk_replacing_sweep(tmp, src, ref, ref_pages):
    """pack --force of B over A, A held open by a reader, on disks sized around "A plus B's
    shards fit, B's manifest does not": each run either replaces A with exactly B, or fails
    leaving A file for file.
    The old dataset must never be removed before the new manifest is written (it was: a full
    disk at the manifest left neither). Needs full_disk_replacing's B."""
    ref_b = read_dir(os.path.join(tmp, "ref_b"))
    src_b = os.path.join(tmp, "in_b")
    mnt = os.path.join(tmp, "full")
    cases = manifest_hits = 0
    for pages in range(2 * ref_pages - 4, 2 * ref_pages + 3):
        what = f"full disk, --force over a complete dataset (tmpfs {pages * 4} KiB, each dataset {ref_pages * 4} KiB)"
        mount_tmpfs(mnt, f"{pages * 4}k")
        try:
            out = os.path.join(mnt, "out")
            shutil.copytree(os.path.join(tmp, "ref"), out)
            # A reader has the old dataset open, as a training job would: shards renamed over
            # or removed keep their room until it closes them.
            held = [open(os.path.join(out, n), "rb") for n in os.listdir(out)]
            try:
                p = pack(src_b, out, "--force")
            finally:
                for f in held:
                    f.close()
            err = p.stderr.decode(errors="replace").strip()
            got = read_dir(out)
            if p.returncode == 0:
                if got != ref_b:
                    fail(f"{what}: succeeded but the folder is not B's pack")
            elif got != ref:
                fail(f"{what}: failed ({err}) and the dataset to be replaced changed: "
                     f"{sorted(set(got) ^ set(ref))[:4]}")
            elif "manifest.sfm" in err:
                manifest_hits += 1
            cases += 1
        finally:
            umount(mnt)
    print(f"  --force on a nearly full disk: {cases} sizes, {manifest_hits} failed writing the manifest, "
          f"the old dataset whole after every failure", flush=True)
    if manifest_hits == 0:
        fail("no size made the new manifest's write fail")
    return cases


def full_disk_merge(tmp, src, ref_pages):
    """merge into a disk too small for the merged shards: exit 1 naming the output file it
    could not write and the cause (it named the part's shard it was copying from), nothing
    of the merge left in the output folder."""
    parts = []
    for k in range(2):
        d = os.path.join(tmp, f"part{k}")
        p = subprocess.run([SF, "pack", src, "-o", d, "--part", f"{k}/2", "--shard-size", "64KiB", "-q"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if p.returncode != 0:
            fail(f"packing part {k} failed: {p.stderr.decode(errors='replace')}")
            return 0
        parts.append(d)
    mnt = os.path.join(tmp, "full")
    size = f"{ref_pages * 4 // 2}k"
    what = f"full disk, merge (tmpfs size={size}, the merge needs {ref_pages * 4} KiB)"
    mount_tmpfs(mnt, size)
    try:
        out = os.path.join(mnt, "out")
        p = subprocess.run([SF, "merge", *parts, "-o", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err = p.stderr.decode(errors="replace").strip()
        if p.returncode != 1 or "No space left on device" not in err or f"to {out}/" not in err:
            fail(f"{what}: exit {p.returncode}, want 1 naming the output file and the cause: {err!r}")
        left = [n for n in os.listdir(out) if n != ".shardfeed.lock"] if os.path.isdir(out) else []
        if left:
            fail(f"{what}: left {left[:3]} in the output folder")
        print(f"  {what}: exit {p.returncode}: {err}", flush=True)
    finally:
        umount(mnt)
    return 1


def read_only(tmp, src, ref):
    mnt = os.path.join(tmp, "ro")
    cases = 0
    # (a) empty read-only filesystem, the output directory not there yet
    # (b) read-only, an existing empty output directory
    # (c) read-only, the state of an interrupted run (some shards, a temporary)
    # (d) read-only, a complete dataset, with --force
    shards = sorted(n for n in ref if SHARD_RE.match(n))
    dataset_id = int.from_bytes(ref["manifest.sfm"][48:56], "little")
    temp = f".{shards[3]}.{dataset_id:016x}.tmp"
    setups = {
        "missing output dir": lambda out: None,
        "empty output dir": lambda out: os.makedirs(out),
        "interrupted run": lambda out: (os.makedirs(out), [shutil.copy(os.path.join(tmp, "ref", n), out)
                                                          for n in shards[:3]],
                                        open(os.path.join(out, temp), "wb").write(b"x" * 100)),
        "complete dataset, --force": lambda out: shutil.copytree(os.path.join(tmp, "ref"), out),
    }
    for name, setup in setups.items():
        what = f"read-only output ({name})"
        before_in = tree_digest(src)
        mount_tmpfs(mnt, "16M")
        try:
            out = os.path.join(mnt, "out")
            setup(out)
            sh("mount", "-o", "remount,ro", mnt)
            before = tree_digest(mnt)
            p = pack(src, out, *(["--force"] if "force" in name else []))
            err = p.stderr.decode(errors="replace").strip()
            if p.returncode != 1:
                fail(f"{what}: exit {p.returncode}, want 1: {err}")
            if out not in err or not re.search(r"Read-only file system|not writable", err):
                fail(f"{what}: error does not name the directory and the cause: {err!r}")
            if tree_digest(mnt) != before:
                fail(f"{what}: the read-only directory changed")
            print(f"  {what}: exit {p.returncode}: {err}", flush=True)
            cases += 1
        finally:
            umount(mnt)
        if tree_digest(src) != before_in:
            fail(f"{what}: the input files changed")

    # read-only input: packing only reads it
    ro_in = os.path.join(tmp, "ro-in")
    os.makedirs(ro_in)
    sh("mount", "--bind", src, ro_in)
    try:
        sh("mount", "-o", "remount,bind,ro", ro_in)
        out = os.path.join(tmp, "from-ro-in")
        p = pack(ro_in, out)
        if p.returncode != 0 or read_dir(out) != ref:
            fail(f"read-only input: exit {p.returncode}, output identical: "
                 f"{p.returncode == 0 and read_dir(out) == ref}: {p.stderr.decode(errors='replace')}")
        else:
            print("  read-only input (bind mount): packs, output identical to the reference", flush=True)
        cases += 1
    finally:
        umount(ro_in)
    return cases


def main():
    if os.environ.get("SF_IN_MOUNT_NS") != "1" and shutil.which("unshare"):
        if subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                          stderr=subprocess.DEVNULL).returncode == 0:
            env = dict(os.environ, SF_IN_MOUNT_NS="1")
            os.execvpe("unshare", ["unshare", "-m", "--propagation", "private", sys.executable,
                                   os.path.abspath(__file__)], env)
    base = os.environ.get("SF_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="sf-disk-", dir=base)
    try:
        probe = os.path.join(tmp, "probe")
        try:
            mount_tmpfs(probe, "1M")
            umount(probe)
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            print(f"SKIP: cannot mount a tmpfs here (need root): {e}")
            return SKIP
        src = os.path.join(tmp, "in")
        subprocess.run([sys.executable, os.path.join(SRC, "tools", "make-npy-samples.py"), "synthetic", src,
                        "--count", "200", "--shape", "3,32,32", "--seed", "3"], check=True,
                       stdout=subprocess.DEVNULL)
        ref_dir = os.path.join(tmp, "ref")
        p = pack(src, ref_dir)
        if p.returncode != 0:
            sys.exit(f"reference pack failed: {p.stderr.decode()}")
        ref = read_dir(ref_dir)
        pages = sum((len(v) + 4095) // 4096 for v in ref.values())
        print(f"reference: {len(ref) - 1} shards + manifest, {pages * 4} KiB in pages", flush=True)
        n = full_disk(tmp, src, ref, pages)
        n += full_disk_replacing(tmp, src, ref, pages)
        n += full_disk_replacing_sweep(tmp, src, ref, pages)
        n += full_disk_merge(tmp, src, pages)
        n += read_only(tmp, src, ref)
        print(f"disk error cases: {n}", flush=True)
    finally:
        for sub in ("full", "ro", "ro-in", "probe"):
            umount(os.path.join(tmp, sub))
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"FAILED: {len(failures)} problem(s)")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
