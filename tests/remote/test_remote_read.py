"""Reading datasets from URLs (issue 18; README "Remote datasets"), end to end against the local
servers of servers.py on 127.0.0.1: pack -> upload to s3rver (or serve with nginx) -> verify URL
-> Loader(URL) epoch equal to the local epoch (same order, same bytes) in both read modes; a byte
damaged at the store caught; the cache never above its limit, a process killed mid-download
leaving nothing under a final name, two processes sharing a cache. Faults: test_remote_faults.py.
Every test has a deadline; the servers bind 127.0.0.1 only."""
import hashlib
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import (FolderPeak, RemoteCase, dataset_files, epoch, epoch_plain,  # noqa: E402
                      main, pack_dataset, run, write_samples)

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)


class S3RoundTrip(RemoteCase):
    def test_pack_upload_verify_and_read_in_both_modes(self):
        ds = pack_dataset(self.root, n=200, shard_size="16KiB")
        with servers.S3Server(os.path.join(self.root, "s3")) as s3:
            s3.create_bucket("bkt")
            for name in dataset_files(ds):
                with open(os.path.join(ds, name), "rb") as f:
                    status, _, body = s3.request("PUT", f"/bkt/train/{name}", f.read())
                self.assertEqual(status, 200, body[:300])
            env = dict(os.environ, **s3.env(), SHARDFEED_CACHE_DIR=self.cache("cli-cache"))
            r = run("verify", "s3://bkt/train", env=env)
            self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
            self.assertIn("verified", r.stdout)
            saved = {k: os.environ.get(k) for k in s3.env()}
            os.environ.update(s3.env())
            try:
                want = epoch(ds)
                self.assertEqual(epoch("s3://bkt/train", cache_dir=self.cache()), want)
                self.assertEqual(epoch("s3://bkt/train", remote_mode="direct",
                                       cache_dir=self.cache()), want)
                with shardfeed.open("s3://bkt/train", cache_dir=self.cache()) as d:
                    self.assertEqual(len(d), 200)
                    local = shardfeed.open(ds)
                    for i in (0, 117, 199):
                        self.assertEqual(d[i]["img"].tobytes(), local[i]["img"].tobytes())
                    local.close()
                # Wrong credentials: the store's refusal, named, after no retry storm.
                os.environ["AWS_SECRET_ACCESS_KEY"] = "wrong"
                with self.assertRaises(shardfeed.Error) as e:
                    shardfeed.open("s3://bkt/train", cache_dir=self.cache())
                self.assertIn("s3://bkt/train/manifest.sfm", str(e.exception))
                self.assertIn("HTTP 403", str(e.exception))
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v


