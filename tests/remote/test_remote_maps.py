"""Mode cache's files held only while pinned (issue 18; README "Remote datasets"): engine auto
picks mmap for small records from a URL's cache as for a local folder's warm ones, and a shard's
map and descriptor last only while the reader pins the shard in the cache. Over a dataset 4x the
cache limit, an epoch with either engine never keeps an evicted shard mapped or open (an unlinked
file still takes its disk space until then): the cache folder plus the deleted cache files the
process holds stays within the limit, and the epoch's bytes are the local read's. About 5 s."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import FolderPeak, RemoteCase, epoch_plain, main  # noqa: E402

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)


def deleted_held(cache):
    """{inode: bytes} of the files under `cache` this process maps or holds open though they
    were unlinked (/proc/self/maps and /proc/self/fd name them "PATH (deleted)")."""
    held = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (or the listing's own descriptor)
        if path.startswith(cache + "/") and path.endswith(" (deleted)"):
            held[st.st_ino] = max(held.get(st.st_ino, 0), st.st_size)
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6:
                continue
            path = parts[5].rstrip("\n")
            if path.startswith(cache + "/") and path.endswith(" (deleted)"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                ino = int(parts[4])
                held[ino] = max(held.get(ino, 0), hi - lo)
    return held


class HeldWhilePinned(RemoteCase):
    def read_within_the_limit(self, engine):
        ds, www, limit = self.served_over_limit()
        cache = self.cache()
        with servers.Nginx(www) as ng, FolderPeak(cache, held=deleted_held) as peak:
            with shardfeed.Loader(ng.url + "/ds", batch_size=32, shuffle="none", output="numpy",
                                  engine=engine, cache_dir=cache, cache_limit=limit) as loader:
                got = [(b.ids.tolist(), b["img"].tobytes()) for b in loader]
                ran = loader.stats()["engine"]
                # Read to the end, not closed: nothing evicted is still held. (The evictor
                # holds the file it unlinks for a moment: a sample may see that, a second
                # one later would not.)
                end = deleted_held(cache)
                for _ in range(20):
                    if not end:
                        break
                    time.sleep(0.05)
                    end = deleted_held(cache)
        self.assertEqual(ran, "mmap" if engine == "auto" else engine)
        self.assertGreater(peak.samples, 0, "the watcher saw nothing")
        self.assertEqual(end, {}, "evicted shards still mapped or open after the epoch")
        # The folder plus the evicted files held (an unlinked one counts from the moment it
        # leaves the folder, so the evictor's moment adds nothing).
        self.assertLessEqual(peak.bytes, limit, f"cache and held files took {peak.bytes} bytes "
                             f"(at most {peak.held} evicted files at once), limit {limit}")
        self.assertEqual(got, epoch_plain(ds))

    def test_auto_maps_small_records_and_holds_no_evicted_shard(self):
        self.read_within_the_limit("auto")

    def test_mmap_engine_holds_no_evicted_shard(self):
        self.read_within_the_limit("mmap")

    def test_pread_engine_holds_no_evicted_shard(self):
        self.read_within_the_limit("pread")

    def test_random_access_holds_no_evicted_shard(self):
        # shardfeed.open's values (and export's) are copies: the shard is pinned, and mapped,
        # only while each one is copied. They were read through maps kept until close: over a
        # dataset 4x the limit the folder plus the evicted shards still mapped took 4.2x it.
        ds, www, limit = self.served_over_limit()
        cache = self.cache()
        local = shardfeed.open(ds)
        with servers.Nginx(www) as ng, FolderPeak(cache, held=deleted_held) as peak:
            remote = shardfeed.open(ng.url + "/ds", cache_dir=cache, cache_limit=limit)
            try:
                self.assertEqual(len(remote), len(local))
                for i in range(len(local)):
                    self.assertEqual(remote[i]["img"].tobytes(), local[i]["img"].tobytes(), i)
                end = deleted_held(cache)
                for _ in range(20):
                    if not end:
                        break
                    time.sleep(0.05)
                    end = deleted_held(cache)
            finally:
                remote.close()
                local.close()
        self.assertEqual(end, {}, "evicted shards still mapped or open after the reads")
        self.assertLessEqual(peak.bytes, limit, f"cache and held files took {peak.bytes} bytes "
                             f"(at most {peak.held} evicted files at once), limit {limit}")


if __name__ == "__main__":
    main()
