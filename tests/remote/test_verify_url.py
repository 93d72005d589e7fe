"""`verify URL` and stray objects (issue 18), against the local servers of servers.py
(127.0.0.1): an s3:// dataset's prefix is listed (ListObjectsV2) and a shard object the manifest
does not list is reported exactly as such a file in a local folder is (same line, same exit
status), other names, sub-"folders" and sibling prefixes are not; verify of an http(s):// URL
says once that strays cannot be checked there (no listing).

  SHARDFEED=build/shardfeed PYTHONPATH=build/python /usr/bin/python3 tests/remote/test_verify_url.py -v
"""
import os
import re
import shutil
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import RemoteCase, main, run, write_samples  # noqa: E402

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)


class PagingFront(servers._Forwarder):
    """In front of s3rver (whose ListObjectsV2 answers 500 once a listing is truncated): checks
    each request's signature as S3Server's front does, and answers a listing `page_size` objects
    a page, with continuation tokens holding '+', '/' and '=' (so the client must encode them)."""

    def __init__(self, s3, page_size):
        super().__init__(s3.s3rver_url, self._check)
        self.page_size = page_size
        self.pages = 0

    @staticmethod
    def _check(method, raw_path, headers, body):
        problem = servers.sigv4_problem(method, raw_path, headers, body, {servers.S3RVER_KEY: servers.S3RVER_KEY})
        return ("respond",) + problem if problem else None

    def _forward(self, method, raw_path, in_headers, body):
        path, _, query = raw_path.partition("?")
        q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        if method != "GET" or q.get("list-type") != "2":
            return super()._forward(method, raw_path, in_headers, body)
        token = q.pop("continuation-token", None)
        status, reason, headers, whole = super()._forward(
            method, path + "?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote), in_headers, body)
        if status != 200:
            return status, reason, headers, whole
        items = re.findall(rb"<Contents>.*?</Contents>", whole, re.S)
        start = int(token[len("p+/"):-1]) if token else 0
        end = start + self.page_size
        more = end < len(items)
        page = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><IsTruncated>'
                + (b"true" if more else b"false") + b"</IsTruncated>"
                + (f"<NextContinuationToken>p+/{end}=</NextContinuationToken>".encode() if more else b"")
                + b"".join(items[start:end]) + b"</ListBucketResult>")
        self.pages += 1
        return status, reason, dict(headers, **{"content-length": str(len(page))}), page