class NginxRoundTrip(RemoteCase):
    def test_verify_inspect_and_read_in_both_modes(self):
        ds, www = self.served()
        with servers.Nginx(www) as ng:
            url = ng.url + "/ds"
            env = dict(os.environ, SHARDFEED_CACHE_DIR=self.cache("cli-cache"))
            r = run("verify", url, env=env)
            self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
            r = run("inspect", url, "--cache-dir", self.cache("cli-cache"), env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("240 in", r.stdout)
            want = epoch(ds)
            self.assertEqual(epoch(url, cache_dir=self.cache()), want)
            self.assertEqual(epoch(url, remote_mode="direct", cache_dir=self.cache()), want)
            # A second epoch in cache mode reads the cache: same bytes again.
            self.assertEqual(epoch(url, cache_dir=self.cache()), want)

    def test_a_missing_dataset_is_named(self):
        www = os.path.join(self.root, "www")
        os.makedirs(www)
        with servers.Nginx(www) as ng:
            with self.assertRaises(shardfeed.Error) as e:
                shardfeed.Loader(ng.url + "/nothing", batch_size=4, output="numpy",
                                 cache_dir=self.cache())
            self.assertIn("/nothing/manifest.sfm: no manifest", str(e.exception))

    def test_a_damaged_shard_header_is_named_though_metadata_loads_in_parallel(self):
        _, www = self.served(n=240, shard_size="8KiB")
        for k in (3, 7):  # two damaged: the first is the one named, whichever loads first
            with open(os.path.join(www, "ds", f"shard-{k:06d}.sfs"), "r+b") as f:
                f.seek(40)
                b = f.read(1)
                f.seek(40)
                f.write(bytes([b[0] ^ 1]))
        with servers.Nginx(www) as ng:
            for _ in range(3):
                with self.assertRaises(shardfeed.Error) as e:
                    shardfeed.open(ng.url + "/ds", cache_dir=self.cache())
                self.assertIn("/ds/shard-000003.sfs (byte 0)", str(e.exception))
            r = run("verify", ng.url + "/ds", "--cache-dir", self.cache())
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("shard-000003.sfs", r.stdout)

    def test_a_byte_damaged_at_the_store_is_caught_in_both_modes(self):
        ds, www = self.served()
        shard = os.path.join(www, "ds", "shard-000001.sfs")
        with open(shard, "r+b") as f:  # inside the first record's payload (records from byte 128)
            f.seek(200)
            b = f.read(1)
            f.seek(200)
            f.write(bytes([b[0] ^ 0x10]))
        with servers.Nginx(www) as ng:
            url = ng.url + "/ds"
            for mode in ("cache", "direct"):
                with self.assertRaises(shardfeed.Error) as e:
                    epoch(url, remote_mode=mode, cache_dir=self.cache())
                self.assertIn("checksum", str(e.exception), mode)
                # on_corrupt="skip": that sample substituted, every other byte the local one.
                with shardfeed.Loader(url, batch_size=32, shuffle="none", output="numpy",
                                      on_corrupt="skip", remote_mode=mode,
                                      cache_dir=self.cache()) as loader:
                    got = [(b.source_ids.tolist(), b["img"].tobytes()) for b in loader]
                    self.assertEqual(loader.stats()["corrupt_substitutions"], 1, mode)
                local = shardfeed.open(ds)
                for ids, img in got:
                    want = b"".join(local[i]["img"].tobytes() for i in ids)
                    self.assertEqual(img, want, mode)
                local.close()


class Cache(RemoteCase):
    def test_an_epoch_over_4x_the_limit_never_exceeds_it(self):
        ds, www, limit = self.served_over_limit()
        cache = self.cache()
        with servers.Nginx(www) as ng, FolderPeak(cache) as peak:
            with shardfeed.Loader(ng.url + "/ds", batch_size=32, shuffle="none",
                                  output="numpy", cache_dir=cache, cache_limit=limit) as loader:
                got = [(b.ids.tolist(), b["img"].tobytes()) for b in loader]
        self.assertGreater(peak.bytes, 0, "the watcher saw nothing")
        self.assertLessEqual(peak.bytes, limit, f"cache held {peak.bytes} bytes, limit {limit}")
        local = epoch_plain(ds)
        self.assertEqual(got, local)

    def test_the_limit_from_the_environment_takes_units_and_refuses_the_rest(self):
        # $SHARDFEED_CACHE_LIMIT read "2MiB" or "1e5" as unset (the 16 GiB default) and "-1"
        # as 2^64 - 1, without a word: the cache grew past what its user sized it to.
        ds, www, limit = self.served_over_limit()
        kib = limit // 1024
        cache = self.cache()
        old = os.environ.get("SHARDFEED_CACHE_LIMIT")
        try:
            with servers.Nginx(www) as ng:
                for bad in ("1e5", "-1", "2MB", "12 KiB", "0"):
                    os.environ["SHARDFEED_CACHE_LIMIT"] = bad
                    with self.assertRaises(shardfeed.Error) as e:
                        shardfeed.Loader(ng.url + "/ds", batch_size=32, cache_dir=cache)
                    self.assertIn(f"$SHARDFEED_CACHE_LIMIT='{bad}'", str(e.exception))
                os.environ["SHARDFEED_CACHE_LIMIT"] = f"{kib}KiB"
                with FolderPeak(cache) as peak:
                    with shardfeed.Loader(ng.url + "/ds", batch_size=32, shuffle="none",
                                          output="numpy", cache_dir=cache) as loader:
                        got = [(b.ids.tolist(), b["img"].tobytes()) for b in loader]
        finally:
            if old is None:
                os.environ.pop("SHARDFEED_CACHE_LIMIT", None)
            else:
                os.environ["SHARDFEED_CACHE_LIMIT"] = old
        self.assertGreater(peak.bytes, 0, "the watcher saw nothing")
        self.assertLessEqual(peak.bytes, kib * 1024)
        self.assertEqual(got, epoch_plain(ds))

    def test_a_dataset_packed_again_at_the_same_url_is_not_read_from_the_old_shards(self):
        """The same keys and sizes, other values: the same dataset_id (SPEC.md: it comes from
        keys, sizes, schema and options), so a cache named by it served the old shards."""
        old = pack_dataset(os.path.join(self.root, "v1"), n=64, shard_size="4KiB", seed=1)
        new = pack_dataset(os.path.join(self.root, "v2"), n=64, shard_size="4KiB", seed=2)

        def dataset_id(ds):  # SPEC.md "Manifest": offset 48
            with open(os.path.join(ds, "manifest.sfm"), "rb") as f:
                return f.read(56)[48:]
        self.assertEqual(dataset_id(old), dataset_id(new))
        want_old, want_new = epoch(old), epoch(new)
        self.assertNotEqual(want_old, want_new)
        www, cache = os.path.join(self.root, "www"), self.cache()
        shutil.copytree(old, os.path.join(www, "ds"))
        with servers.Nginx(www) as ng:
            url = ng.url + "/ds"
            self.assertEqual(epoch(url, cache_dir=cache), want_old)
            for f in dataset_files(new):  # shards first, the manifest last, as push does
                shutil.copyfile(os.path.join(new, f), os.path.join(www, "ds", f))
            self.assertEqual(epoch(url, cache_dir=cache), want_new)
            with shardfeed.open(url, cache_dir=cache) as ds:
                self.assertEqual(ds[5]["img"].tobytes(), shardfeed.open(new)[5]["img"].tobytes())
            run("verify", url, "--cache-dir", cache, check=0)

    def test_a_large_shard_is_downloaded_in_parts_at_once_whole(self):
        src, ds = os.path.join(self.root, "src"), os.path.join(self.root, "ds")
        write_samples(src, 300, shape=(64, 64, 4))  # 64 KiB a sample: one shard of 19 MiB
        run("pack", src, "-o", ds, "--shard-size", "64MiB", "--quiet", check=0)
        shards = [f for f in os.listdir(ds) if f.startswith("shard-")]
        self.assertEqual(len(shards), 1)
        self.assertGreater(os.path.getsize(os.path.join(ds, shards[0])), 16 << 20)
        www = os.path.join(self.root, "www")
        shutil.copytree(ds, os.path.join(www, "ds"))
        cache = self.cache()
        # Every shard request waits 0.2 s at the proxy, so parts fetched at once overlap there.
        shard_gets = lambda method, path: method == "GET" and "shard-" in path  # noqa: E731
        with servers.Nginx(www) as ng, servers.FaultProxy(ng.url, faults={"delay": 1.0},
                                                          delay_s=0.2, match=shard_gets) as proxy:
            with shardfeed.Loader(proxy.url + "/ds", batch_size=32, shuffle="none",
                                  output="numpy", cache_dir=cache) as loader:
                proxy.count_from_now()  # from here: the shard's download
                got = [(b.ids.tolist(), b["img"].tobytes()) for b in loader]
        self.assertGreaterEqual(proxy.max_in_flight, 2, "the shard came in one request")
        self.assertEqual(got, epoch_plain(ds))
        cached = [os.path.join(d, f) for d, _, files in os.walk(cache) for f in files
                  if f == shards[0]]
        self.assertEqual(len(cached), 1)
        with open(cached[0], "rb") as a, open(os.path.join(ds, shards[0]), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_a_process_killed_mid_download_leaves_nothing_under_a_final_name(self):
        ds, www = self.served(n=200, shard_size="200KiB")
        cache = self.cache()
        with servers.Nginx(www) as ng:
            # Every response delayed: the download of the shard is under way for a while.
            with servers.FaultProxy(ng.url, faults={"delay": 1.0}, delay_s=0.5) as proxy:
                code = ("import shardfeed, sys\n"
                        "L = shardfeed.Loader(sys.argv[1], batch_size=8, output='numpy',\n"
                        "                     cache_dir=sys.argv[2])\n"
                        "for b in L: pass\n")
                p = subprocess.Popen([sys.executable, "-c", code, proxy.url + "/ds", cache])
                try:
                    part = None
                    end = time.monotonic() + 20
                    while part is None and time.monotonic() < end and p.poll() is None:
                        for d, _, files in os.walk(cache):
                            part = next((f for f in files if f.startswith(".part-")), part)
                        time.sleep(0.01)
                    self.assertIsNotNone(part, "no download seen")
                    p.kill()
                finally:
                    p.kill()
                    p.wait(10)
        finals = [(d, f) for d, _, files in os.walk(cache) for f in files
                  if f.startswith("shard-")]
        for d, f in finals:  # anything under a final name is whole and the same as the source
            with open(os.path.join(d, f), "rb") as a, open(os.path.join(ds, f), "rb") as b:
                self.assertEqual(a.read(), b.read(), f)
        # The next reader over the same cache gets the right bytes.
        with servers.Nginx(www) as ng:
            self.assertEqual(epoch(ng.url + "/ds", cache_dir=cache), epoch(ds))

    def test_two_processes_sharing_a_cache_get_the_right_bytes(self):
        ds, www = self.served(n=400, shard_size="20KiB")
        size = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds))
        code = ("import hashlib, shardfeed, sys\n"
                "h = hashlib.sha256()\n"
                "L = shardfeed.Loader(sys.argv[1], batch_size=16, shuffle='global', seed=3,\n"
                "                     output='numpy', cache_dir=sys.argv[2],\n"
                "                     cache_limit=int(sys.argv[3]))\n"
                "for e in range(2):\n"
                "    L.set_epoch(e)\n"
                "    for b in L:\n"
                "        h.update(b.ids.tobytes()); h.update(b['img'].tobytes())\n"
                "print(h.hexdigest())\n")
        want = hashlib.sha256()
        with shardfeed.Loader(ds, batch_size=16, shuffle="global", seed=3,
                              output="numpy") as L:
            for e in range(2):
                L.set_epoch(e)
                for b in L:
                    want.update(b.ids.tobytes())
                    want.update(b["img"].tobytes())
        with servers.Nginx(www) as ng:
            env = dict(os.environ)
            procs = [subprocess.Popen([sys.executable, "-c", code, ng.url + "/ds", self.cache(),
                                       str(size // 2)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env)
                     for _ in range(2)]
            outs = [p.communicate(timeout=40) for p in procs]
        for p, (out, err) in zip(procs, outs):
            self.assertEqual(p.returncode, 0, err)
            self.assertEqual(out.strip(), want.hexdigest())

    def test_a_dataset_at_a_url_is_refused_in_a_forked_child(self):
        # A DataLoader worker forked from a process holding shardfeed.open(URL) inherited the
        # prefetcher's state without its threads: its downloads were never published (others
        # waited 120 s for them), and close() in the child segfaulted joining the parent's
        # threads. The child is refused with the way out; a local dataset stays usable there.
        ds, www = self.served(n=200, shard_size="16KiB")
        code = ("import os, sys, shardfeed\n"
                "d = shardfeed.open(sys.argv[1], cache_dir=sys.argv[2])\n"
                "local = shardfeed.open(sys.argv[3])\n"
                "first = d[0]['img'].tobytes()\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    code = 0\n"
                "    try:\n"
                "        d[150]\n"
                "        code = 3\n"
                "    except RuntimeError as e:\n"
                "        print('child:', e, flush=True)\n"
                "    if local[150]['img'].tobytes() != local[150]['img'].tobytes():\n"
                "        code = 4\n"
                "    d.close()\n"
                "    os._exit(code)\n"
                "_, status = os.waitpid(pid, 0)\n"
                "print('child exit', os.waitstatus_to_exitcode(status), flush=True)\n"
                "assert d[150]['img'].tobytes() == local[150]['img'].tobytes()\n"
                "assert d[0]['img'].tobytes() == first\n"
                "d.close()\n"
                "print('parent ok')\n")
        with servers.Nginx(www) as ng:
            r = subprocess.run([sys.executable, "-c", code, ng.url + "/ds", self.cache(), ds],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("child: shardfeed: this dataset at a URL was opened in another process",
                      r.stdout)
        self.assertIn("child exit 0", r.stdout)
        self.assertIn("parent ok", r.stdout)

    def test_a_damaged_cached_copy_is_named_removed_and_downloaded_again(self):
        # A cached copy damaged after its download (cut short, a flipped byte) was trusted as
        # the store's: reads failed with an I/O error or a checksum mismatch naming only the URL,
        # every run again, and nothing named the file to remove.
        ds, www = self.served(n=200, shard_size="16KiB")
        cache = self.cache()
        with servers.Nginx(www) as ng:
            url = ng.url + "/ds"
            want = epoch(url, cache_dir=cache)
            name = "shard-000001.sfs"
            copy = [os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs if f == name]
            self.assertEqual(len(copy), 1, copy)
            copy = copy[0]
            size = os.path.getsize(copy)
            os.truncate(copy, 1000)  # cut short: found at open, removed, downloaded again
            self.assertEqual(epoch(url, cache_dir=cache), want)
            self.assertEqual(os.path.getsize(copy), size)
            # the shard's first record (at the first multiple of align past the 128-byte
            # header) damaged: the bytes from the header's end to 16 past that start flipped
            end = -(-128 // shardfeed.open(ds).align) * shardfeed.open(ds).align + 16
            with open(copy, "r+b") as f:
                f.seek(128)
                b = f.read(end - 128)
                f.seek(128)
                f.write(bytes(x ^ 0xFF for x in b))
            with self.assertRaises(shardfeed.Error) as e:
                epoch(url, cache_dir=cache)
            self.assertIn(f"{url}/{name}: record 0", str(e.exception))
            self.assertIn(f"(read from the cache's copy {copy}, now removed", str(e.exception))
            self.assertFalse(os.path.exists(copy))
            self.assertEqual(epoch(url, cache_dir=cache), want)
            os.remove(copy)
            os.mkdir(copy)  # not a file: named, never read
            with self.assertRaises(shardfeed.Error) as e:
                epoch(url, cache_dir=cache)
            self.assertIn(f"{copy} is not a file", str(e.exception))
            os.rmdir(copy)
            os.mkfifo(copy)  # its open waited for a writer, for ever
            with self.assertRaises(shardfeed.Error) as e:
                epoch(url, cache_dir=cache)
            self.assertIn(f"{copy} is not a file", str(e.exception))
            os.remove(copy)
            os.symlink(os.path.join(ds, name), copy)  # a link: never followed
            with self.assertRaises(shardfeed.Error) as e:
                epoch(url, cache_dir=cache)
            self.assertIn(f"{copy} is a symbolic link, not a file", str(e.exception))
            os.remove(copy)
            self.assertEqual(epoch(url, cache_dir=cache), want)

    def test_an_idle_reader_does_not_hold_the_room_another_needs(self):
        # A reader keeps its last shards pinned between reads (no unpin and repin per record),
        # but at most an eighth of the cache limit: with a limit of about 4 shards, one that has
        # read an epoch and stopped must not keep the room a second reader of the cache needs
        # (its downloads would wait for room, 120 s, and fail).
        ds, www = self.served(n=400, shard_size="20KiB")
        shard = max(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds) if f.endswith(".sfs"))
        limit = 4 * shard + shard // 2
        code = ("import hashlib, shardfeed, sys\n"
                "h = hashlib.sha256()\n"
                "L = shardfeed.Loader(sys.argv[1], batch_size=16, shuffle='global', seed=3,\n"
                "                     output='numpy', cache_dir=sys.argv[2], cache_limit=int(sys.argv[3]))\n"
                "for b in L:\n"
                "    h.update(b.ids.tobytes()); h.update(b['img'].tobytes())\n"
                "print(h.hexdigest())\n")
        want = hashlib.sha256()
        with shardfeed.Loader(ds, batch_size=16, shuffle="global", seed=3, output="numpy") as L:
            for b in L:
                want.update(b.ids.tobytes())
                want.update(b["img"].tobytes())
        cache = self.cache()
        with servers.Nginx(www) as ng:
            with shardfeed.Loader(ng.url + "/ds", batch_size=16, shuffle="global", seed=3, output="numpy",
                                  cache_dir=cache, cache_limit=limit) as idle:
                for b in idle:  # one epoch read, then idle while the other reads
                    pass
                p = subprocess.run([sys.executable, "-c", code, ng.url + "/ds", cache, str(limit)],
                                   capture_output=True, text=True, timeout=40)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), want.hexdigest())


if __name__ == "__main__":
    main()
