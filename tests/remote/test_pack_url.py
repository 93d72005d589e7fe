"""`shardfeed pack -o s3://...` (pack into a temporary folder, upload it as push does, remove the
folder), against the local S3 server of servers.py (127.0.0.1):
the uploaded dataset verifies and reads the same epoch as a local pack of the same input; a failed
or interrupted upload leaves no manifest and no temporary folder and names the URL; the library's
pack and merge refuse a URL instead of making a local folder "s3:".

  SHARDFEED=build/shardfeed PYTHONPATH=build/python /usr/bin/python3 tests/remote/test_pack_url.py -v
"""
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import RemoteCase, epoch, main, run, scratch, write_samples  # noqa: E402

import clitest  # noqa: E402


class PackToUrl(RemoteCase):
    @classmethod
    def setUpClass(cls):
        servers.S3Server.command()  # SkipTest when s3rver is missing
        if "built without libcurl" in run("push", "/nonexistent", "s3://bucket/x").stderr:
            raise unittest.SkipTest("this shardfeed was built without libcurl")
        cls.s3_root = scratch("pack-url-s3")
        cls.s3 = servers.S3Server(cls.s3_root).__enter__()  # one server for the class: it takes seconds
        cls.bucket_n = 0

    @classmethod
    def tearDownClass(cls):
        cls.s3.stop()
        shutil.rmtree(cls.s3_root, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.src = os.path.join(self.root, "src")
        write_samples(self.src, 200, seed=3)
        self.tmp_parent = os.path.join(self.root, "tmp")  # --tmp-dir: where the temporary folder goes
        os.makedirs(self.tmp_parent)
        type(self).bucket_n += 1
        self.bkt = f"bkt{self.bucket_n}"
        self.s3.create_bucket(self.bkt)
        self.env = dict(os.environ, **self.s3.env(), HOME=self.root,
                        SHARDFEED_CACHE_DIR=self.cache("cli-cache"))
        self.env.pop("AWS_PROFILE", None)

    def pack(self, url, *args, check=None, env=None):
        return run("pack", self.src, "-o", url, "--shard-size", "16KiB", "--align", "64",
                   "--tmp-dir", self.tmp_parent, *args, env=env or self.env, check=check, timeout=60)

    def assert_no_temporary_folder(self):
        self.assertEqual(os.listdir(self.tmp_parent), [], "the temporary folder was left behind")

    def test_pack_to_s3_then_verify_and_read(self):
        out = self.pack(f"s3://{self.bkt}/sets/train", check=0)
        self.assertIn(f"packing into the temporary folder {self.tmp_parent}/shardfeed-pack-", out.stderr)
        self.assertIn("pushed", out.stdout)
        self.assert_no_temporary_folder()
        keys = self.s3.list_keys(self.bkt, "sets/train/")
        self.assertIn("sets/train/manifest.sfm", keys)
        self.assertGreater(len(keys), 3)
        r = run("verify", f"s3://{self.bkt}/sets/train", env=self.env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        local = os.path.join(self.root, "local")
        run("pack", self.src, "-o", local, "--shard-size", "16KiB", "--align", "64", "-q", check=0)
        saved = dict(os.environ)
        os.environ.update(self.s3.env())
        try:
            self.assertEqual(epoch(f"s3://{self.bkt}/sets/train", cache_dir=self.cache()), epoch(local))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        # A dataset is there now: refused before packing (it was after), --force replaces it.
        out = self.pack(f"s3://{self.bkt}/sets/train", "-q", check=1)
        self.assertIn(f"s3://{self.bkt}/sets/train: a dataset is already there", out.stderr)
        self.assertIn("pack --force", out.stderr)
        self.assertIn("nothing was packed", out.stderr)
        self.assertNotIn("packing into the temporary folder", out.stderr)
        self.assert_no_temporary_folder()
        self.pack(f"s3://{self.bkt}/sets/train", "-q", "--force", check=0)
        self.assertEqual(run("verify", f"s3://{self.bkt}/sets/train", env=self.env).returncode, 0)

    def test_failed_upload_leaves_no_manifest_and_no_temporary_folder(self):
        # A bucket that does not exist is found before packing (it was by the first shard's PUT).
        out = self.pack("s3://no-such-bucket/ds", check=1)
        self.assertIn("GET s3://no-such-bucket/ds/manifest.sfm: HTTP 404 NoSuchBucket", out.stderr)
        self.assertIn("nothing was packed", out.stderr)
        self.assertNotIn("packing into the temporary folder", out.stderr)
        self.assert_no_temporary_folder()
        # A shard the store refuses: no manifest, and the last line says so.
        shard_put = lambda m, path: m == "PUT" and path.endswith(".sfs")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"500": 1.0}, match=shard_put) as p:
            env = dict(self.env, AWS_ENDPOINT_URL=p.url, AWS_ENDPOINT_URL_S3=p.url)
            out = self.pack(f"s3://{self.bkt}/refused", "--retries", "0", "-q", env=env, check=1)
        self.assertIn(f"s3://{self.bkt}/refused/shard-000000.sfs: HTTP 500", out.stderr)
        self.assertIn("failed before the manifest was uploaded: this run put no manifest at "
                      f"s3://{self.bkt}/refused", out.stderr)
        self.assertIsNone(self.s3.get_object(self.bkt, "refused/manifest.sfm"))
        self.assert_no_temporary_folder()
        # The packing itself fails: nothing was uploaded.
        out = run("pack", os.path.join(self.root, "missing-input"), "-o", f"s3://{self.bkt}/none", "--tmp-dir",
                  self.tmp_parent, env=self.env, check=1, timeout=60)
        self.assertIn(f"failed before the upload: nothing was uploaded to s3://{self.bkt}/none", out.stderr)
        self.assertEqual(self.s3.list_keys(self.bkt, "none/"), [])
        self.assert_no_temporary_folder()
        # The store failing every PUT of the manifest beyond the retries: shards are up, no manifest.
        manifest_put = lambda m, path: m == "PUT" and path.endswith("/manifest.sfm")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"500": 1.0}, match=manifest_put) as p:
            env = dict(self.env, AWS_ENDPOINT_URL=p.url, AWS_ENDPOINT_URL_S3=p.url)
            out = self.pack(f"s3://{self.bkt}/ds", "--retries", "2", env=env, check=1)
        self.assertEqual(p.counts["500"], 3)
        self.assertIn(f"s3://{self.bkt}/ds/manifest.sfm", out.stderr)
        self.assertIn(f"failed while the manifest was being uploaded: s3://{self.bkt}/ds may or may not hold it "
                      f"(run 'shardfeed verify s3://{self.bkt}/ds'", out.stderr)
        self.assertIsNone(self.s3.get_object(self.bkt, "ds/manifest.sfm"))
        self.assertTrue(self.s3.list_keys(self.bkt, "ds/"), "the shards went up first")
        self.assert_no_temporary_folder()
        # The manifest's PUT stored but its answer lost, and the DELETE after it failing: it is there,
        # and pack does not say it is not.
        put = lambda m, path: m == "PUT" and path.endswith("/manifest.sfm")  # noqa: E731
        dele = lambda m, path: m == "DELETE" and path.endswith("/manifest.sfm")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"500": 1.0}, match=dele) as p2, \
                servers.FaultProxy(p2.url, {"reset": 1.0}, match=put) as p1:
            env = dict(self.env, AWS_ENDPOINT_URL=p1.url, AWS_ENDPOINT_URL_S3=p1.url)
            out = self.pack(f"s3://{self.bkt}/kept", "--retries", "1", "-q", env=env, check=1)
        self.assertIn(f"s3://{self.bkt}/kept may or may not hold it", out.stderr)
        self.assertNotIn("nothing was uploaded", out.stderr)
        self.assertNotIn("no manifest", out.stderr)
        self.assertIsNotNone(self.s3.get_object(self.bkt, "kept/manifest.sfm"))
        self.assertEqual(run("verify", f"s3://{self.bkt}/kept", env=self.env).returncode, 0)
        self.assert_no_temporary_folder()

    def test_interrupted_upload_removes_the_temporary_folder(self):
        # Every shard PUT held 1 s at the proxy: the signal arrives during the upload. SIGQUIT
        # (the quit key) left the temporary folder behind: it was not forwarded.
        import resource
        shard_put = lambda m, path: m == "PUT" and path.endswith(".sfs")  # noqa: E731
        for sig in (signal.SIGTERM, signal.SIGQUIT):
            with self.subTest(sig=sig.name), \
                    servers.FaultProxy(self.s3.endpoint, {"delay": 1.0}, delay_s=1.0, match=shard_put) as p:
                env = dict(self.env, AWS_ENDPOINT_URL=p.url, AWS_ENDPOINT_URL_S3=p.url)
                proc = subprocess.Popen([clitest.SHARDFEED, "pack", self.src, "-o", f"s3://{self.bkt}/cut",
                                         "--shard-size", "16KiB", "--tmp-dir", self.tmp_parent], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
                deadline = time.monotonic() + 20
                puts = lambda: [q for m, q, _ in p.log if m == "PUT"]  # noqa: E731 (GET: the check before packing)
                while not puts() and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertTrue(puts(), "the upload never started")
                self.assertEqual(len(os.listdir(self.tmp_parent)), 1, "packing in the temporary folder")
                proc.send_signal(sig)
                _, err = proc.communicate(timeout=20)
                self.assertEqual(proc.returncode, -sig, err)
                self.assertIn(f"stopped by signal {int(sig)} before the manifest was uploaded: this run put no "
                              f"manifest at s3://{self.bkt}/cut", err)
                self.assert_no_temporary_folder()
                self.assertIsNone(self.s3.get_object(self.bkt, "cut/manifest.sfm"))

    def test_interrupted_manifest_upload_is_not_called_missing(self):
        # SIGTERM while the manifest's PUT is held at the proxy (its body sent, the answer pending):
        # the store may have kept it, and pack said "may or may not hold it". The manifest's PUT
        # is now not cut short: it finishes, and pack says the URL holds the dataset, then exits
        # by the signal.
        man = lambda m, path: m == "PUT" and path.endswith("/manifest.sfm")  # noqa: E731
        with servers.FaultProxy(self.s3.endpoint, {"delay": 1.0}, delay_s=2.0, match=man) as p:
            env = dict(self.env, AWS_ENDPOINT_URL=p.url, AWS_ENDPOINT_URL_S3=p.url)
            proc = subprocess.Popen([clitest.SHARDFEED, "pack", self.src, "-o", f"s3://{self.bkt}/late",
                                     "--shard-size", "16KiB", "--tmp-dir", self.tmp_parent], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60
            while not any(man(m, path) for m, path, _ in p.log) and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertTrue(any(man(m, path) for m, path, _ in p.log), "the manifest's PUT never came")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, -signal.SIGTERM, err)
        self.assertIn(f"stopped by signal {int(signal.SIGTERM)} after the upload finished: "
                      f"s3://{self.bkt}/late holds the dataset", err)
        self.assertNotIn("no manifest", err)
        self.assert_no_temporary_folder()
        self.assertEqual(run("verify", f"s3://{self.bkt}/late", env=self.env).returncode, 0)

    def test_pack_to_a_web_server_taking_put(self):
        # As push: an http(s):// URL of a server taking PUT (nginx's WebDAV), every file in one PUT.
        www = os.path.join(self.root, "www")
        os.makedirs(www)
        with servers.Nginx(www, dav=True) as nginx:
            self.pack(nginx.url + "/sets/ds", "-q", check=0)
            self.assertEqual(run("verify", nginx.url + "/sets/ds", env=self.env).returncode, 0)
        local = os.path.join(self.root, "local")
        run("pack", self.src, "-o", local, "--shard-size", "16KiB", "--align", "64", "-q", check=0)
        names = sorted(os.listdir(local))
        self.assertEqual(sorted(os.listdir(os.path.join(www, "sets", "ds"))), names)
        for name in names:  # the same files and sizes as a local pack (verify above checked the bytes)
            self.assertEqual(os.path.getsize(os.path.join(local, name)),
                             os.path.getsize(os.path.join(www, "sets", "ds", name)), name)
        self.assert_no_temporary_folder()

    def test_usage(self):
        out = self.pack(f"s3://{self.bkt}/p%k", "--part", "0/2", check=1)
        self.assertIn("parts are merged from folders", out.stderr)
        out = run("pack", self.src, "-o", os.path.join(self.root, "x"), "--tmp-dir", "/tmp", check=1)
        self.assertIn("--tmp-dir is for -o URL", out.stderr)
        out = run("pack", self.src, "-o", os.path.join(self.root, "x"), "--retries", "1", check=1)
        self.assertIn("--retries is for -o URL", out.stderr)
        out = self.pack(f"s3://{self.bkt}/ds", "--tmp-dir", os.path.join(self.root, "missing"), check=1)
        self.assertIn("cannot make a temporary folder", out.stderr)

    def test_library_pack_and_merge_refuse_a_url(self):
        # They wrote a local folder named "s3:" (cwd/s3:/bkt/ds) before.
        parts = [os.path.join(self.root, f"part{k}") for k in (0, 1)]
        for k, part in enumerate(parts):
            run("pack", self.src, "-o", part, "--part", f"{k}/2", "--shard-size", "16KiB", "-q", check=0)
        out = run("merge", *parts, "-o", f"s3://{self.bkt}/merged", cwd=self.root, env=self.env, check=1)
        self.assertIn(f"s3://{self.bkt}/merged: a URL: merge writes a local folder", out.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.root, "s3:")))


if __name__ == "__main__":
    main()
