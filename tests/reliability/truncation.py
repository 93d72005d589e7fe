#!/usr/bin/python3
"""A shard truncated while it is read: never a signal.

Three small datasets (fixed-size records packed with --align 64, the mmap engine's
batch path; an ImageFolder tree of 0.5-3 KB files, the per-record path; the same
with --compress image=zstd, the staged path) and 50 truncation points in one shard
of them (the last but one), chosen deterministically: evenly spread over its data
area and its index area, every other one page-aligned. Each point is run through
three front ends:

  C:      `shardfeed bench` (shuffle none, one epoch, the consumer sleeping between
          batches), on every engine (uring, pread, mmap, auto), on_corrupt error or
          skip in turn (each point and each engine meets both): 200 runs, 16 at a time. The shard is cut as soon as the reader's
          I/O threads exist, well before reading reaches it (the sleeps set the pace).
  Python: shardfeed.Loader (shuffle global), cutting the shard after the first batch,
          on every engine and with both policies: one worker process per engine.
  random access: shardfeed.open(...)[i] of every sample of the shard after the cut,
          with verify on; with verify off as well once Dataset[i] hands out copies made
          by sf_dataset_read_value (writable arrays) rather than views of the map
          (touching a view of a cut map faults, as any mmap does).

Every run must end with a non-negative exit status (no signal) and:
  - records lost (payload ending past the cut), on_corrupt=error: an error naming the
    shard file (the C exit status 1 or 2, shardfeed.Error in Python);
  - on_corrupt=skip, or nothing lost (a cut in the index area): the whole epoch, every
    sample intact (the checksums in C; compared with the packed values in Python), and
    as many substitutions as records lost after the cut was made.
Random access: a lost record is an error naming the shard; the rest read intact.

Environment: SHARDFEED, SF_SOURCE_DIR, SF_TEST_TMP as for the CLI tests; PYTHONPATH
with the shardfeed module for the Python legs (skipped, with a note, without it).
Prints the counts and the time; exit 0 on success.
"""
import concurrent.futures
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

SF = os.environ.get("SHARDFEED", "shardfeed")
PAGE = os.sysconf("SC_PAGESIZE")
POINTS = 50
ENGINES = ("uring", "pread", "mmap", "auto")
# name: (samples, batch size, bench sleep per batch in us)
DATASETS = {"fixed": (1200, 16, 4000), "var": (400, 8, 6000), "zstd": (400, 8, 6000)}
SHARE = {"fixed": 20, "var": 15, "zstd": 15}  # points per dataset: 50 in all
PREFETCH = 3

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


# ---- datasets and points -------------------------------------------------------------

