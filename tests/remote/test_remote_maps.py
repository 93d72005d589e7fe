"""Mode cache read through maps (issue 18; README "Remote datasets"): engine auto picks mmap for
small records from a URL's cache as for a local folder's warm ones, and a shard's map lasts only
while the reader pins the shard in the cache. Over a dataset 4x the cache limit, an epoch with
the mmap engine never keeps an evicted shard mapped (an unlinked file still mapped still takes
its disk space): the cache folder plus what the process holds of deleted cache files stays
within the limit, and the epoch's bytes are the local read's. About 5 s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import FolderPeak, RemoteCase, epoch_plain, main  # noqa: E402

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)


def deleted_mapped(cache):
    """{inode: bytes mapped} of the files under `cache` this process maps though they were
    unlinked (/proc/self/maps names them "PATH (deleted)")."""
    held = {}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6:
                continue
            path = parts[5].rstrip("\n")
            if path.startswith(cache + "/") and path.endswith(" (deleted)"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                held[int(parts[4])] = held.get(int(parts[4]), 0) + hi - lo
    return held


class Maps(RemoteCase):
    def read_within_the_limit(self, engine):
        ds, www, limit = self.served_over_limit()
        cache = self.cache()
        with servers.Nginx(www) as ng, FolderPeak(cache, held=deleted_mapped) as peak:
            with shardfeed.Loader(ng.url + "/ds", batch_size=32, shuffle="none", output="numpy",
                                  engine=engine, cache_dir=cache, cache_limit=limit) as loader:
                got = [(b.ids.tolist(), b["img"].tobytes()) for b in loader]
                ran = loader.stats()["engine"]
                # Read to the end, not closed: every map still held is counted once more.
                end = deleted_mapped(cache)
        self.assertEqual(ran, "mmap")
        self.assertGreater(peak.samples, 0, "the watcher saw nothing")
        self.assertEqual(end, {}, "evicted shards still mapped after the epoch")
        self.assertEqual(peak.held, 0, "an evicted shard was still mapped")
        self.assertLessEqual(peak.bytes, limit, f"cache held {peak.bytes} bytes, limit {limit}")
        self.assertEqual(got, epoch_plain(ds))

    def test_auto_maps_small_records_and_evicted_shards_are_not_kept_mapped(self):
        self.read_within_the_limit("auto")

    def test_mmap_engine_keeps_no_evicted_shard_mapped(self):
        self.read_within_the_limit("mmap")


if __name__ == "__main__":
    main()
