"""A shard whose object at the store is not the size the manifest gives (issue 18): refused
with an error naming its URL and both sizes, at open (the header's range reply's Content-Range
total) and at download (a shard replaced after open), in both read modes; a longer object's
extra bytes were unseen before (open fetched the tail by the manifest's size, the download its
first file_size bytes). Every test has a deadline; the servers bind 127.0.0.1 only."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import RemoteCase, main  # noqa: E402

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)


def resize(path, delta):
    """Makes the file at path `delta` bytes longer (appended zeros) or shorter."""
    size = os.path.getsize(path)
    if delta > 0:
        with open(path, "ab") as f:
            f.write(b"\0" * delta)
    else:
        os.truncate(path, size + delta)
    return size


class ObjectSize(RemoteCase):
    def shard(self, www, index=1):
        names = sorted(f for f in os.listdir(os.path.join(www, "ds")) if f.startswith("shard-"))
        return names[index], os.path.join(www, "ds", names[index])

    def assert_named(self, err, url, name, have, want):
        msg = str(err)
        self.assertIn(f"{url}/{name}", msg)
        self.assertIn(f"is {have} bytes", msg)
        self.assertIn(f"says {want}", msg)

    def test_a_longer_or_shorter_object_is_refused_at_open(self):
        _, www = self.served(n=200, shard_size="16KiB")
        name, path = self.shard(www)
        for delta in (100, -100):
            with self.subTest(delta=delta):
                want = resize(path, delta)
                try:
                    with servers.Nginx(www) as ng:
                        for mode in ("cache", "direct"):
                            with self.assertRaises(shardfeed.Error) as e:
                                shardfeed.Loader(ng.url + "/ds", batch_size=8, output="numpy",
                                                 remote_mode=mode, cache_dir=self.cache())
                            self.assert_named(e.exception, ng.url + "/ds", name, want + delta,
                                              want)
                finally:
                    resize(path, -delta)

    def test_an_object_replaced_by_a_longer_one_after_open_is_refused_when_read(self):
        _, www = self.served(n=200, shard_size="16KiB")
        name, path = self.shard(www)
        want = os.path.getsize(path)
        # Each mode in a process of its own: after a reader failed, the next reader in the same
        # process may hang (a bug of main's, reported; not this test's subject).
        code = ("import os, sys, shardfeed\n"
                "L = shardfeed.Loader(sys.argv[1], batch_size=8, shuffle='none', output='numpy',\n"
                "                     remote_mode=sys.argv[2], cache_dir=sys.argv[3])\n"
                "with open(sys.argv[4], 'ab') as f:\n"
                "    f.write(bytes(4096))  # the same bytes first: only its size tells\n"
                "try:\n"
                "    for _ in L:\n"
                "        pass\n"
                "except shardfeed.Error as e:\n"
                "    print(e)\n"
                "    os._exit(3)\n"
                "os._exit(0)\n")
        for mode in ("direct", "cache"):
            with self.subTest(mode=mode), servers.Nginx(www) as ng:
                try:
                    r = subprocess.run([sys.executable, "-c", code, ng.url + "/ds", mode,
                                        self.cache(mode), path], capture_output=True, text=True,
                                       timeout=30)
                finally:
                    os.truncate(path, want)
                self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
                # Each record (direct) and each download (cache) is asked If-Match the ETag
                # open saw. (Mode cache asked nothing before and reported the size here.)
                self.assertIn(f"{ng.url}/ds/{name}", r.stdout)
                self.assertIn("HTTP 412: the object changed at the store", r.stdout)

    def test_a_shard_gone_from_the_store_after_open_is_named_with_its_404(self):
        # It was reported as "evicted from the cache as soon as it arrived, 8 times: raise the
        # cache limit" (SF_E_LIMIT): the store's 404 (-ENOENT) was taken for a cache eviction.
        _, www = self.served(n=200, shard_size="16KiB")
        name, path = self.shard(www)
        code = ("import os, sys, shardfeed\n"
                "skip = sys.argv[2] == 'direct-skip'\n"
                "L = shardfeed.Loader(sys.argv[1], batch_size=8, shuffle='none', output='numpy',\n"
                "                     remote_mode=sys.argv[2].split('-')[0], cache_dir=sys.argv[3],\n"
                "                     on_corrupt='skip' if skip else 'error')\n"
                "os.rename(sys.argv[4], sys.argv[4] + '.away')\n"
                "try:\n"
                "    for _ in L:\n"
                "        pass\n"
                "except shardfeed.Error as e:\n"
                "    print(e.code, e)\n"
                "    os._exit(3)\n"
                "os._exit(0)\n")
        # direct-skip: the record is skipped as unreadable, and its substitutes (read through
        # the cache, a download of the shard) failed as "No such file or directory", naming no
        # URL or status; they are read by range requests as the records are.
        for mode in ("cache", "direct", "direct-skip"):
            with self.subTest(mode=mode), servers.Nginx(www) as ng:
                try:
                    r = subprocess.run([sys.executable, "-c", code, ng.url + "/ds", mode,
                                        self.cache(mode + "-gone"), path], capture_output=True,
                                       text=True, timeout=30)
                finally:
                    if os.path.exists(path + ".away"):
                        os.rename(path + ".away", path)
                self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
                self.assertIn(f"{ng.url}/ds/{name}", r.stdout)
                self.assertIn("404", r.stdout)
                self.assertNotIn("cache limit", r.stdout)

    def test_an_object_replaced_by_another_of_the_same_size_fails_direct_reads(self):
        # The size check passes it, and with checksums off mode direct read its records from
        # the new object unnoticed (another dataset's bytes in 34 of 40 batches). Each record
        # is now read with If-Match on the ETag that open saw: the store answers 412.
        _, www = self.served(n=200, shard_size="16KiB")
        name, path = self.shard(www)
        code = ("import os, sys, shardfeed\n"
                "L = shardfeed.Loader(sys.argv[1], batch_size=8, shuffle='none', output='numpy',\n"
                "                     remote_mode=sys.argv[3], cache_dir=sys.argv[4], verify=False)\n"
                "with open(sys.argv[2], 'r+b') as f:  # other bytes, the same size\n"
                "    f.seek(os.path.getsize(sys.argv[2]) // 2)\n"
                "    f.write(bytes(64))\n"
                "t = os.stat(sys.argv[2]).st_mtime + 10  # nginx's ETag: mtime (seconds) and size\n"
                "os.utime(sys.argv[2], (t, t))\n"
                "try:\n"
                "    for _ in L:\n"
                "        pass\n"
                "except shardfeed.Error as e:\n"
                "    print(e)\n"
                "    os._exit(3)\n"
                "os._exit(0)\n")
        with open(path, "rb") as f:
            original = f.read()
        st = os.stat(path)
        # Mode cache asks every part of a shard's download If-Match the same ETag: before,
        # it downloaded the new object 7 times, failed its checks each time and reported the
        # index checksum, not the change.
        for mode in ("direct", "cache"):
            with self.subTest(mode=mode), servers.Nginx(www) as ng, servers.FaultProxy(ng.url) as p:
                try:
                    r = subprocess.run([sys.executable, "-c", code, p.url + "/ds", path, mode,
                                        self.cache(mode + "-replaced")],
                                       capture_output=True, text=True, timeout=30)
                finally:
                    with open(path, "wb") as f:
                        f.write(original)
                    os.utime(path, (st.st_atime, st.st_mtime))
                self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
                self.assertIn(f"{p.url}/ds/{name}", r.stdout)
                self.assertIn("HTTP 412: the object changed at the store since the dataset was "
                              "opened", r.stdout)
                if mode == "cache":
                    # open's two metadata ranges, then one download, refused: the prefetcher
                    # and each I/O thread reading the shard downloaded it before (5 GETs)
                    gets = [q for m, q, _ in p.log if m == "GET" and q.endswith("/" + name)]
                    self.assertEqual(len(gets), 3, gets)


if __name__ == "__main__":
    main()
