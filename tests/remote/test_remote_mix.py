"""A mix of datasets at URLs (issue 18): Loader([url_a, url_b], weights=...) passes remote_mode,
cache_dir and cache_limit to every dataset, its epoch equal to the mix of the local folders in
both modes; in mode cache the shards land in cache_dir, in mode direct nothing does. Every test
has a deadline; the servers bind 127.0.0.1 only."""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import RemoteCase, folder_bytes, main, pack_dataset  # noqa: E402

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)


def mixed_epoch(paths, **kw):
    with shardfeed.Loader(paths, batch_size=16, weights=[2, 1], shuffle="global", seed=4,
                          output="numpy", **kw) as loader:
        return [b["img"].tobytes() + b["label"].tobytes() for b in loader]


class RemoteMix(RemoteCase):
    def test_remote_options_reach_every_dataset_of_a_mix(self):
        www = os.path.join(self.root, "www")
        local = []
        for name, seed in (("a", 1), ("b", 2)):
            ds = pack_dataset(os.path.join(self.root, name), n=160, shard_size="16KiB", seed=seed)
            shutil.copytree(ds, os.path.join(www, name))
            local.append(ds)
        want = mixed_epoch(local)
        with servers.Nginx(www) as ng:
            urls = [ng.url + "/a", ng.url + "/b"]
            for mode in ("cache", "direct"):
                with self.subTest(mode=mode):
                    cache = self.cache(mode)
                    limit = 1 << 20
                    with shardfeed.Loader(urls, batch_size=16, weights=[2, 1], output="numpy",
                                          remote_mode=mode, cache_dir=cache,
                                          cache_limit=limit) as mix:
                        for child in mix._children:
                            self.assertEqual(child._remote_names(),
                                             {"remote_mode": mode, "cache_dir": cache,
                                              "cache_limit": limit})
                    self.assertEqual(mixed_epoch(urls, remote_mode=mode, cache_dir=cache,
                                                 cache_limit=limit), want)
                    shards = [f for _, _, fs in os.walk(cache) for f in fs
                              if f.startswith("shard-")]
                    if mode == "cache":
                        self.assertTrue(shards, "nothing in the cache folder")
                        self.assertLessEqual(folder_bytes(cache), limit)
                    else:
                        self.assertEqual(shards, [])


if __name__ == "__main__":
    main()
