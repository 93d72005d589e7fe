"""The cache's prefetcher downloads shards in the order the reader's epoch first touches them
(issue 18; README "Remote datasets"): over a dataset 4x the cache limit with a block shuffle whose runs are
whole shards,
the downloads during an epoch (GETs through the FaultProxy, no faults) are about the shards'
first touches (runs of the epoch's order in one shard), not shard order's prefetches evicting
what the epoch needs; the epoch equals the local one. Several downloads overlap, also under a
global shuffle, whose reads reach the planned shards out of order, and after a restore; each
rank's epochs equal the local rank's. Every test has a deadline;
the servers bind 127.0.0.1 only."""
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import FolderPeak, RemoteCase, epoch_plain, main  # noqa: E402

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)


def first_touches(ds, order):
    """How many times the sample order `order` enters a shard (runs in one shard)."""
    with shardfeed.open(ds) as d:
        starts = [s.first_sample for s in d.shards]
    shard_of = []
    for i, first in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(order)
        shard_of += [i] * (end - first)
    runs, last = 0, None
    for sid in order:
        runs += shard_of[sid] != last
        last = shard_of[sid]
    return runs, len(starts)


def batches(loader):
    """(ids, image bytes) of each batch `loader` yields."""
    return [(b.ids.tolist(), b["img"].tobytes()) for b in loader]


def two_epochs(loader):
    """batches() of epochs 0 and 1."""
    got = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        got += batches(loader)
    return got


def shard_count(ds):
    return sum(1 for f in os.listdir(ds) if f.startswith("shard-"))


def shard_gets(method, path):
    """A FaultProxy match: the downloads of shards (not the manifest's)."""
    return method == "GET" and "shard-" in path


