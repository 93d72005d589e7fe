"""The test servers themselves (tests/remote/servers.py): each starts and
stops, nginx answers Range requests, every fault kind of the proxy happens
and is counted, and the signature check in front of s3rver accepts curl's
SigV4 signing (directly and through the proxy) and refuses a wrong secret.
Exits 77 (ctest: skipped) when every test was skipped for a missing server."""

import hashlib
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402

TMP = os.environ.get("SF_TEST_TMP") or tempfile.gettempdir()
CURL_SIGV4 = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "S3RVER:S3RVER",
              "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]


def scratch(name):
    os.makedirs(TMP, exist_ok=True)
    return tempfile.mkdtemp(prefix=name + "-", dir=TMP)


def port_open(url):
    host, port = url.split("//")[1].split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def curl(*args):
    if not shutil.which("curl"):
        raise unittest.SkipTest("curl is not installed: run tools/install-deps.sh remote")
    r = subprocess.run(["curl", "-sS", "--max-time", "30", "-w", "\n%{http_code}", *args],
                       capture_output=True, timeout=60)
    body, _, code = r.stdout.rpartition(b"\n")
    return int(code or 0), body


class NginxTest(unittest.TestCase):
    def setUp(self):
        self.root = scratch("nginx")
        self.data = os.urandom(100_000)
        os.makedirs(os.path.join(self.root, "ds"))
        with open(os.path.join(self.root, "ds", "shard-000000.sfs"), "wb") as f:
            f.write(self.data)

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.root + ".nginx", ignore_errors=True)

    def test_range_and_stop(self):
        with servers.Nginx(self.root) as ng:
            url = ng.url + "/ds/shard-000000.sfs"
            self.assertTrue(url.startswith("http://127.0.0.1:"))
            status, headers, body = servers.http_request("GET", url, headers={"Range": "bytes=1000-1999"})
            self.assertEqual(status, 206)
            self.assertEqual(body, self.data[1000:2000])
            self.assertEqual(headers["content-range"], f"bytes 1000-1999/{len(self.data)}")
            status, _, body = servers.http_request("GET", url)
            self.assertEqual((status, body), (200, self.data))
            status, _, _ = servers.http_request("GET", ng.url + "/ds/missing")
            self.assertEqual(status, 404)
        self.assertFalse(port_open(ng.url), "nginx still listens after the context ended")

    def test_a_port_another_server_took_first_is_not_taken_for_nginx(self):
        # free_port's port, taken by another listener before nginx binds it: nginx retries its
        # bind, alive, while the connect check reached the other one, and a CI run's test read
        # another test's files through it (404). Here the first port offered is already taken.
        other = socket.socket()
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        offered = [taken]
        real = servers.free_port
        servers.free_port = lambda: offered.pop() if offered else real()
        try:
            with servers.Nginx(self.root) as ng:
                self.assertNotEqual(ng.url, f"http://127.0.0.1:{taken}")
                status, _, body = servers.http_request("GET", ng.url + "/ds/shard-000000.sfs")
                self.assertEqual((status, body), (200, self.data))
        finally:
            servers.free_port = real
            other.close()
        self.assertEqual(offered, [], "the taken port was never offered")