def make_datasets(root):
    import random
    rng = random.Random(7)
    npy = os.path.join(root, "npy")
    os.makedirs(npy)
    # .npy files by hand (format 1.0): no numpy needed for the C leg.
    def save(path, descr, shape, data):
        head = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
        head = head.ljust((len(head) + 10 + 64) // 64 * 64 - 11) + "\n"
        with open(path, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + data)
    for i in range(DATASETS["fixed"][0]):
        save(os.path.join(npy, f"img_{i}.npy"), "<f4", "(8, 8)",
             struct.pack("<64f", *(i * 64 + j + 2.5 for j in range(64))))
        save(os.path.join(npy, f"label_{i}.npy"), "<i8", "()", struct.pack("<q", i))
    tree = os.path.join(root, "tree")
    for i in range(DATASETS["var"][0]):
        d = os.path.join(tree, f"c{i % 4}")
        os.makedirs(d, exist_ok=True)
        n = rng.randrange(500, 3000)
        with open(os.path.join(d, f"{i:05d}.png"), "wb") as f:
            f.write(bytes((i * 7 + j // 32) & 0xff | 1 for j in range(n)))  # compressible
    out = {}
    for name, src, opts in (("fixed", npy, ["--align", "64", "--shard-size", "48KiB"]),
                            ("var", tree, ["--align", "64", "--shard-size", "96KiB"]),
                            ("zstd", tree, ["--align", "64", "--shard-size", "96KiB",
                                            "--compress", "image=zstd"])):
        d = os.path.join(root, name)
        subprocess.run([SF, "pack", src, "-o", d, "--quiet", *opts], check=True)
        out[name] = d
    return out


def shard_layout(path):
    """The shard's bytes, data_offset, index_offset, index_size and its records as
    (sample, payload start, payload end)."""
    with open(path, "rb") as f:
        b = f.read()
    (_, _, _, _, _, _, count, first, data_off, index_off, index_size, entry_size,
     _) = struct.unpack_from("<HHIIIQQQQQQII", b, 8)
    recs = []
    for r in range(count):
        off, size = struct.unpack_from("<QQ", b, index_off + r * entry_size)
        recs.append((first + r, off, off + size))
    return b, data_off, index_off, index_size, recs


def points_for(ds_dir, share):
    """`share` cuts of the last shard but one: 70% in its data area, the rest in its
    index area; every other one rounded down to a page boundary (where one lies in the
    area), the others at an odd offset. A record is lost when its payload ends past the
    cut. A cut is moved down (a byte, or a page when aligned) while the part of a record
    past it is all zeros: through mmap those bytes read as the zeros they were, intact,
    where pread finds the end of the file."""
    shards = sorted(n for n in os.listdir(ds_dir) if n.endswith(".sfs"))
    name = shards[-2]
    b, data_off, index_off, index_size, recs = shard_layout(os.path.join(ds_dir, name))
    n_data = share * 7 // 10
    pts = []
    for k in range(share):
        lo, hi, j, n = ((data_off, index_off, k, n_data) if k < n_data else
                        (index_off, index_off + index_size, k - n_data, share - n_data))
        p = lo + (hi - lo) * (2 * j + 1) // (2 * n)
        aligned = k % 2 == 0 and p // PAGE * PAGE > lo
        p = p // PAGE * PAGE if aligned else p | 1
        while any(start < p < end and not any(b[p:end]) for _, start, end in recs):
            p -= PAGE if aligned else 1
        lost = [s for s, _, end in recs if end > p]
        pts.append({"shard": name, "cut": p, "area": "data" if k < n_data else "index",
                    "aligned": p % PAGE == 0, "lost": lost})
    return pts


def fresh_copy(src, root, tag, shard):
    """A copy of dataset `src` to cut: `shard` copied, the other files hard links."""
    d = os.path.join(root, tag)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name in os.listdir(src):
        (shutil.copyfile if name == shard else os.link)(os.path.join(src, name),
                                                        os.path.join(d, name))
    return d


# ---- C: shardfeed bench -----------------------------------------------------------------

def io_threads_exist(pid):
    """Whether process pid has a reader I/O thread yet (lib/reader/engine.c names them)."""
    task = f"/proc/{pid}/task"
    try:
        for t in os.listdir(task):
            with open(f"{task}/{t}/comm") as f:
                if f.read().strip() == "sf-io":
                    return True
    except OSError:
        pass
    return False


def bench_run(ds, pt, engine, skip, root, tag):
    samples, batch, sleep = DATASETS[ds["name"]]
    d = fresh_copy(ds["dir"], root, tag, pt["shard"])
    cmd = [SF, "bench", d, "--engine", engine, "--batch-size", str(batch), "--epochs", "1",
           "--shuffle", "none", "--prefetch", str(PREFETCH), "--threads", "2",
           "--consumer-sleep-us", str(sleep), "--json"] + (["--skip-corrupt"] if skip else [])
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Open is done once the I/O threads (named sf-io) exist; then cut. (Open itself runs
    # threads of its own, which check the shards' metadata: any second thread is too early.)
    deadline = time.monotonic() + 10
    while p.poll() is None and time.monotonic() < deadline and not io_threads_exist(p.pid):
        time.sleep(0.001)
    os.truncate(os.path.join(d, pt["shard"]), pt["cut"])
    out, err = p.communicate(timeout=120)
    shutil.rmtree(d, ignore_errors=True)
    what = f"bench {ds['name']} {pt['shard']} cut at {pt['cut']} ({pt['area']}), {engine}, " \
           f"{'skip' if skip else 'error'}"
    if p.returncode < 0:
        return fail(f"{what}: killed by signal {-p.returncode}\n{err}")
    lost = len(pt["lost"])
    if lost and not skip:
        if p.returncode == 0 or pt["shard"] not in err:
            return fail(f"{what}: expected an error naming {pt['shard']}: exit {p.returncode}\n{err}")
        return "error"
    if p.returncode != 0:
        return fail(f"{what}: exit {p.returncode}\n{err}")
    r = json.loads(out)
    if r["samples"] != samples or r["corrupt_substitutions"] != lost:
        return fail(f"{what}: {r['samples']} samples, {r['corrupt_substitutions']} substituted; "
                    f"expected {samples} and {lost}")
    return "substituted" if lost else "intact"


# ---- Python workers --------------------------------------------------------------------

def values_of(shardfeed, d):
    """{id: bytes} of every sample's payload field, and the field's name."""
    ds = shardfeed.open(d)
    field = "img" if "img" in [f.name for f in ds.fields] else "image"
    vals = {}
    for i in range(len(ds)):
        v = ds[i][field]
        vals[i] = bytes(v) if isinstance(v, bytes) else v.tobytes()
    ds.close()
    return field, vals


def as_bytes(v):
    return bytes(v) if isinstance(v, bytes) else v.tobytes()


def loader_point(shardfeed, ds, pt, engine, skip, root, field, vals, tag):
    samples, batch, _ = DATASETS[ds["name"]]
    seed = pt["cut"] % 1000
    # Batches that may have been read before the cut (the first, and read-ahead).
    ref = shardfeed.Loader(ds["dir"], batch, shuffle="global", seed=seed, output="numpy")
    early = set()
    for k, b in enumerate(ref):
        if k < PREFETCH:
            early.update(b.ids.tolist())
    ref.close()
    d = fresh_copy(ds["dir"], root, tag, pt["shard"])
    ld = shardfeed.Loader(d, batch, shuffle="global", seed=seed, prefetch=PREFETCH,
                          engine=engine, on_corrupt="skip" if skip else "error", output="numpy")
    lost = set(pt["lost"])
    seen, err = 0, None
    try:
        for b in ld:
            if b.index == 0:
                os.truncate(os.path.join(d, pt["shard"]), pt["cut"])
            for j, src in enumerate(b.source_ids.tolist()):
                got = b[field][j]
                if as_bytes(got) != vals[src]:
                    return f"sample {b.ids[j]} (from {src}) is not intact"
                if src in lost and b.index >= PREFETCH:
                    return f"lost sample {src} delivered in batch {b.index}"
            seen += b.size
    except shardfeed.Error as e:
        err = e
    subst = ld.stats()["corrupt_substitutions"]
    ld.close()
    shutil.rmtree(d, ignore_errors=True)
    late = lost - early
    if err is not None:
        if skip or not lost:
            return f"unexpected error: {err}"
        if pt["shard"] not in str(err):
            return f"the error does not name {pt['shard']}: {err}"
        return "error"
    if late and not skip:
        return f"no error, {len(late)} records lost"
    if seen != samples or not len(late) <= subst <= len(lost):
        return f"{seen} samples, {subst} substituted; expected {samples} and {len(late)}-{len(lost)}"
    return "substituted" if subst else "intact"


def random_access_point(shardfeed, ds, pt, root, field, vals, verify, tag):
    d = fresh_copy(ds["dir"], root, tag, pt["shard"])
    lost = set(pt["lost"])
    data = shardfeed.open(d, verify=verify)
    shard = next(s for s in data.shards if s.name == pt["shard"])
    ids = range(shard.first_sample, shard.first_sample + shard.num_samples)
    data[ids[0]]  # maps the shard
    os.truncate(os.path.join(d, pt["shard"]), pt["cut"])
    bad = None
    errors = 0
    for i in ids:
        try:
            v = as_bytes(data[i][field])
        except shardfeed.Error as e:
            if i not in lost or pt["shard"] not in str(e):
                bad = bad or f"sample {i}: {e}"
            errors += 1
            continue
        if i in lost and verify:
            bad = bad or f"sample {i} lost but read"
        elif i not in lost and v != vals[i]:
            bad = bad or f"sample {i} is not intact"
    data.close()
    shutil.rmtree(d, ignore_errors=True)
    return bad or ("error" if errors else "intact")


def worker(kind, arg, root, datasets, points):
    """Runs one group of Python points; prints one JSON line per point."""
    import shardfeed
    cache = {}
    for ds_name, pt in points:
        ds = {"name": ds_name, "dir": datasets[ds_name]}
        if ds_name not in cache:
            cache[ds_name] = values_of(shardfeed, ds["dir"])
        field, vals = cache[ds_name]
        runs = []
        if kind == "loader":
            for skip in (False, True):
                runs.append((f"loader {arg} {'skip' if skip else 'error'}",
                             lambda skip=skip: loader_point(shardfeed, ds, pt, arg, skip, root,
                                                            field, vals, f"w-{arg}")))
        else:
            probe = shardfeed.open(ds["dir"])
            copies = not isinstance(probe[0][field], bytes) and probe[0][field].flags.writeable
            probe.close()
            for verify in ((True, False) if copies else (True,)):
                runs.append((f"random access verify={verify}",
                             lambda verify=verify: random_access_point(
                                 shardfeed, ds, pt, root, field, vals, verify, "w-ra")))
        for what, fn in runs:
            print(json.dumps({"what": what, "ds": ds_name, "cut": pt["cut"], "area": pt["area"],
                              "result": fn()}), flush=True)


def python_group(kind, arg, root, datasets, points):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, arg, root,
           json.dumps(datasets), json.dumps(points)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    results = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    name = f"python {kind} {arg}"
    if p.returncode < 0:
        last = results[-1] if results else None
        fail(f"{name}: killed by signal {-p.returncode} after {last}\n{p.stderr[-2000:]}")
    elif p.returncode != 0:
        fail(f"{name}: exit {p.returncode}\n{p.stderr[-2000:]}")
    out = []
    for r in results:
        if r["result"] not in ("error", "intact", "substituted"):
            fail(f"{r['what']} {r['ds']} cut at {r['cut']} ({r['area']}): {r['result']}")
        out.append(r["result"])
    return out


def have_python_module():
    return subprocess.run([sys.executable, "-c", "import shardfeed"],
                          capture_output=True).returncode == 0


def main():
    t0 = time.monotonic()
    tmp_root = os.environ.get("SF_TEST_TMP")
    if tmp_root:
        os.makedirs(tmp_root, exist_ok=True)
    root = tempfile.mkdtemp(prefix="truncation-", dir=tmp_root)
    try:
        datasets = make_datasets(root)
        points = [(name, pt) for name in DATASETS for pt in points_for(datasets[name], SHARE[name])]
        assert len(points) == POINTS
        n_aligned = sum(pt["aligned"] for _, pt in points)
        n_index = sum(pt["area"] == "index" for _, pt in points)
        print(f"{POINTS} points: {POINTS - n_index} in data areas, {n_index} in index areas, "
              f"{n_aligned} page-aligned", flush=True)
        counts = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            pyjobs = []
            if have_python_module():
                for e in ENGINES:
                    pyjobs.append(pool.submit(python_group, "loader", e, root, datasets, points))
                pyjobs.append(pool.submit(python_group, "ra", "-", root, datasets, points))
            else:
                print("NOTE: the shardfeed Python module is not importable: Python legs skipped")
            jobs = []
            for k, (name, pt) in enumerate(points):
                for x, e in enumerate(ENGINES):
                    skip = (k + x) % 2 == 1  # each point and each engine meets both policies
                    jobs.append(pool.submit(bench_run, {"name": name, "dir": datasets[name]},
                                            pt, e, skip, root, f"b{k}-{e}"))
            for j in jobs:
                r = j.result()
                counts[f"bench {r}"] = counts.get(f"bench {r}", 0) + 1
            for j in pyjobs:
                for r in j.result():
                    counts[f"python {r}"] = counts.get(f"python {r}", 0) + 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("outcomes:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"{time.monotonic() - t0:.1f} s")
    if failures:
        sys.exit(f"{len(failures)} failure(s)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, arg, root, datasets, points = sys.argv[2:7]
        worker(kind, arg, root, json.loads(datasets), [tuple(p) for p in json.loads(points)])
    else:
        main()