def prefetch_threads():
    """The downloads the prefetcher runs at once at most: a 32nd of the soft RLIMIT_NOFILE,
    4 to 16 (lib/dataset/dataset_remote.c)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    soft = 1024 if soft == resource.RLIM_INFINITY else soft
    return min(16, max(4, soft // 32))


class Prefetch(RemoteCase):
    def test_downloads_follow_the_epochs_order_within_the_limit(self):
        ds, www = self.served(n=600, shard_size="20KiB")
        size = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds))
        limit = size // 4
        with servers.Nginx(www) as ng, servers.FaultProxy(ng.url) as proxy:
            loader = shardfeed.Loader(proxy.url + "/ds", batch_size=16, shuffle="block",
                                      block_size=25, window=25, seed=3, output="numpy",
                                      cache_dir=self.cache(), cache_limit=limit)
            try:
                at_open = proxy.requests
                got = batches(loader)
            finally:
                loader.close()
            downloads = sum(1 for m, p, _ in proxy.log[at_open:] if m == "GET"
                            and "shard-" in p)
        with shardfeed.Loader(ds, batch_size=16, shuffle="block", block_size=25, window=25,
                              seed=3, output="numpy") as local:
            want = batches(local)
        self.assertEqual(got, want)
        runs, shards = first_touches(ds, [i for ids, _ in got for i in ids])
        self.assertGreaterEqual(runs, shards)
        # Each run needs at most one download; a prefetch in the wrong order costs extra ones.
        self.assertGreater(downloads, 0)
        self.assertLessEqual(downloads, runs + runs // 10 + 2,
                             f"{downloads} downloads for {runs} first touches of {shards} shards")

    def test_several_downloads_overlap_and_the_folder_stays_within_the_limit(self):
        ds, www = self.served(n=600, shard_size="20KiB")
        size = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds))
        limit = size // 2  # the prefetcher's reach, half the limit, holds several shards
        cache = self.cache()
        # Every shard request waits 0.2 s at the proxy: downloads one after another would
        # never be in flight together.
        with servers.Nginx(www) as ng, servers.FaultProxy(ng.url, faults={"delay": 1.0},
                                                          delay_s=0.2, match=shard_gets) as proxy:
            with shardfeed.Loader(proxy.url + "/ds", batch_size=32, shuffle="none",
                                  output="numpy", cache_dir=cache, cache_limit=limit) as loader:
                proxy.count_from_now()  # open fetched metadata 16 at a time
                with FolderPeak(cache) as peak:
                    got = batches(loader)
        self.assertEqual(got, epoch_plain(ds))
        # The reader's own downloads and one prefetch overlap at most 3 ways without several
        # prefetch threads.
        self.assertGreaterEqual(proxy.max_in_flight, 4,
                                "the shards' downloads did not overlap 4 at a time")
        self.assertGreater(peak.bytes, 0, "the watcher saw nothing")
        self.assertLessEqual(peak.bytes, limit, f"cache held {peak.bytes} bytes, limit {limit}")

    def test_a_global_shuffle_keeps_every_planned_shard_in_the_plan(self):
        # Under a global shuffle the I/O threads reach a batch's shards in any order (each
        # takes its own part of the batch). Reaching one planned late once dropped every shard
        # planned before it, untaken, from the plan: the prefetcher then had little left to
        # download, and the I/O threads fetched the rest as they came to them, one or two in
        # flight (the second half of this epoch's 49 downloads began with 1 or 2 in flight,
        # three runs; with the prefetcher busy, mostly 4 or 5). Each shard GET waits 0.2 s
        # at the proxy, so downloads overlap only if they are started together.
        ds, www = self.served(n=1200, shard_size="20KiB")
        shards = shard_count(ds)
        self.assertGreaterEqual(shards, 40)
        arrivals = []  # (request number, shard GETs in flight with it) of each shard GET

        class Counting(servers.FaultProxy):
            def _decide(self, method, raw_path, headers, body):
                r = super()._decide(method, raw_path, headers, body)
                if shard_gets(method, raw_path):
                    with self._lock:
                        arrivals.append((self.requests, self.in_flight))
                return r

        with servers.Nginx(www) as ng, Counting(ng.url, faults={"delay": 1.0}, delay_s=0.2,
                                                 match=shard_gets) as proxy:
            # Batches of 200 touch most shards; two I/O threads, each with its part.
            with shardfeed.Loader(proxy.url + "/ds", batch_size=200, shuffle="global", seed=5,
                                  io_threads=2, output="numpy", cache_dir=self.cache()) as loader:
                at_open = proxy.requests
                got = batches(loader)
        with shardfeed.Loader(ds, batch_size=200, shuffle="global", seed=5, output="numpy") as local:
            self.assertEqual(got, batches(local))
        downloads = [flight for n, flight in arrivals if n > at_open]
        self.assertEqual(len(downloads), shards, "each shard downloaded once")
        second_half = sorted(downloads[len(downloads) // 2:])
        self.assertGreaterEqual(second_half[len(second_half) // 2], 3,
                                f"shard downloads in flight as each began: {downloads}")

    def test_a_global_shuffles_first_batch_downloads_its_shards_together(self):
        # A global shuffle's first batch needs every shard, and an object store serves each
        # connection at a rate of its own: the downloads must run together. Four at a time
        # (the prefetcher's 4 threads before 2026-12-04) took a cold epoch of 13 shards from
        # nginx limited to 20 MiB/s a connection 0.65 s, where curl fetching them all at once
        # took 0.23 s. Each shard GET waits 0.5 s at the proxy here, so downloads overlap
        # only if they are started together.
        ds, www = self.served(n=360, shard_size="20KiB")
        shards = shard_count(ds)
        self.assertGreaterEqual(shards, 10)
        self.assertLessEqual(shards, 16)
        # The prefetcher runs a 32nd of the soft RLIMIT_NOFILE downloads at once, 4 to 16
        # (an unlimited limit counts as 1,024); the 2 I/O threads add their own.
        threads = prefetch_threads()
        with servers.Nginx(www) as ng, servers.FaultProxy(ng.url, faults={"delay": 1.0},
                                                          delay_s=0.5, match=shard_gets) as proxy:
            with shardfeed.Loader(proxy.url + "/ds", batch_size=120, shuffle="global", seed=2,
                                  io_threads=2, output="numpy", cache_dir=self.cache()) as loader:
                proxy.count_from_now()  # open fetched metadata 16 at a time
                got = batches(loader)
        with shardfeed.Loader(ds, batch_size=120, shuffle="global", seed=2, output="numpy") as local:
            self.assertEqual(got, batches(local))
        self.assertGreaterEqual(proxy.max_in_flight, min(shards, threads),
                                f"{shards} shards, {threads} prefetch threads")

    def test_in_dataset_order_the_shards_ahead_download_together(self):
        # The prefetcher downloads what the reader's schedule plans, which runs 4 batches
        # ahead: in dataset order (or a block shuffle) those touch one or two shards when a
        # shard holds more samples than 4 batches. It then downloaded one shard at a time:
        # from nginx serving each connection at 20 MiB/s a cold epoch of 13 shards of 94 MB
        # took 15.6 s in dataset order, 5.4 s under a global shuffle. The plan now reaches
        # about the prefetcher's reach of shards further. Each shard GET waits 0.3 s at the
        # proxy, so downloads overlap only if they are started together.
        ds, www = self.served(n=600, shard_size="40KiB")  # about 50 samples a shard
        shards = shard_count(ds)
        self.assertGreaterEqual(shards, 10)
        threads = prefetch_threads()
        for shuffle in ("none", "block"):
            with self.subTest(shuffle=shuffle):
                opts = dict(batch_size=4, shuffle=shuffle, seed=1, output="numpy")
                with servers.Nginx(www) as ng, servers.FaultProxy(
                        ng.url, faults={"delay": 1.0}, delay_s=0.3, match=shard_gets) as proxy:
                    with shardfeed.Loader(proxy.url + "/ds", cache_dir=self.cache(), **opts) as loader:
                        proxy.count_from_now()  # open fetched metadata 16 at a time
                        got = batches(loader)
                with shardfeed.Loader(ds, **opts) as local:
                    self.assertEqual(got, batches(local))
                # The first shard is the reader's own download; the prefetcher takes the
                # others as the plan names them.
                self.assertGreaterEqual(proxy.max_in_flight, min(shards - 2, threads),
                                        f"{shards} shards, {threads} prefetch threads")

    def test_each_ranks_epoch_is_the_local_ranks(self):
        # A rank's consecutive batches are batch_size x world_size positions apart: the plan
        # walks the rank's own batches. Each rank reads through the same cache folder, as the
        # processes of one node do; an uneven split pads the last batch. The limit is under
        # a shuffle window's shards: the report of that on stderr is expected.
        ds, www = self.served(n=600, shard_size="40KiB")
        with servers.Nginx(www) as ng:
            for shuffle in ("none", "block", "global"):
                for rank in range(3):
                    with self.subTest(shuffle=shuffle, rank=rank):
                        opts = dict(batch_size=4, shuffle=shuffle, seed=3, world_size=3, rank=rank,
                                    output="numpy")
                        with shardfeed.Loader(ng.url + "/ds", cache_dir=self.cache(),
                                              cache_limit=300 << 10, **opts) as loader:
                            got = two_epochs(loader)
                        with shardfeed.Loader(ds, **opts) as local:
                            self.assertEqual(got, two_epochs(local))

    def test_a_restore_forward_plans_again_from_there(self):
        # The plan's shards leave it as they are read. Those planned for the batches a
        # restore left behind were never read, so they stayed, filled the prefetcher's
        # reach (16 shards taken) and the prefetcher stopped: from the restored position on,
        # each shard was the reader's own download, one at a time. A restore drops the plan.
        ds, www = self.served(n=2000, shard_size="40KiB")  # about 50 samples a shard
        shards = shard_count(ds)
        self.assertGreaterEqual(shards, 36)
        threads = prefetch_threads()
        opts = dict(batch_size=4, shuffle="none", output="numpy")
        with shardfeed.Loader(ds, **opts) as local:
            want = batches(local)
        skip = len(want) // 2
        with servers.Nginx(www) as ng, servers.FaultProxy(
                ng.url, faults={"delay": 1.0}, delay_s=0.3, match=shard_gets) as proxy:
            with shardfeed.Loader(proxy.url + "/ds", cache_dir=self.cache(), **opts) as loader:
                it = iter(loader)
                self.assertEqual(batches((next(it), next(it))), want[:2])
                del it
                # The downloads the first position planned end; then the restore.
                deadline = time.monotonic() + 30
                while proxy.in_flight and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertEqual(proxy.in_flight, 0, "the first downloads did not end in 30 s")
                state = loader.state_dict()
                state["next_batch"] = skip
                loader.load_state_dict(state)
                proxy.count_from_now()
                got = batches(loader)
        self.assertEqual(got, want[skip:])
        left = shards - shards // 2
        self.assertGreaterEqual(proxy.max_in_flight, min(left - 2, threads) - 2,
                                f"{left} shards after the restore, {threads} prefetch threads")


if __name__ == "__main__":
    main()
