"""Mode cache's background publish (README "Remote datasets"; lib/remote/cache.c): a process
reads a shard it downloaded from the checked .part file at once, while the fsync and the rename
into the final name run on a thread. Through the cache's test hooks (compiled into builds with
the tests): SHARDFEED_TEST_PUBLISH_HOLD holds every publish until a file exists,
SHARDFEED_TEST_PUBLISH_FAIL=1 fails them as a failed fsync would. Checked: the epoch's bytes
while nothing is published yet, nothing under a final name until its publish, every publish
finished by close, a failed publish leaving no final name and no .part, a process killed during
the publish leaving no final name (the next reader gets the right bytes)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import RemoteCase, epoch, main  # noqa: E402

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)


def cache_files(cache):
    """(names under a final name, .part names) in the cache folder."""
    files = [f for _, _, fs in os.walk(cache) for f in fs]
    return (sorted(f for f in files if f.startswith("shard-")),
            sorted(f for f in files if f.startswith(".part-")))


class Env:
    """`with Env(NAME=value):` sets environment variables for the block."""

    def __init__(self, **kw):
        self.kw = kw

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.kw}
        os.environ.update(self.kw)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def one_epoch(loader):
    return [(b.ids.tolist(), b["img"].tobytes(), b["label"].tobytes()) for b in loader]


class BackgroundPublish(RemoteCase):
    def test_an_epoch_reads_shards_whose_publish_has_not_finished(self):
        ds, www = self.served(n=240, shard_size="24KiB")
        shards = sorted(f for f in os.listdir(ds) if f.startswith("shard-"))
        want = epoch(ds)
        cache, gate = self.cache(), os.path.join(self.root, "gate")
        with servers.Nginx(www) as ng, Env(SHARDFEED_TEST_PUBLISH_HOLD=gate):
            loader = shardfeed.Loader(ng.url + "/ds", batch_size=32, shuffle="global", seed=5,
                                      output="numpy", cache_dir=cache)
            try:
                self.assertEqual(one_epoch(loader), want)
                finals, parts = cache_files(cache)
                self.assertEqual(finals, [], "under a final name before its publish")
                self.assertEqual(len(parts), len(shards), parts)
            finally:
                open(gate, "w").close()
                loader.close()  # finishes every publish
        finals, parts = cache_files(cache)
        self.assertEqual((finals, parts), (shards, []))
        for f in shards:
            path = next(os.path.join(d, f) for d, _, fs in os.walk(cache) if f in fs)
            with open(path, "rb") as a, open(os.path.join(ds, f), "rb") as b:
                self.assertEqual(a.read(), b.read(), f)

    def test_a_failed_publish_leaves_no_final_name_and_the_epochs_their_bytes(self):
        ds, www = self.served(n=240, shard_size="24KiB")
        want = [epoch(ds)]
        with shardfeed.Loader(ds, batch_size=32, shuffle="global", seed=5,
                              output="numpy") as loader:
            loader.set_epoch(1)
            want.append(one_epoch(loader))
        cache = self.cache()
        with servers.Nginx(www) as ng, Env(SHARDFEED_TEST_PUBLISH_FAIL="1"):
            with shardfeed.Loader(ng.url + "/ds", batch_size=32, shuffle="global", seed=5,
                                  output="numpy", cache_dir=cache) as loader:
                got = [one_epoch(loader)]
                # The shards are fetched again as needed: their publishes failed.
                loader.set_epoch(1)
                got.append(one_epoch(loader))
        self.assertEqual(got, want)
        self.assertEqual(cache_files(cache), ([], []))

    def test_a_process_killed_during_the_publish_leaves_no_final_name(self):
        ds, www = self.served(n=240, shard_size="24KiB")
        cache, gate = self.cache(), os.path.join(self.root, "gate")  # the gate never opens
        code = ("import shardfeed, sys\n"
                "L = shardfeed.Loader(sys.argv[1], batch_size=32, output='numpy',\n"
                "                     cache_dir=sys.argv[2])\n"
                "n = sum(len(b.ids) for b in L)\n"
                "print(n, flush=True)\n"
                "sys.stdin.read()\n")
        with servers.Nginx(www) as ng:
            env = dict(os.environ, SHARDFEED_TEST_PUBLISH_HOLD=gate)
            p = subprocess.Popen([sys.executable, "-c", code, ng.url + "/ds", cache], env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(p.stdout.readline().strip(), "240")  # the epoch was read
                finals, parts = cache_files(cache)
                self.assertTrue(parts, "no download seen")
                p.kill()
            finally:
                p.kill()
                p.wait(10)
                p.stdin.close()
                p.stdout.close()
            self.assertEqual(cache_files(cache)[0], [], "a final name before its publish")
            # The next reader: the dead downloads go (make room removes them), right bytes.
            self.assertEqual(epoch(ng.url + "/ds", cache_dir=cache), epoch(ds))
        finals, parts = cache_files(cache)
        self.assertTrue(finals)
        self.assertEqual([f for f in parts if f"-{p.pid}-" in f], [], "a dead download is left")


if __name__ == "__main__":
    main()
