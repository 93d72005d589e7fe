"""shardfeed push against the local S3 server (tests/remote/servers.py): every object
arrives byte for byte (read back with curl's own SigV4), large shards go up as multipart
uploads, 10% of requests failing with 500 still completes, a manifest upload that fails
leaves no manifest, an incomplete or damaged dataset uploads nothing, a re-push with
fewer shards leaves exactly the new dataset, and errors name the URL, the HTTP status and
the store's message. Exits 77 (skipped) without s3rver or a libcurl build.

  SHARDFEED=build/shardfeed /usr/bin/python3 tests/remote/test_push.py -v
"""
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
import servers  # noqa: E402
import clitest  # noqa: E402
from clitest import run, scratch, write_samples  # noqa: E402

CURL_SIGV4 = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "S3RVER:S3RVER",
              "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
# Shards of about 1 MiB; above 512 KiB they go up in parts of 256 KiB.
SMALL_PARTS = ["--multipart-threshold", "512KiB", "--part-size", "256KiB"]


def dataset_files(ds):
    return sorted(f for f in os.listdir(ds) if f == "manifest.sfm" or f.endswith(".sfs"))


def curl_get(url):
    if not shutil.which("curl"):
        raise unittest.SkipTest("curl is not installed: run tools/install-deps.sh remote")
    r = subprocess.run(["curl", "-sS", "--fail", "--max-time", "30", *CURL_SIGV4, url],
                       capture_output=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"curl {url}: {r.stderr.decode()}")
    return r.stdout


class PushTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        servers.S3Server.command()  # SkipTest when s3rver is missing
        probe = run("push", "/nonexistent", "s3://bucket/x")
        if "built without libcurl" in probe.stderr:
            raise unittest.SkipTest("this shardfeed was built without libcurl")
        cls.tmp = scratch("push-")
        cls.ds = os.path.join(cls.tmp, "ds")
        write_samples(os.path.join(cls.tmp, "npy"), 300, shape=(3, 32, 32))
        run("pack", os.path.join(cls.tmp, "npy"), "-o", cls.ds, "--shard-size", "1MiB", "-q", check=0)
        cls.files = dataset_files(cls.ds)
        assert len(cls.files) >= 4, cls.files
        cls.s3 = servers.S3Server(os.path.join(cls.tmp, "s3")).__enter__()
        cls.bucket_n = 0

    @classmethod
    def tearDownClass(cls):
        cls.s3.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def new_bucket(self):
        type(self).bucket_n += 1
        name = f"bkt-{self.bucket_n}"
        self.s3.create_bucket(name)
        return name

    def push(self, *args, endpoint=None, check=None, extra_env=None):
        env = dict(os.environ, **self.s3.env())
        env.pop("AWS_PROFILE", None)
        env["HOME"] = self.tmp  # no ~/.aws of the machine's
        if endpoint:
            env["AWS_ENDPOINT_URL"] = env["AWS_ENDPOINT_URL_S3"] = endpoint
        env.update(extra_env or {})
        return run("push", *args, env=env, check=check, timeout=120)

    def damaged_copy(self, name):
        """(a copy of the dataset in tmp/name, its last shard's file name): one byte of a
        record of that shard flipped, header, footer and index intact."""
        broken = os.path.join(self.tmp, name)
        shutil.copytree(self.ds, broken)
        last = [f for f in dataset_files(broken) if f.endswith(".sfs")][-1]
        with open(os.path.join(broken, last), "r+b") as f:
            f.seek(128 + 4096 + 100)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0xFF]))
        return broken, last

    def assert_uploaded(self, bucket, prefix, ds=None):
        ds = ds or self.ds
        keys = self.s3.list_keys(bucket, prefix + "/")
        self.assertEqual(keys, [f"{prefix}/{f}" for f in dataset_files(ds)])
        for f in dataset_files(ds):
            with open(os.path.join(ds, f), "rb") as fh:
                want = fh.read()
            got = curl_get(f"{self.s3.endpoint}/{bucket}/{prefix}/{f}")
            self.assertEqual(got, want, f"{bucket}/{prefix}/{f} differs from the local file")

    def test_round_trip_with_multipart(self):
        bucket = self.new_bucket()
        with servers.FaultProxy(self.s3.endpoint) as p:
            out = self.push(self.ds, f"s3://{bucket}/sets/one", *SMALL_PARTS, endpoint=p.url, check=0)
        self.assertIn("manifest.sfm", out.stdout)
        self.assert_uploaded(bucket, "sets/one")
        # Every shard (about 1 MiB) went up in parts, the manifest in one PUT, last.
        puts = [(m, path) for m, path, _ in p.log if m in ("PUT", "POST")]
        shards = [f for f in self.files if f.endswith(".sfs")]
        initiated = [path for m, path in puts if m == "POST" and path.endswith("?uploads=")]
        self.assertEqual(len(initiated), len(shards))
        parts = [path for m, path in puts if m == "PUT" and "partNumber=" in path]
        self.assertGreaterEqual(len(parts), 3 * len(shards))
        self.assertEqual(puts[-1], ("PUT", f"/{bucket}/sets/one/manifest.sfm"))

    def test_single_puts_below_the_threshold(self):
        bucket = self.new_bucket()
        with servers.FaultProxy(self.s3.endpoint) as p:
            self.push(self.ds, f"s3://{bucket}/ds", "-q", endpoint=p.url, check=0)
        self.assertFalse(any("uploads" in path for _, path, _ in p.log))
        self.assert_uploaded(bucket, "ds")

    def test_500s_are_retried(self):
        bucket = self.new_bucket()
        with servers.FaultProxy(self.s3.endpoint, {"500": 0.1}, seed=3) as p:
            self.push(self.ds, f"s3://{bucket}/ds", *SMALL_PARTS, "-q", endpoint=p.url, check=0)
        self.assertGreater(p.counts["500"], 0, "no 500 was injected: the test proves nothing")
        self.assert_uploaded(bucket, "ds")

    def test_resets_and_drops_are_retried(self):
        bucket = self.new_bucket()
        with servers.FaultProxy(self.s3.endpoint, {"reset": 0.1, "drop": 0.05, "503": 0.05}, seed=5) as p:
            self.push(self.ds, f"s3://{bucket}/ds", *SMALL_PARTS, "-q", endpoint=p.url, check=0)
        self.assertGreater(p.counts["reset"] + p.counts["drop"], 0)
        self.assert_uploaded(bucket, "ds")

    def test_bytes_damaged_on_the_way_are_refused_and_sent_again(self):
        # One upload request in five has a byte of its body flipped between push and the
        # store: each is signed with its body's SHA-256, so the store refuses it
        # (XAmzContentSHA256Mismatch) and push sends it again; with UNSIGNED-PAYLOAD the
        # store kept the damaged bytes.
        for parts, seed in ((SMALL_PARTS, 11), ([], 12)):  # multipart uploads, then single PUTs
            bucket = self.new_bucket()
            with servers.FaultProxy(self.s3.endpoint, {"corrupt_request": 0.2}, seed=seed) as p:
                self.push(self.ds, f"s3://{bucket}/ds", *parts, "-q", endpoint=p.url, check=0)
            damaged = [path for m, path, kind in p.log if kind == "corrupt_request"]
            if parts:
                self.assertTrue(any("partNumber=" in path for path in damaged), "no part was damaged")
            else:
                self.assertTrue(any(path.endswith(".sfs") for path in damaged), "no shard PUT was damaged")
            self.assert_uploaded(bucket, "ds")
        # Every body damaged: the manifest never goes up, and the error says why.
        bucket = self.new_bucket()
        manifest_put = lambda m, path: m == "PUT" and path.endswith("/manifest.sfm")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"corrupt_request": 1.0}, match=manifest_put) as p:
            out = self.push(self.ds, f"s3://{bucket}/ds", "--retries", "2", endpoint=p.url, check=1)
        self.assertEqual(p.counts["corrupt_request"], 3)
        self.assertIn(f"PUT s3://{bucket}/ds/manifest.sfm: HTTP 400 XAmzContentSHA256Mismatch", out.stderr)
        self.assertIn("the store received other bytes than the ones read and hashed here", out.stderr)
        self.assertIsNone(self.s3.get_object(bucket, "ds/manifest.sfm"))

    def test_unsigned_uploads_are_read_back_and_sent_again(self):
        # Without credentials nothing signs a body's hash, so the store keeps whatever
        # arrives: push reads each object back and compares it with the local bytes. One
        # upload request in five damaged: every object arrives whole all the same.
        # (PUTs only: a multipart completion's XML damaged is refused by the store as
        # MalformedXML or InvalidPart, which fails the push loudly.)
        anonymous = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
        put = lambda m, path: m == "PUT"  # noqa: E731
        for parts, seed in ((SMALL_PARTS, 21), ([], 22)):
            bucket = self.new_bucket()
            with servers.FaultProxy(self.s3.endpoint, {"corrupt_request": 0.2}, seed=seed, match=put) as p:
                self.push(self.ds, f"s3://{bucket}/ds", *parts, "-q", endpoint=p.url, check=0,
                          extra_env=anonymous)
            self.assertGreater(p.counts["corrupt_request"], 0, "nothing was damaged: the test proves nothing")
            # Unsigned: each shard read back whole (a signed push reads nothing back).
            reads = {path for m, path, _ in p.log if m == "GET" and path.endswith(".sfs")}
            self.assertEqual(len(reads), len([f for f in self.files if f.endswith(".sfs")]))
            self.assert_uploaded(bucket, "ds")
        # The manifest damaged every time: it is deleted again and the error says why.
        bucket = self.new_bucket()
        manifest_put = lambda m, path: m == "PUT" and path.endswith("/manifest.sfm")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"corrupt_request": 1.0}, match=manifest_put) as p:
            out = self.push(self.ds, f"s3://{bucket}/ds", "--retries", "2", endpoint=p.url, check=1,
                            extra_env=anonymous)
        self.assertEqual(p.counts["corrupt_request"], 3)
        self.assertIn(f"PUT s3://{bucket}/ds/manifest.sfm: the object the store kept differs from the",
                      out.stderr)
        self.assertIn("read back after each of 3 uploads", out.stderr)
        self.assertIsNone(self.s3.get_object(bucket, "ds/manifest.sfm"))

    def test_lost_answer_to_a_completed_multipart_upload(self):
        # The first CompleteMultipartUpload of each shard is forwarded, then reset: the
        # store completed it, the retry gets NoSuchUpload, and push finds the object whole.
        bucket = self.new_bucket()
        seen = set()

        def first_complete(method, path):
            if method != "POST" or "uploadId=" not in path or path in seen:
                return False
            seen.add(path)
            return True

        with servers.FaultProxy(self.s3.endpoint, {"reset": 1.0}, match=first_complete) as p:
            self.push(self.ds, f"s3://{bucket}/ds", *SMALL_PARTS, "-q", endpoint=p.url, check=0)
        self.assertEqual(p.counts["reset"], len([f for f in self.files if f.endswith(".sfs")]))
        self.assert_uploaded(bucket, "ds")

    def test_failed_manifest_upload_leaves_no_manifest(self):
        # 500 on every PUT of the manifest: the error names it; no manifest is there.
        bucket = self.new_bucket()
        manifest_put = lambda m, path: m == "PUT" and path.endswith("/manifest.sfm")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"500": 1.0}, match=manifest_put) as p:
            out = self.push(self.ds, f"s3://{bucket}/ds", "--retries", "2", endpoint=p.url, check=1)
        self.assertEqual(p.counts["500"], 3)
        self.assertIn(f"s3://{bucket}/ds/manifest.sfm", out.stderr)
        self.assertIn("HTTP 500 InternalError: injected by FaultProxy", out.stderr)
        self.assertIsNone(self.s3.get_object(bucket, "ds/manifest.sfm"))
        # A reset after the store kept the manifest (the answer lost): deleted after the retries.
        bucket = self.new_bucket()
        with servers.FaultProxy(self.s3.endpoint, {"reset": 1.0}, match=manifest_put) as p:
            out = self.push(self.ds, f"s3://{bucket}/ds", "--retries", "1", endpoint=p.url, check=1)
        self.assertEqual(p.counts["reset"], 2)
        self.assertIn(f"s3://{bucket}/ds/manifest.sfm", out.stderr)
        self.assertIn(("DELETE", f"/{bucket}/ds/manifest.sfm", None), p.log)
        self.assertIsNone(self.s3.get_object(bucket, "ds/manifest.sfm"))

    def test_incomplete_dataset_uploads_nothing(self):
        bucket = self.new_bucket()
        broken = os.path.join(self.tmp, "broken")
        shutil.copytree(self.ds, broken)
        last = [f for f in dataset_files(broken) if f.endswith(".sfs")][-1]
        os.remove(os.path.join(broken, last))
        out = self.push(broken, f"s3://{bucket}/ds", check=2)
        self.assertIn(last, out.stderr)
        self.assertIn("not complete", out.stderr)
        self.assertEqual(self.s3.list_keys(bucket), [])
        # A shard whose header breaks: the same.
        shutil.copy(os.path.join(self.ds, last), os.path.join(broken, last))
        with open(os.path.join(broken, last), "r+b") as f:
            f.seek(20)
            b = f.read(1)
            f.seek(20)
            f.write(bytes([b[0] ^ 1]))
        out = self.push(broken, f"s3://{bucket}/ds", check=2)
        self.assertIn(last, out.stderr)
        self.assertEqual(self.s3.list_keys(bucket), [])
        shutil.rmtree(broken)

    def test_damaged_record_uploads_nothing(self):
        # Header, footer and index intact, one record's bytes damaged in the LAST shard:
        # every record is checked before the first byte goes up, so nothing is uploaded.
        bucket = self.new_bucket()
        broken, last = self.damaged_copy("damaged")
        with servers.FaultProxy(self.s3.endpoint) as p:
            out = self.push(broken, f"s3://{bucket}/ds", endpoint=p.url, check=2)
        self.assertRegex(out.stderr, rf"{os.path.join(broken, last)}: record \d+: checksum mismatch"
                                     r" in its payload at bytes \d+\.\.")
        self.assertIn("nothing was uploaded", out.stderr)
        # one request: whether a dataset is there, asked before every record is read
        self.assertEqual(p.log, [("GET", f"/{bucket}/ds/manifest.sfm", None)])
        self.assertEqual(self.s3.list_keys(bucket), [])
        shutil.rmtree(broken)

    def small_dataset(self):
        """A dataset of one or two shards (fewer than self.ds has), packed once."""
        small = os.path.join(self.tmp, "small")
        if not os.path.exists(small):
            write_samples(os.path.join(self.tmp, "small-npy"), 40, shape=(3, 32, 32), seed=1)
            run("pack", os.path.join(self.tmp, "small-npy"), "-o", small, "--shard-size", "1MiB", "-q",
                check=0)
        return small

    def verify_url(self, url, check):
        env = dict(os.environ, **self.s3.env())
        env.pop("AWS_PROFILE", None)
        env["HOME"] = self.tmp
        return run("verify", url, env=env, check=check, timeout=120)

    def test_overwrite_with_fewer_shards_leaves_only_the_new_dataset(self):
        bucket = self.new_bucket()
        small = self.small_dataset()
        n_small = len([f for f in dataset_files(small) if f.endswith(".sfs")])
        self.assertLess(n_small, len([f for f in self.files if f.endswith(".sfs")]))
        self.push(self.ds, f"s3://{bucket}/ds", "-q", check=0)
        # Objects that are not shards of this dataset are never deleted.
        others = ["ds/notes.txt", "ds/shard-000099.sfs.old", "ds/sub/shard-000009.sfs"]
        for key in others:
            self.assertEqual(self.s3.request("PUT", f"/{bucket}/{key}", b"x")[0], 200)
        with servers.FaultProxy(self.s3.endpoint) as p:
            self.push(small, f"s3://{bucket}/ds", "-q", "--overwrite", endpoint=p.url, check=0)
        self.assertEqual(self.s3.list_keys(bucket, "ds/"),
                         sorted([f"ds/{f}" for f in dataset_files(small)] + others))
        self.verify_url(f"s3://{bucket}/ds", check=0)
        # The old shards go after the new manifest is up, the highest first.
        methods = [(m, path.split("/")[-1]) for m, path, _ in p.log if m in ("PUT", "DELETE")]
        deletes = [name for m, name in methods if m == "DELETE" and name.startswith("shard-")]
        old = [f for f in self.files if f.endswith(".sfs")][n_small:]
        self.assertEqual(deletes, sorted(old, reverse=True))
        self.assertLess(methods.index(("PUT", "manifest.sfm")), methods.index(("DELETE", deletes[0])))

    def test_failed_removal_of_old_shards_still_pushes(self):
        # Every DELETE of a shard fails: the push succeeded (the new dataset is complete), and
        # the warning names what is left and that verify reports it.
        bucket = self.new_bucket()
        small = self.small_dataset()
        self.push(self.ds, f"s3://{bucket}/ds", "-q", check=0)
        shard_delete = lambda m, path: m == "DELETE" and "/shard-" in path  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"500": 1.0}, match=shard_delete) as p:
            out = self.push(small, f"s3://{bucket}/ds", "-q", "--overwrite", "--retries", "0",
                            endpoint=p.url, check=0)
        self.assertEqual(p.counts["500"], 1)
        old = [f for f in self.files if f.endswith(".sfs")][len(dataset_files(small)) - 1:]
        self.assertIn(f"warning: s3://{bucket}/ds is pushed and complete", out.stderr)
        self.assertIn(f"{len(old)} shards, {old[0]} to {old[-1]}", out.stderr)
        self.assertIn("HTTP 500 InternalError: injected by FaultProxy", out.stderr)
        self.assertIn(f"shardfeed verify s3://{bucket}/ds", out.stderr)
        out = self.verify_url(f"s3://{bucket}/ds", check=2)
        self.assertIn("extra shard", out.stdout + out.stderr)

    def test_failed_manifest_delete_names_its_own_reason(self):
        # The manifest's PUT fails and so does the DELETE after it: both reasons are named.
        bucket = self.new_bucket()
        manifest = lambda m, path: m in ("PUT", "DELETE") and path.endswith("/manifest.sfm")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"500": 1.0}, match=manifest) as p:
            out = self.push(self.ds, f"s3://{bucket}/ds", "--retries", "0", endpoint=p.url, check=1)
        self.assertEqual(p.counts["500"], 2)
        injected = "HTTP 500 InternalError: injected by FaultProxy (500) (after 1 attempt)"
        self.assertIn(f"PUT s3://{bucket}/ds/manifest.sfm: {injected}; deleting a manifest the store may have "
                      f"kept also failed (DELETE s3://{bucket}/ds/manifest.sfm: {injected}): "
                      f"s3://{bucket}/ds/manifest.sfm may hold the manifest", out.stderr)

    def test_existing_dataset_refused_then_overwritten(self):
        bucket = self.new_bucket()
        self.push(self.ds, f"s3://{bucket}/ds", "-q", check=0)
        out = self.push(self.ds, f"s3://{bucket}/ds", "-q", check=1)
        self.assertIn("already there", out.stderr)
        self.assertIn("--overwrite", out.stderr)
        # An empty manifest object: AWS answers the existence check's one-byte range with 416
        # InvalidRange (s3rver drops the connection, so a front answers as AWS does). A dataset
        # is there: refused, and replaced with --overwrite; push failed on the "error" before.
        status, _, _ = self.s3.request("PUT", f"/{bucket}/empty/manifest.sfm", b"")
        self.assertEqual(status, 200)
        empty = [True]

        def as_aws(method, path, headers, body):
            if method == "GET" and path == f"/{bucket}/empty/manifest.sfm" and empty[0]:
                return ("respond", 416, "InvalidRange", "The requested range is not satisfiable")
            if method == "DELETE" and path == f"/{bucket}/empty/manifest.sfm":
                empty[0] = False
            return None
        front = servers._Forwarder(self.s3.endpoint, as_aws)
        try:
            out = self.push(self.ds, f"s3://{bucket}/empty", "-q", endpoint=front.url, check=1)
            self.assertIn(f"s3://{bucket}/empty: a dataset is already there", out.stderr)
            self.push(self.ds, f"s3://{bucket}/empty", "-q", "--overwrite", endpoint=front.url,
                      check=0)
        finally:
            front.stop()
        self.assert_uploaded(bucket, "empty")
        # Refused before the records are read (they were read first, possibly for hours): a
        # dataset with a damaged record is refused as one already there, not for the damage.
        broken, _ = self.damaged_copy("refused-first")
        out = self.push(broken, f"s3://{bucket}/ds", "-q", check=1)
        self.assertIn("already there", out.stderr)
        self.assertNotIn("checksum", out.stderr)
        shutil.rmtree(broken)
        self.push(self.ds, f"s3://{bucket}/ds", "-q", "--overwrite", check=0)
        self.assert_uploaded(bucket, "ds")
        # An overwrite that fails after deleting the manifest says the old dataset is gone.
        shard_put = lambda m, path: m == "PUT" and path.endswith("/shard-000001.sfs")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"500": 1.0}, match=shard_put) as p:
            out = self.push(self.ds, f"s3://{bucket}/ds", "-q", "--overwrite", "--retries", "0",
                            endpoint=p.url, check=1)
        self.assertIn(f"PUT s3://{bucket}/ds/shard-000001.sfs: HTTP 500", out.stderr)
        self.assertIn(f"the dataset that was at s3://{bucket}/ds is no longer readable: --overwrite "
                      "deleted its manifest", out.stderr)
        self.assertIsNone(self.s3.get_object(bucket, "ds/manifest.sfm"))

    def test_credentials_from_a_profile_in_the_files(self):
        home = os.path.join(self.tmp, "home")
        os.makedirs(os.path.join(home, ".aws"), exist_ok=True)
        with open(os.path.join(home, ".aws", "credentials"), "w") as f:
            f.write("[default]\naws_access_key_id = S3RVER\naws_secret_access_key = wrong\n"
                    "[pusher]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n")
        with open(os.path.join(home, ".aws", "config"), "w") as f:
            f.write(f"[profile pusher]\nregion = us-east-1\nendpoint_url = {self.s3.endpoint}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(HOME=home, AWS_PROFILE="pusher")
        bucket = self.new_bucket()
        run("push", self.ds, f"s3://{bucket}/ds", "-q", env=env, check=0, timeout=120)
        self.assert_uploaded(bucket, "ds")
        # The default profile's wrong secret is refused by the signature check.
        del env["AWS_PROFILE"]
        env["AWS_ENDPOINT_URL"] = self.s3.endpoint
        out = run("push", self.ds, f"s3://{bucket}/other", "-q", env=env, check=1, timeout=120)
        self.assertIn("SignatureDoesNotMatch", out.stderr)

    def test_a_403_for_the_manifest_says_what_permission_is_missing(self):
        bucket = self.new_bucket()
        manifest_get = lambda m, path: m == "GET" and path.endswith("/manifest.sfm")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"403": 1.0}, match=manifest_get) as p:
            out = self.push(self.ds, f"s3://{bucket}/ds", endpoint=p.url, check=1)
        self.assertIn(f"GET s3://{bucket}/ds/manifest.sfm: HTTP 403 AccessDenied", out.stderr)
        self.assertIn("when the credentials lack s3:ListBucket on the bucket", out.stderr)
        self.assertEqual(self.s3.list_keys(bucket), [])

    def test_a_pack_into_the_folder_during_a_push_is_refused(self):
        # A finished pack removes its lock file, so push makes one and holds it shared: a pack
        # --force into the folder while the push runs (its manifest PUT held 2 s by the proxy)
        # is refused, naming the push; the push completes; no lock file is left.
        bucket = self.new_bucket()
        ds = os.path.join(self.tmp, "pushed-while-packed")
        shutil.rmtree(ds, ignore_errors=True)
        shutil.copytree(self.ds, ds)
        self.assertFalse(os.path.exists(os.path.join(ds, ".shardfeed.lock")))
        man = lambda m, path: m == "PUT" and path.endswith("/manifest.sfm")  # noqa: E731
        env = dict(os.environ, **self.s3.env(), HOME=self.tmp)
        env.pop("AWS_PROFILE", None)
        with servers.FaultProxy(self.s3.endpoint, {"delay": 1.0}, delay_s=2.0, match=man) as p:
            env["AWS_ENDPOINT_URL"] = env["AWS_ENDPOINT_URL_S3"] = p.url
            push = subprocess.Popen([clitest.SHARDFEED, "push", ds, f"s3://{bucket}/ds", "-q"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 60
                while not any(m == "PUT" and path.endswith("manifest.sfm") for m, path, _ in p.log):
                    self.assertLess(time.monotonic(), deadline, "the push never reached its manifest")
                    self.assertIsNone(push.poll(), push.stderr.read() if push.poll() is not None else "")
                    time.sleep(0.02)
                packed = run("pack", os.path.join(self.tmp, "npy"), "-o", ds, "--force", "-q", check=1)
                self.assertRegex(packed.stderr, r"another shardfeed push \(pid %d on [^)]+\) is uploading " % push.pid
                                 + re.escape(ds))
                _, err = push.communicate(timeout=60)
            finally:
                push.kill()
                push.wait()
        self.assertEqual(push.returncode, 0, err)
        self.assert_uploaded(bucket, "ds")
        self.assertFalse(os.path.exists(os.path.join(ds, ".shardfeed.lock")), "push left its lock file")
        run("pack", os.path.join(self.tmp, "npy"), "-o", ds, "--force", "-q", check=0)  # free again
        # A user's own file of that name is held too, but never removed.
        with open(os.path.join(ds, ".shardfeed.lock"), "w") as f:
            f.write("mine\n")
        self.push(ds, f"s3://{bucket}/again", "-q", check=0)
        with open(os.path.join(ds, ".shardfeed.lock")) as f:
            self.assertEqual(f.read(), "mine\n")

    def test_store_errors_are_named(self):
        # A bucket that does not exist: said by the first request, before any record is read.
        with servers.FaultProxy(self.s3.endpoint) as p:
            out = self.push(self.ds, "s3://no-such-bucket/ds", "--retries", "0", endpoint=p.url,
                            check=1)
        self.assertIn("GET s3://no-such-bucket/ds/manifest.sfm: HTTP 404 NoSuchBucket: the bucket "
                      "does not exist", out.stderr)
        self.assertEqual([m for m, _, _ in p.log], ["GET"])
        bucket = self.new_bucket()
        out = self.push(self.ds, f"s3://{bucket}/ds", check=1,
                        extra_env={"AWS_SECRET_ACCESS_KEY": "not-the-secret"})
        self.assertIn("HTTP 403 SignatureDoesNotMatch", out.stderr)
        self.assertNotIn("not-the-secret", out.stderr + out.stdout)
        self.assertEqual(self.s3.list_keys(bucket), [])
        # Nothing listening: curl's reason, after the retries.
        nobody = f"http://127.0.0.1:{servers.free_port()}"
        out = self.push(self.ds, f"s3://{bucket}/ds", "--retries", "1", endpoint=nobody, check=1)
        self.assertRegex(out.stderr, rf"GET s3://{bucket}/ds/manifest.sfm: .*(connect|Connection refused)"
                                     r".* \(after 2 attempts\)")

    def test_parts_under_5_mib_are_refused_for_aws_and_a_failed_part_is_named(self):
        # S3 itself refuses parts under 5 MiB (all but the last) only at CompleteMultipartUpload,
        # after every part went up; S3-compatible stores (an endpoint) may take them.
        env = {"AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_S3": ""}
        out = self.push(self.ds, "s3://bkt/ds", "--part-size", "1MiB", extra_env=env, check=1)
        self.assertIn("s3://bkt/ds: part size 1048576 bytes: S3 takes parts of at least 5 MiB",
                      out.stderr)
        bucket = self.new_bucket()
        part2 = lambda m, path: m == "PUT" and "partNumber=2&" in path  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"500": 1.0}, match=part2) as p:
            out = self.push(self.ds, f"s3://{bucket}/ds", *SMALL_PARTS, "--retries", "0",
                            endpoint=p.url, check=1)
        self.assertRegex(out.stderr, rf"PUT s3://{bucket}/ds/shard-000000.sfs \(part 2 of \d+, "
                                     r"bytes \d+-\d+\): HTTP 500")

    def test_a_signal_aborts_the_multipart_upload_under_way(self):
        # SIGINT killed push mid-upload: the store kept the multipart upload's parts (billed
        # until a lifecycle rule removed them). It now aborts it (DELETE ?uploadId=), puts no
        # manifest, and exits by the signal.
        import signal
        bucket = self.new_bucket()
        part = lambda m, path: m == "PUT" and "partNumber=" in path  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"delay": 1.0}, delay_s=0.5, match=part) as p:
            env = dict(os.environ, **self.s3.env())
            env.update(HOME=self.tmp, AWS_ENDPOINT_URL=p.url, AWS_ENDPOINT_URL_S3=p.url)
            env.pop("AWS_PROFILE", None)
            proc = subprocess.Popen([clitest.SHARDFEED, "push", self.ds, f"s3://{bucket}/ds", *SMALL_PARTS,
                                     "-q"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            deadline = time.monotonic() + 30
            while not any(part(m, q) for m, q, _ in p.log) and time.monotonic() < deadline:
                time.sleep(0.02)
            # Twice within a second, as a terminal's Ctrl-C reaches pack -o URL's packing
            # process once directly and once forwarded: one stop, not a kill.
            proc.send_signal(signal.SIGINT)
            time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            start = time.monotonic()
            _, err = proc.communicate(timeout=30)
            took = time.monotonic() - start
        self.assertEqual(proc.returncode, -signal.SIGINT, err)
        self.assertIn(f"stopped by signal {int(signal.SIGINT)}: push cancelled", err)
        self.assertLess(took, 5)
        methods = [(m, q) for m, q, _ in p.log]
        self.assertTrue(any(m == "DELETE" and "uploadId=" in q for m, q in methods), methods)
        self.assertFalse(any(q.endswith("/manifest.sfm") and m == "PUT" for m, q in methods))
        self.assertIsNone(self.s3.get_object(bucket, "ds/manifest.sfm"))
        # A signal the caller ignores (nohup, a background job) stays ignored: the push goes on.
        with servers.FaultProxy(self.s3.endpoint, {"delay": 1.0}, delay_s=0.2, match=part) as p:
            env.update(AWS_ENDPOINT_URL=p.url, AWS_ENDPOINT_URL_S3=p.url)
            proc = subprocess.Popen([clitest.SHARDFEED, "push", self.ds, f"s3://{bucket}/kept", *SMALL_PARTS,
                                     "-q"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
            deadline = time.monotonic() + 30
            while not any(part(m, q) for m, q, _ in p.log) and time.monotonic() < deadline:
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 0, err)
        self.assert_uploaded(bucket, "kept")

    def test_usage(self):
        out = self.push(self.ds, check=1)
        self.assertIn("needs DATASET_DIR and a URL", out.stderr)
        out = self.push(self.ds, "s3://b/ds", "--part-size", "1KiB", check=1)
        self.assertIn("part size", out.stderr)
        out = self.push(os.path.join(self.tmp, "nothing-here"), "s3://bkt/ds", check=1)
        self.assertIn("no manifest", out.stderr)


class HttpPushTest(unittest.TestCase):
    """push to a web server that takes PUT (nginx with dav_methods): each file in one PUT."""

    @classmethod
    def setUpClass(cls):
        servers.Nginx.command()
        probe = run("push", "/nonexistent", "http://127.0.0.1:1/x")
        if "built without libcurl" in probe.stderr:
            raise unittest.SkipTest("this shardfeed was built without libcurl")
        cls.tmp = scratch("push-http-")
        cls.ds = os.path.join(cls.tmp, "ds")
        write_samples(os.path.join(cls.tmp, "npy"), 100, shape=(3, 32, 32))
        run("pack", os.path.join(cls.tmp, "npy"), "-o", cls.ds, "--shard-size", "256KiB", "-q", check=0)
        cls.www = os.path.join(cls.tmp, "www")
        os.makedirs(cls.www)
        cls.nginx = servers.Nginx(cls.www, dav=True).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.nginx.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_same_files(self, remote_dir):
        self.assertEqual(dataset_files(remote_dir), dataset_files(self.ds))
        for f in dataset_files(self.ds):
            with open(os.path.join(self.ds, f), "rb") as a, open(os.path.join(remote_dir, f), "rb") as b:
                self.assertEqual(a.read(), b.read(), f)

    def test_put_with_500s_then_refused_then_overwritten(self):
        with servers.FaultProxy(self.nginx.url, {"500": 0.1}, seed=2) as p:
            run("push", self.ds, p.url + "/sets/one", "-q", check=0, timeout=120)
        self.assertGreater(p.counts["500"], 0)
        puts = [path for m, path, _ in p.log if m == "PUT"]
        self.assertEqual(puts[-1], "/sets/one/manifest.sfm")
        self.assert_same_files(os.path.join(self.www, "sets", "one"))
        out = run("push", self.ds, self.nginx.url + "/sets/one", check=1, timeout=120)
        self.assertIn("already there", out.stderr)
        run("push", self.ds, self.nginx.url + "/sets/one", "--overwrite", "-q", check=0, timeout=120)
        self.assert_same_files(os.path.join(self.www, "sets", "one"))

    def test_bytes_damaged_on_the_way_are_read_back_and_sent_again(self):
        # A web server checks no hash: push reads every object back after its PUT.
        with servers.FaultProxy(self.nginx.url, {"corrupt_request": 0.3}, seed=4) as p:
            run("push", self.ds, p.url + "/damaged/one", "-q", check=0, timeout=120)
        self.assertGreater(p.counts["corrupt_request"], 0, "nothing was damaged: the test proves nothing")
        self.assert_same_files(os.path.join(self.www, "damaged", "one"))
        # A shard damaged every time: no manifest goes up, and the error names the shard.
        shard_put = lambda m, path: m == "PUT" and path.endswith("/shard-000001.sfs")  # noqa: E731
        with servers.FaultProxy(self.nginx.url, {"corrupt_request": 1.0}, match=shard_put) as p:
            out = run("push", self.ds, p.url + "/damaged/two", "--retries", "1", check=1, timeout=120)
        self.assertEqual(p.counts["corrupt_request"], 2)
        self.assertIn(f"PUT {p.url}/damaged/two/shard-000001.sfs: the object the store kept differs", out.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.www, "damaged", "two", "manifest.sfm")))

    def test_password_never_shown(self):
        # README: a password in the URL is sent as basic authentication, never shown in messages.
        url = self.nginx.url.replace("http://", "http://alice:TOPSECRET@")
        shown = self.nginx.url.replace("http://", "http://alice:***@")
        outs = [run("push", self.ds, url + "/secret/one", check=0, timeout=120)]
        self.assertIn(f"pushed {self.ds} to {shown}/secret/one", outs[-1].stdout)
        self.assert_same_files(os.path.join(self.www, "secret", "one"))
        outs.append(run("push", self.ds, url + "/secret/one", check=1, timeout=120))  # refused
        self.assertIn("already there", outs[-1].stderr)
        src = os.path.join(self.tmp, "npy")
        outs.append(run("pack", src, "-o", url + "/secret/two", "--tmp-dir", self.tmp, check=0, timeout=120))
        self.assertIn(f"uploading it to {shown}/secret/two", outs[-1].stderr)
        outs.append(run("pack", src, "-o", url + "/secret/two", "--tmp-dir", self.tmp, check=1, timeout=120))
        outs.append(run("verify", url + "/secret/two", check=0, timeout=120))
        self.assertIn(f"OK {shown}/secret/two", outs[-1].stdout)
        outs.append(run("inspect", url + "/secret/two", check=0, timeout=120))
        # URLs that do not parse: a bad port, a fragment, a query, too long.
        for bad in ("http://alice:TOPSECRET@127.0.0.1:99999999/x", "http://alice:TOPSECRET@127.0.0.1:1/x#y",
                    "http://alice:TOPSECRET@127.0.0.1:1/x?y", "http://alice:TOPSECRET@h/" + "a" * 9000):
            outs.append(run("push", self.ds, bad, check=1, timeout=60))
            self.assertIn("http://alice:***@", outs[-1].stderr)
            outs.append(run("pack", src, "-o", bad, "--tmp-dir", self.tmp, "-q", check=1, timeout=60))
            outs.append(run("verify", bad, check=1, timeout=60))
        # An endpoint with a key:secret@ is refused without showing the secret.
        env = dict(os.environ, HOME=self.tmp, AWS_ENDPOINT_URL="http://AKIAEXAMPLE:TOPSECRET@127.0.0.1:9000")
        env.pop("AWS_PROFILE", None)
        outs.append(run("push", self.ds, "s3://bkt/x", check=1, env=env, timeout=60))
        self.assertIn("AKIAEXAMPLE:***@127.0.0.1:9000", outs[-1].stderr)
        outs.append(run("pack", src, "-o", "s3://bkt/x", "--tmp-dir", self.tmp, "-q", check=1, env=env,
                        timeout=60))
        for out in outs:
            self.assertNotIn("TOPSECRET", out.stdout + out.stderr, out.args)
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith("shardfeed-pack-")], [])

    def test_overwrite_with_fewer_shards(self):
        # A web server has no listing: old shards are deleted from the new count up to the
        # first that is not there.
        small = os.path.join(self.tmp, "small")
        write_samples(os.path.join(self.tmp, "small-npy"), 20, shape=(3, 32, 32), seed=1)
        run("pack", os.path.join(self.tmp, "small-npy"), "-o", small, "--shard-size", "256KiB", "-q", check=0)
        run("push", self.ds, self.nginx.url + "/fewer", "-q", check=0, timeout=120)
        with open(os.path.join(self.www, "fewer", "notes.txt"), "w") as f:
            f.write("kept")
        run("push", small, self.nginx.url + "/fewer", "-q", "--overwrite", check=0, timeout=120)
        self.assertEqual(sorted(os.listdir(os.path.join(self.www, "fewer"))),
                         sorted(dataset_files(small) + ["notes.txt"]))

    def test_server_without_put(self):
        plain = servers.Nginx(self.www, work=os.path.join(self.tmp, "plain.nginx"))
        with plain:
            out = run("push", self.ds, plain.url + "/ds", "--retries", "0", check=1, timeout=120)
        self.assertIn(f"PUT {plain.url}/ds/shard-000000.sfs: HTTP 405", out.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.www, "ds")))


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    if not result.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if result.testsRun and len(result.skipped) == result.testsRun else 0)