class VerifyStrays(RemoteCase):
    @classmethod
    def setUpClass(cls):
        if "built without libcurl" in run("push", "/nonexistent", "s3://bucket/x").stderr:
            raise unittest.SkipTest("this shardfeed was built without libcurl")

    def test_s3_stray_shard_reported_as_in_a_folder(self):
        ds = os.path.join(self.root, "ds")
        write_samples(os.path.join(self.root, "src"), 120, seed=4)
        run("pack", os.path.join(self.root, "src"), "-o", ds, "--shard-size", "16KiB", "-q", check=0)
        shards = sorted(f for f in os.listdir(ds) if f.startswith("shard-"))
        stray = f"shard-{len(shards) + 3:06d}.sfs"
        with servers.S3Server(os.path.join(self.root, "s3")) as s3:
            s3.create_bucket("bkt")
            env = dict(os.environ, **s3.env(), HOME=self.root, SHARDFEED_CACHE_DIR=self.cache())
            run("push", ds, "s3://bkt/a b/ds", "-q", env=env, check=0)
            ok = run("verify", "s3://bkt/a b/ds", env=env, check=0)
            self.assertNotIn("not listed", ok.stdout)
            # Objects that are not strays, as in a folder: other names, a sub-"folder", a sibling prefix.
            with open(os.path.join(ds, shards[0]), "rb") as f:
                body = f.read()
            for key in ("a b/ds/README.txt", f"a b/ds/sub/{stray}", f"a b/ds2/{stray}", f"a b/ds/{stray}"):
                status, _, resp = s3.request("PUT", "/bkt/" + key.replace(" ", "%20"), body)
                self.assertEqual(status, 200, resp[:200])
            remote = run("verify", "s3://bkt/a b/ds", env=env)
        shutil.copy(os.path.join(ds, shards[0]), os.path.join(ds, stray))
        with open(os.path.join(ds, "README.txt"), "w") as f:
            f.write("x")
        local = run("verify", ds)
        self.assertEqual(local.returncode, 2, local.stdout + local.stderr)
        self.assertEqual(remote.returncode, local.returncode, remote.stdout + remote.stderr)
        want = [ln.replace(ds, "s3://bkt/a b/ds") for ln in local.stdout.splitlines() if ln.startswith("CORRUPT")]
        got = [ln for ln in remote.stdout.splitlines() if ln.startswith("CORRUPT")]
        self.assertEqual(got, want)
        self.assertIn(f"CORRUPT s3://bkt/a b/ds/{stray} byte 0: shard file not listed in the manifest", remote.stdout)
        self.assertEqual(len(got), 2, got)  # the stray line and the summary

    def test_s3_prefix_with_an_apostrophe(self):
        # s3rver writes the listing's keys with "'" as &#x27; (a numeric character reference):
        # decoded, they are under the prefix asked for, and verify finds nothing wrong.
        ds = os.path.join(self.root, "ds")
        write_samples(os.path.join(self.root, "src"), 40, seed=4)
        run("pack", os.path.join(self.root, "src"), "-o", ds, "-q", check=0)
        with servers.S3Server(os.path.join(self.root, "s3")) as s3:
            s3.create_bucket("bkt")
            env = dict(os.environ, **s3.env(), HOME=self.root, SHARDFEED_CACHE_DIR=self.cache())
            run("push", ds, "s3://bkt/it's/ds", "-q", env=env, check=0)
            r = run("verify", "s3://bkt/it's/ds", env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("CORRUPT", r.stdout)

    def test_s3_listing_in_pages(self):
        ds = os.path.join(self.root, "ds")
        write_samples(os.path.join(self.root, "src"), 120, seed=4)
        run("pack", os.path.join(self.root, "src"), "-o", ds, "--shard-size", "16KiB", "-q", check=0)
        n = len([f for f in os.listdir(ds) if f.startswith("shard-")])
        with servers.S3Server(os.path.join(self.root, "s3")) as s3:
            s3.create_bucket("bkt")
            env = dict(os.environ, **s3.env(), HOME=self.root, SHARDFEED_CACHE_DIR=self.cache())
            run("push", ds, "s3://bkt/ds", "-q", env=env, check=0)
            status, _, resp = s3.request("PUT", f"/bkt/ds/shard-{n:06d}.sfs", b"stray")  # listed last
            self.assertEqual(status, 200, resp[:200])
            front = PagingFront(s3, page_size=2)
            try:
                env.update(AWS_ENDPOINT_URL=front.url, AWS_ENDPOINT_URL_S3=front.url)
                r = run("verify", "s3://bkt/ds", env=env)
            finally:
                front.stop()
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"CORRUPT s3://bkt/ds/shard-{n:06d}.sfs byte 0: shard file not listed", r.stdout)
        self.assertEqual(front.pages, (n + 2 + 1) // 2)  # n shards, the manifest and the stray

    def test_s3_listing_that_fails_is_an_environment_error(self):
        ds = os.path.join(self.root, "ds")
        write_samples(os.path.join(self.root, "src"), 40, seed=4)
        run("pack", os.path.join(self.root, "src"), "-o", ds, "-q", check=0)
        listing = lambda m, path: m == "GET" and "list-type=2" in path  # noqa: E731
        with servers.S3Server(os.path.join(self.root, "s3")) as s3:
            s3.create_bucket("bkt")
            env = dict(os.environ, **s3.env(), HOME=self.root, SHARDFEED_CACHE_DIR=self.cache())
            run("push", ds, "s3://bkt/ds", "-q", env=env, check=0)
            with servers.FaultProxy(s3.endpoint, {"500": 1.0}, match=listing) as p:
                env.update(AWS_ENDPOINT_URL=p.url, AWS_ENDPOINT_URL_S3=p.url)
                r = run("verify", "s3://bkt/ds", env=env)
        self.assertGreater(p.counts["500"], 1, "the listing was retried")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)  # could not check everything: not corrupt
        self.assertNotIn("CORRUPT", r.stdout)
        self.assertIn("checking for stray objects: s3://bkt/ds/?delimiter=%2F&list-type=2", r.stderr)
        self.assertIn("HTTP 500", r.stderr)

    def test_http_says_strays_are_not_checked(self):
        ds = os.path.join(self.root, "www", "ds")
        write_samples(os.path.join(self.root, "src"), 40, seed=4)
        run("pack", os.path.join(self.root, "src"), "-o", ds, "-q", check=0)
        with servers.Nginx(os.path.join(self.root, "www")) as nginx:
            env = dict(os.environ, SHARDFEED_CACHE_DIR=self.cache())
            r = run("verify", nginx.url + "/ds", env=env, check=0)
            self.assertEqual(r.stdout.count("stray files cannot be checked over HTTP"), 1, r.stdout)
            j = run("verify", nginx.url + "/ds", "--json", env=env, check=0)
            self.assertIn('"strays_checked":false', j.stdout)
        local = run("verify", ds, check=0)
        self.assertNotIn("stray", local.stdout)

    def parts(self):
        """The cache's downloads under way or not yet published (.part-NAME-PID-N)."""
        return sorted(f for _, _, fs in os.walk(self.cache()) for f in fs
                      if f.startswith(".part-"))

    def test_a_byte_changed_at_the_store_is_found_with_the_cache_warm(self):
        # verify read the cache's copies, which hold what the store had when they were
        # downloaded: a byte flipped at the store since was reported OK, exit 0.
        ds = os.path.join(self.root, "www", "ds")
        write_samples(os.path.join(self.root, "src"), 120, seed=4)
        run("pack", os.path.join(self.root, "src"), "-o", ds, "--shard-size", "16KiB", "-q", check=0)
        name = sorted(f for f in os.listdir(ds) if f.startswith("shard-"))[1]
        env = dict(os.environ, SHARDFEED_CACHE_DIR=self.cache())
        with servers.Nginx(os.path.join(self.root, "www")) as nginx:
            url = nginx.url + "/ds"
            self.assertEqual(run("verify", url, env=env, check=0).returncode, 0)
            # The cache warm: every shard in it. Closed, its last batch dropped (a batch keeps
            # the reader, and so its cache, alive): the close waits for the publishes, whose
            # .part files would otherwise still be there when verify's are looked for.
            with shardfeed.Loader(url, batch_size=8, shuffle="none", output="numpy",
                                  cache_dir=self.cache()) as loader:
                for batch in loader:
                    pass
                del batch
            self.assertEqual(self.parts(), [])
            cached = [os.path.join(d, f) for d, _, fs in os.walk(self.cache()) for f in fs
                      if f == name]
            self.assertEqual(len(cached), 1, cached)
            path = os.path.join(ds, name)
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) // 2)
                b = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([b[0] ^ 0xFF]))
            r = run("verify", url, env=env)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertRegex(r.stdout, rf"CORRUPT {re.escape(url)}/{name} ")
            # the downloads verify checked are gone; the cache is as it was
            self.assertEqual(self.parts(), [])
            self.assertTrue(os.path.exists(cached[0]))

    def test_a_cache_limit_below_a_shard_is_an_environment_error_not_corruption(self):
        # It was SF_E_LIMIT, a format limit: verify said CORRUPT for every shard, exit 2,
        # of a healthy dataset (automation that drops "corrupt" datasets would drop it).
        ds = os.path.join(self.root, "www", "ds")
        write_samples(os.path.join(self.root, "src"), 40, seed=4)
        run("pack", os.path.join(self.root, "src"), "-o", ds, "-q", check=0)
        shard = max(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds))
        with servers.Nginx(os.path.join(self.root, "www")) as nginx:
            r = run("verify", nginx.url + "/ds", "--cache-dir", self.cache(), "--cache-limit",
                    str(shard - 1))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertNotIn("CORRUPT", r.stdout + r.stderr)
        self.assertIn("raise cache_limit", r.stdout + r.stderr)



if __name__ == "__main__":
    main()