class FaultProxyTest(unittest.TestCase):
    """Every kind at probability 1 on a GET of a 100 kB file from nginx."""

    @classmethod
    def setUpClass(cls):
        cls.root = scratch("proxy")
        cls.data = os.urandom(100_000)
        with open(os.path.join(cls.root, "f.bin"), "wb") as f:
            f.write(cls.data)
        cls.nginx = servers.Nginx(cls.root).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.nginx.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.root + ".nginx", ignore_errors=True)

    def get(self, proxy, headers=None):
        return servers.http_request("GET", proxy.url + "/f.bin", headers=headers, timeout=10)

    def test_no_faults_forwards_unchanged(self):
        with servers.FaultProxy(self.nginx.url) as p:
            self.assertEqual(self.get(p)[::2], (200, self.data))
            status, _, body = self.get(p, {"Range": "bytes=10-19"})
            self.assertEqual((status, body), (206, self.data[10:20]))
            self.assertEqual(p.requests, 2)
            self.assertEqual(sum(p.counts.values()), 0)
        self.assertFalse(port_open(p.url))

    def test_statuses(self):
        for kind in ("500", "503", "429"):
            with servers.FaultProxy(self.nginx.url, {kind: 1.0}) as p:
                status, _, body = self.get(p)
                self.assertEqual(status, int(kind))
                self.assertIn(b"<Code>", body)
                self.assertEqual(p.counts[kind], 1)

    def test_drop(self):
        with servers.FaultProxy(self.nginx.url, {"drop": 1.0}) as p:
            with self.assertRaises(http.client.RemoteDisconnected):
                self.get(p)
            self.assertEqual(p.counts["drop"], 1)

    def test_reset(self):
        with servers.FaultProxy(self.nginx.url, {"reset": 1.0}) as p:
            with self.assertRaises((ConnectionResetError, http.client.IncompleteRead)):
                self.get(p)
            self.assertEqual(p.counts["reset"], 1)
            # curl sees the reset for what it is (error 56: failure receiving).
            code = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null", p.url + "/f.bin"],
                                  capture_output=True).returncode if shutil.which("curl") else 56
            self.assertIn(code, (18, 56))

    def test_truncate(self):
        with servers.FaultProxy(self.nginx.url, {"truncate": 1.0}) as p:
            with self.assertRaises(http.client.IncompleteRead) as cm:
                self.get(p)
            self.assertEqual(cm.exception.partial, self.data[:len(self.data) // 2])
            self.assertEqual(p.counts["truncate"], 1)

    def test_corrupt(self):
        with servers.FaultProxy(self.nginx.url, {"corrupt": 1.0}) as p:
            status, _, body = self.get(p)
            self.assertEqual(status, 200)
            self.assertEqual(len(body), len(self.data))
            diff = [i for i in range(len(body)) if body[i] != self.data[i]]
            self.assertEqual(len(diff), 1)
            self.assertEqual(p.counts["corrupt"], 1)

    def test_delay(self):
        with servers.FaultProxy(self.nginx.url, {"delay": 1.0}, delay_s=0.01) as p:
            self.assertEqual(self.get(p)[::2], (200, self.data))
            self.assertEqual(p.counts["delay"], 1)

    def test_mix_is_seeded_and_counted(self):
        faults = {"500": 0.1, "503": 0.1, "corrupt": 0.1}
        seen = []
        for _ in range(2):
            with servers.FaultProxy(self.nginx.url, faults, seed=7) as p:
                statuses = [self.get(p, {"Range": "bytes=0-99"})[0] for _ in range(100)]
                self.assertEqual(p.counts["500"], statuses.count(500))
                self.assertEqual(p.counts["503"], statuses.count(503))
                self.assertEqual(statuses.count(206), 100 - p.counts["500"] - p.counts["503"])
                self.assertTrue(all(0 < p.counts[k] < 30 for k in faults), p.counts)
                seen.append(dict(p.counts))
        self.assertEqual(seen[0], seen[1], "the same seed injects the same faults")

    def test_rejects_bad_arguments(self):
        with self.assertRaises(ValueError):
            servers.FaultProxy(self.nginx.url, {"flood": 0.5})
        with self.assertRaises(ValueError):
            servers.FaultProxy(self.nginx.url, {"500": 0.7, "503": 0.7})
        with self.assertRaises(ValueError):
            servers.FaultProxy("http://192.0.2.1:80", {}).__enter__()


class S3ServerTest(unittest.TestCase):
    def setUp(self):
        self.root = scratch("s3")
        self.file = os.path.join(self.root, "payload.bin")
        self.data = os.urandom(50_000)
        with open(self.file, "wb") as f:
            f.write(self.data)

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def test_sigv4_put_get_directly_and_through_the_proxy(self):
        with servers.S3Server(self.root) as s3:
            self.assertTrue(s3.endpoint.startswith("http://127.0.0.1:"))
            env = s3.env()
            self.assertEqual(env["AWS_ENDPOINT_URL"], s3.endpoint)
            s3.create_bucket("bkt")
            status, _ = curl(*CURL_SIGV4, "-T", self.file, s3.endpoint + "/bkt/a/b%20c.bin")
            self.assertEqual(status, 200)
            status, body = curl(*CURL_SIGV4, s3.endpoint + "/bkt/a/b%20c.bin")
            self.assertEqual((status, body), (200, self.data))
            self.assertEqual(s3.get_object("bkt", "a/b c.bin"), self.data)
            self.assertEqual(s3.list_keys("bkt", "a/"), ["a/b c.bin"])
            # The check is real: a wrong secret is refused.
            wrong = list(CURL_SIGV4)
            wrong[wrong.index("S3RVER:S3RVER")] = "S3RVER:wrong"
            status, body = curl(*wrong, s3.endpoint + "/bkt/a/b%20c.bin")
            self.assertEqual(status, 403)
            self.assertIn(b"SignatureDoesNotMatch", body)
            # Signed for the proxy's host, checked behind it: Host passes through.
            with servers.FaultProxy(s3.endpoint) as p:
                status, body = curl(*CURL_SIGV4, p.url + "/bkt/a/b%20c.bin")
                self.assertEqual((status, body), (200, self.data))
                status, _ = curl(*CURL_SIGV4, "-T", self.file, p.url + "/bkt/via-proxy")
                self.assertEqual(status, 200)
                # As a forward proxy: the request names the upstream URL.
                status, body = curl(*CURL_SIGV4, "--proxy", p.url, s3.endpoint + "/bkt/via-proxy")
                self.assertEqual((status, body), (200, self.data))
        self.assertFalse(port_open(s3.endpoint))
        self.assertFalse(port_open(s3.s3rver_url), "s3rver still listens after the context ended")

    def test_an_upload_damaged_on_the_way(self):
        # corrupt_request flips one byte of the body: a body signed with its SHA-256 is
        # refused as S3 refuses it; an UNSIGNED-PAYLOAD one is stored damaged.
        signed = list(CURL_SIGV4)
        signed[-1] = "x-amz-content-sha256: " + hashlib.sha256(self.data).hexdigest()
        with servers.S3Server(self.root) as s3:
            s3.create_bucket("bkt")
            with servers.FaultProxy(s3.endpoint, {"corrupt_request": 1.0}) as p:
                status, body = curl(*signed, "-T", self.file, p.url + "/bkt/signed")
                self.assertEqual(status, 400)
                self.assertIn(b"<Code>XAmzContentSHA256Mismatch</Code>", body)
                self.assertIsNone(s3.get_object("bkt", "signed"))
                status, _ = curl(*CURL_SIGV4, "-T", self.file, p.url + "/bkt/unsigned")
                self.assertEqual(status, 200)
                self.assertEqual(p.counts["corrupt_request"], 2)
            kept = s3.get_object("bkt", "unsigned")
            self.assertEqual(len(kept), len(self.data))
            self.assertEqual(sum(a != b for a, b in zip(kept, self.data)), 1)
            status, _ = curl(*signed, "-T", self.file, s3.endpoint + "/bkt/signed")
            self.assertEqual(status, 200, "the same signed upload, undamaged, is taken")


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    if not result.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if result.testsRun and len(result.skipped) == result.testsRun else 0)
