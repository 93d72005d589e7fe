"""A block shuffle's window against the cache limit (issue 18; README "Remote datasets"): over a
dataset 4x the cache limit, a window whose shards do not fit is reported once on stderr at open,
with the window's shard bytes, the limit and the limit or window that would fit, while the order
stays the local read's; the window it proposes reads each shard about once (downloads counted at
the FaultProxy, no faults), and so does shuffle none. The Loader runs in a child process: the
report is the C library's stderr. Every test has a deadline; the servers bind 127.0.0.1 only."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import RemoteCase, main, run, write_samples  # noqa: E402

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)

# One epoch in a child process: its ids and a digest of its bytes as JSON on stdout.
CHILD = r"""
import hashlib, json, sys
import shardfeed
path, kw = sys.argv[1], json.loads(sys.argv[2])
ids, h = [], hashlib.sha256()
with shardfeed.Loader(path, batch_size=16, seed=3, output="numpy", **kw) as loader:
    for b in loader:
        ids += b.ids.tolist()
        h.update(b["img"].tobytes())
print(json.dumps([ids, h.hexdigest()]))
"""

REPORT = "a shuffle window of"


def epoch_in_child(path, **kw):
    """(ids, digest, stderr) of one epoch read by a Loader in a child process."""
    p = subprocess.run([sys.executable, "-c", CHILD, path, json.dumps(kw)], capture_output=True,
                       text=True, timeout=40)
    if p.returncode != 0:
        raise AssertionError(f"the child failed ({p.returncode}): {p.stderr[-2000:]}")
    ids, digest = json.loads(p.stdout)
    return ids, digest, p.stderr


def local_epoch(ds, **kw):
    ids, h = [], hashlib.sha256()
    with shardfeed.Loader(ds, batch_size=16, seed=3, output="numpy", **kw) as loader:
        for b in loader:
            ids += b.ids.tolist()
            h.update(b["img"].tobytes())
    return ids, h.hexdigest()


class Window(RemoteCase):
    def served_large(self):
        """~11 records of 4 KiB a shard, ~100 shards: a default window (16 blocks of 64)
        touches most of them."""
        src = os.path.join(self.root, "src")
        write_samples(src, 1100, shape=(1024,), seed=2)
        ds = os.path.join(self.root, "ds")
        run("pack", src, "-o", ds, "--shard-size", "48KiB", "--align", "64", "--quiet", check=0)
        www = os.path.join(self.root, "www")
        shutil.copytree(ds, os.path.join(www, "ds"))
        shards = sum(1 for f in os.listdir(ds) if f.startswith("shard-"))
        size = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds))
        return ds, www, shards, size

    @staticmethod
    def shard_gets(proxy, since):
        return sum(1 for m, p, _ in proxy.log[since:] if m == "GET" and "shard-" in p)

    def at_open(self, proxy, url):
        """The shard requests of an open alone (each shard's header and tail)."""
        before = len(proxy.log)
        with shardfeed.open(url, remote_mode="direct", cache_dir=self.cache("open")):
            pass
        return self.shard_gets(proxy, before)

    def downloads(self, proxy, path, at_open, **kw):
        """(ids, digest, stderr, shard downloads) of one epoch through the proxy into an
        empty cache, open's requests not counted."""
        before = len(proxy.log)
        ids, digest, err = epoch_in_child(path, **kw)
        return ids, digest, err, self.shard_gets(proxy, before) - at_open

    def test_a_window_past_the_limit_is_reported_and_the_window_it_proposes_fits(self):
        ds, www, shards, size = self.served_large()
        limit = size // 4
        self.assertGreater(shards, 60)
        with servers.Nginx(www) as ng, servers.FaultProxy(ng.url) as proxy:
            url = proxy.url + "/ds"
            at_open = self.at_open(proxy, url)
            ids, digest, err, _ = self.downloads(proxy, url, at_open, shuffle="block",
                                                 cache_dir=self.cache("a"), cache_limit=limit)
            self.assertEqual((ids, digest), local_epoch(ds, shuffle="block"),
                             "the report must not change the order")
            said = [ln for ln in err.splitlines() if REPORT in ln]
            self.assertEqual(len(said), 1, err)
            line = said[0]
            self.assertIn("a shuffle window of 1024 samples (blocks of 64)", line)
            self.assertIn(f"cache limit of {limit} bytes", line)
            window_bytes = int(re.search(r"shards, (\d+) bytes", line).group(1))
            self.assertGreater(window_bytes, limit)
            self.assertLessEqual(window_bytes, size)
            fit_limit = int(re.search(r"cache_limit of at least (\d+) bytes", line).group(1))
            self.assertGreater(fit_limit, window_bytes)
            fit = int(re.search(r"a window of at most (\d+) samples", line).group(1))
            self.assertGreaterEqual(fit, 64)
            self.assertLess(fit, 1024)
            self.assertEqual(fit % 64, 0)

            # The window it proposes: no report, each shard downloaded about once.
            ids, digest, err, gets = self.downloads(proxy, url, at_open, shuffle="block",
                                                    window=fit,
                                                    cache_dir=self.cache("b"), cache_limit=limit)
            self.assertEqual((ids, digest), local_epoch(ds, shuffle="block", window=fit))
            self.assertNotIn(REPORT, err)
            self.assertLessEqual(gets, 2 * shards,
                                 f"{gets} downloads of {shards} shards, window {fit}")
            # So does the limit it proposes, with the default window.
            _, _, err, gets = self.downloads(proxy, url, at_open, shuffle="block",
                                             cache_dir=self.cache("c"), cache_limit=fit_limit)
            self.assertNotIn(REPORT, err)
            self.assertLessEqual(gets, 2 * shards,
                                 f"{gets} downloads of {shards} shards, limit {fit_limit}")

    def test_no_shuffle_reads_each_shard_about_once_without_a_report(self):
        ds, www, shards, size = self.served_large()
        with servers.Nginx(www) as ng, servers.FaultProxy(ng.url) as proxy:
            url = proxy.url + "/ds"
            at_open = self.at_open(proxy, url)
            ids, digest, err, gets = self.downloads(proxy, url, at_open, shuffle="none",
                                                    cache_dir=self.cache("a"),
                                                    cache_limit=size // 4)
        self.assertEqual((ids, digest), local_epoch(ds, shuffle="none"))
        self.assertNotIn(REPORT, err)
        self.assertLessEqual(gets, shards + shards // 10 + 2,
                             f"{gets} downloads of {shards} shards")


if __name__ == "__main__":
    main()
