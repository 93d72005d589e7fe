"""Remote reads through the fault proxy (servers.FaultProxy on 127.0.0.1): each fault kind at
15% of requests in both read modes, the epoch equal to the local one; a flipped byte always
caught; a store that keeps failing named with its status and message. Every test has a
deadline."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from readtest import RemoteCase, epoch, main  # noqa: E402

import shardfeed  # noqa: E402  (PYTHONPATH=build/python)


class Faults(RemoteCase):
    """Each fault kind at 15% of requests (a test per kind, below): the epoch completes with
    the local bytes in both modes (the transport retries; bytes damaged on the way fail their
    checksums and are fetched again)."""

    def check_fault(self, kind):
        ds, www = self.served(n=64, shard_size="4KiB")
        want = epoch(ds)
        with servers.Nginx(www) as ng:
            for mode in ("cache", "direct"):
                with servers.FaultProxy(ng.url, faults={kind: 0.15}, seed=7,
                                        delay_s=0.05) as proxy:
                    got = epoch(proxy.url + "/ds", remote_mode=mode,
                                cache_dir=self.cache(f"cache-{mode}"))
                    self.assertGreater(proxy.counts[kind], 0, f"{kind} {mode}: no fault")
                self.assertEqual(got, want, f"{kind} {mode}")

    def test_drop(self):
        self.check_fault("drop")

    def test_reset(self):
        self.check_fault("reset")

    def test_delay(self):
        self.check_fault("delay")

    def test_500(self):
        self.check_fault("500")

    def test_503(self):
        self.check_fault("503")

    def test_429(self):
        self.check_fault("429")

    def test_truncate(self):
        self.check_fault("truncate")

    def test_corrupt(self):
        self.check_fault("corrupt")

    def test_overlong(self):
        # Every byte of a range arrived, then the transfer ended short of its Content-Length:
        # the retry asked for a range starting past its end (nginx answered 200 with the
        # whole object, reported as "the server does not support Range").
        self.check_fault("overlong")

    def test_flipped_bytes_are_always_caught(self):
        """corrupt at 40%: whatever happens, no batch holds a byte the local dataset lacks."""
        ds, www = self.served(n=64, shard_size="4KiB")
        want = epoch(ds)
        with servers.Nginx(www) as ng:
            for mode in ("cache", "direct"):
                for seed in (1, 2):
                    with servers.FaultProxy(ng.url, faults={"corrupt": 0.4}, seed=seed) as proxy:
                        got = []
                        try:
                            with shardfeed.Loader(proxy.url + "/ds", batch_size=32,
                                                  shuffle="global", seed=5, output="numpy",
                                                  remote_mode=mode,
                                                  cache_dir=self.cache(f"c{mode}{seed}")) as L:
                                for b in L:
                                    got.append((b.ids.tolist(), b["img"].tobytes(),
                                                b["label"].tobytes()))
                        except shardfeed.Error as e:  # the documented failure, never wrong bytes
                            self.assertRegex(str(e), "checksum|manifest|header|index")
                        self.assertGreater(proxy.counts["corrupt"], 0)
                    self.assertEqual(got, want[:len(got)], f"{mode} seed {seed}")

    def test_runs_of_adjacent_records_in_mode_direct(self):
        """Dataset order fetches adjacent records as one range request (a run): far fewer
        requests than records, and with faults on 15% of them (a run that fails is fetched
        record by record, a record damaged in its run alone) the local epoch. The shuffles
        fetch record by record (block: the same bytes, one request per record)."""
        ds, www = self.served(n=240, shard_size="24KiB")
        with servers.Nginx(www) as ng:
            for shuffle in ("none", "block"):
                want = epoch(ds, shuffle=shuffle)
                with servers.FaultProxy(ng.url, faults={}) as proxy:
                    got = epoch(proxy.url + "/ds", shuffle=shuffle, remote_mode="direct",
                                cache_dir=self.cache(f"runs-{shuffle}"))
                    self.assertEqual(got, want, shuffle)
                    if shuffle == "none":
                        self.assertLess(proxy.requests, 240 // 4)
                    else:
                        self.assertGreaterEqual(proxy.requests, 240)
                for kind in ("corrupt", "truncate", "500"):
                    with servers.FaultProxy(ng.url, faults={kind: 0.15}, seed=3) as proxy:
                        got = epoch(proxy.url + "/ds", shuffle=shuffle, remote_mode="direct",
                                    cache_dir=self.cache(f"runs-{shuffle}-{kind}"))
                        self.assertGreater(proxy.counts[kind], 0, f"{shuffle} {kind}: no fault")
                    self.assertEqual(got, want, f"{shuffle} {kind}")
            # A global shuffle keeps one request per record (runs would serialise them).
            with servers.FaultProxy(ng.url, faults={}) as proxy:
                self.assertEqual(epoch(proxy.url + "/ds", remote_mode="direct",
                                       cache_dir=self.cache("runs-global")), epoch(ds))
                self.assertGreaterEqual(proxy.requests, 240)

    def test_downloads_damaged_in_different_places_are_never_kept(self):
        """Every download of a shard damaged, each at another byte: not "stored so" (the same
        number of damaged records each time is not the same damage), so nothing is published
        under the shard's name and the error says the downloads differ."""
        _, www = self.served(n=64, shard_size="4KiB")
        cache = self.cache()
        with servers.Nginx(www) as ng, servers.FaultProxy(ng.url) as proxy:
            with shardfeed.open(proxy.url + "/ds", cache_dir=cache) as ds:
                proxy.faults = {"corrupt_any": 1.0}  # after open: the downloads only
                with self.assertRaises(shardfeed.Error) as e:
                    ds[0]
            # The byte is drawn anew for every response, so the last download's damage may
            # fall in the shard's index or header, which is refused as such, also after 7 tries.
            self.assertRegex(str(e.exception), r"shard-000000\.sfs(: 7 downloads of the shard failed their "
                             r"record checksums, not alike| \(downloaded 7 times\): \w+ checksum mismatch)")
            shard0 = [k for m, path, k in proxy.log if path.endswith("/shard-000000.sfs")
                      and k == "corrupt_any"]
            self.assertGreaterEqual(len(shard0), 7)  # the prefetcher may have tried it too
        published = [f for _, _, fs in os.walk(cache) for f in fs if f.startswith("shard-")]
        self.assertEqual(published, [])

    def test_downloads_in_ranges_are_checked_as_they_arrive(self):
        """Shards of 1 MiB downloaded in 4 ranges at once (SHARDFEED_TEST_PART_MIN lowers the
        8 MiB a range needs): each range's records are checked as its bytes arrive and the
        records a range's edge cuts are read back. With the reader's own checks off, that
        download check is all that stands between a damaged byte and a batch: with bytes
        flipped, bodies cut short (a range resumes where it stopped) and connections reset,
        every epoch is the local one."""
        ds, www = self.served(n=2400, shard_size="1MiB")
        shards = [f for f in os.listdir(ds) if f.startswith("shard-")]
        self.assertGreaterEqual(min(os.path.getsize(os.path.join(ds, f)) for f in shards), 768 << 10)
        want = epoch(ds)
        old = os.environ.get("SHARDFEED_TEST_PART_MIN")
        os.environ["SHARDFEED_TEST_PART_MIN"] = str(128 << 10)
        try:
            with servers.Nginx(www) as ng:
                with servers.FaultProxy(ng.url, faults={}) as proxy:
                    self.assertEqual(epoch(proxy.url + "/ds", verify=False,
                                           cache_dir=self.cache("ranges")), want)
                    gets = [p for m, p, _ in proxy.log if m == "GET" and "/shard-" in p]
                    # open reads each shard's header and tail; a download takes 4 ranges
                    # divided by the downloads running (dataset_remote.c): more than one
                    self.assertGreater(len(gets), 3 * len(shards))
                for kind, seed in (("corrupt", 1), ("corrupt", 2), ("truncate", 3), ("reset", 4)):
                    with servers.FaultProxy(ng.url, faults={kind: 0.15}, seed=seed) as proxy:
                        got = epoch(proxy.url + "/ds", verify=False,
                                    cache_dir=self.cache(f"ranges-{kind}-{seed}"))
                        self.assertGreater(proxy.counts[kind], 0, f"{kind}: no fault")
                    self.assertEqual(got, want, f"{kind} seed {seed}")
        finally:
            if old is None:
                del os.environ["SHARDFEED_TEST_PART_MIN"]
            else:
                os.environ["SHARDFEED_TEST_PART_MIN"] = old

    def test_a_store_that_keeps_failing_is_named_with_its_status_and_message(self):
        _, www = self.served(n=64)
        with servers.Nginx(www) as ng:
            with servers.FaultProxy(ng.url, faults={"503": 1.0}) as proxy:
                t0 = time.monotonic()
                with self.assertRaises(shardfeed.Error) as e:
                    shardfeed.open(proxy.url + "/ds", cache_dir=self.cache())
                msg = str(e.exception)
                self.assertIn(proxy.url + "/ds/manifest.sfm", msg)
                self.assertIn("HTTP 503", msg)
                self.assertIn("7 attempts", msg)
                self.assertEqual(e.exception.code, shardfeed.E_REMOTE)
                self.assertLess(time.monotonic() - t0, 30)


class SilentServer(RemoteCase):
    def test_the_environment_shortens_the_wait_for_a_server_that_never_answers(self):
        # A server that takes the connection and sends nothing cost 7 attempts of 30 s, and
        # neither Python nor the command line could say otherwise: $SHARDFEED_REMOTE_TIMEOUT_MS
        # and $SHARDFEED_REMOTE_RETRIES do, where sf_remote_opts leaves them 0.
        import socket
        import subprocess
        from clitest import SHARDFEED
        with socket.socket() as listener:  # listens (the kernel completes connections), never reads
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            url = f"http://127.0.0.1:{listener.getsockname()[1]}/ds"
            env = dict(os.environ, SHARDFEED_REMOTE_TIMEOUT_MS="500", SHARDFEED_REMOTE_RETRIES="1")
            start = time.monotonic()
            r = subprocess.run([SHARDFEED, "inspect", url], capture_output=True, text=True,
                               env=env, timeout=60)
            took = time.monotonic() - start
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("(2 attempts)", r.stderr)
        self.assertLess(took, 20)
        for var, bad in (("SHARDFEED_REMOTE_TIMEOUT_MS", "30s"), ("SHARDFEED_REMOTE_RETRIES", "101")):
            with self.subTest(var=var):
                r = subprocess.run([SHARDFEED, "inspect", url], capture_output=True, text=True,
                                   env=dict(os.environ, **{var: bad}), timeout=60)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(f"${var}='{bad}'", r.stderr)

    @staticmethod
    def inspect_against(answer, env=None):
        """Runs `shardfeed inspect` on a URL of a raw server on 127.0.0.1 that answers each
        connection with answer(conn, stop) on a thread of its own (stop: an Event set once
        the command ended). (the URL, the CompletedProcess, seconds it took)."""
        import socket
        import subprocess
        import threading
        from clitest import SHARDFEED
        stop = threading.Event()

        def serve(listener):
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=answer, args=(conn, stop), daemon=True).start()

        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            threading.Thread(target=serve, args=(listener,), daemon=True).start()
            url = f"http://127.0.0.1:{listener.getsockname()[1]}/ds"
            start = time.monotonic()
            try:
                r = subprocess.run([SHARDFEED, "inspect", url], capture_output=True, text=True,
                                   env=env, timeout=60)
            finally:
                stop.set()
            return url, r, time.monotonic() - start

    @staticmethod
    def drip(length, chunk, every_s, sent=None):
        """An answer for inspect_against: a 200 announcing `length` bytes, then `chunk` every
        every_s seconds until the command ended (each send's count appended to `sent`)."""
        def answer(conn, stop):
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % length)
                    while not stop.wait(every_s):
                        n = conn.send(chunk)
                        if sent is not None:
                            sent.append(n)
                except OSError:
                    pass
        return answer

    def test_a_manifest_announced_past_the_largest_valid_one_is_refused_before_its_body(self):
        # A Content-Length of 1 TB was taken until 65 MB (the largest valid manifest) had
        # arrived; at 1 KiB/s, the floor, that held the open for most of a day.
        sent = []
        announce = self.drip(1000000000000, b"x" * 2048, 0.2, sent)
        url, r, took = self.inspect_against(announce)
        self.assertEqual(r.returncode, 2, r.stderr)  # not a dataset's manifest, as a local one
        self.assertIn(f"{url}/manifest.sfm: larger than any valid manifest", r.stderr)
        self.assertLess(took, 5)
        self.assertLessEqual(len(sent), 5)  # one attempt: not retried

    def test_a_range_cut_short_after_its_last_byte_still_has_its_size_checked(self):
        # A range whose every byte arrived before the transfer failed is taken as done
        # (test_overlong); the size check of the object ran only for a transfer that ended well,
        # so a server without ETags holding an object of another size slipped past it.
        ds, _ = self.served(n=64, shard_size="4KiB")

        def answer(conn, stop):
            with conn:
                try:
                    req = conn.recv(65536).decode("latin-1")
                    path = req.split(" ")[1]
                    with open(os.path.join(ds, path.rsplit("/", 1)[1]), "rb") as f:
                        data = f.read()
                    rng = [ln for ln in req.split("\r\n") if ln.lower().startswith("range:")]
                    if not rng:
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data)
                                     + data)
                        return
                    a, b = (int(x) for x in rng[0].split("=")[1].split("-"))
                    b = min(b, len(data) - 1)
                    # every byte asked for, under a Content-Length 5 longer; the object's size
                    # 1000 past the manifest's: a replaced object
                    conn.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\n"
                                 b"Content-Length: %d\r\n\r\n" % (a, b, len(data) + 1000, b - a + 6)
                                 + data[a:b + 1])
                except OSError:
                    pass

        env = dict(os.environ, SHARDFEED_REMOTE_RETRIES="1")
        url, r, _ = self.inspect_against(answer, env)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertRegex(r.stderr, rf"{url}/shard-000000.sfs: the store's object is \d+ bytes, "
                                   r"the manifest says \d+")

    def test_a_server_that_trickles_fails_the_attempt(self):
        # Two bytes a second kept one request alive as long as the server liked (the stall
        # rule was under 1 byte/s): the open of a manifest took 10 minutes. Under 1 KiB/s for
        # the whole timeout now fails the attempt.
        trickle = self.drip(100000, b"x", 0.5)
        env = dict(os.environ, SHARDFEED_REMOTE_TIMEOUT_MS="1000", SHARDFEED_REMOTE_RETRIES="1")
        url, r, took = self.inspect_against(trickle, env)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"{url}/manifest.sfm", r.stderr)
        self.assertIn("(2 attempts)", r.stderr)
        self.assertLess(took, 20)

    def test_a_process_out_of_descriptors_is_told_so_not_that_the_server_is_down(self):
        # libcurl reports a socket() that failed with EMFILE as "Couldn't connect to server": a
        # trainer under a low `ulimit -n` was sent to look at the network. The command starts
        # with all but `free` of its descriptors taken (inherited), for free = 1..6: wherever
        # it runs out (the cache folder's files, the manifest's connection, a shard's), the
        # error names the limit, and at least one of them is a connection's.
        import subprocess
        from clitest import SHARDFEED
        _, www = self.served(n=64)
        child = """
import os, resource, subprocess, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
fds = []
try:
    while True:
        fds.append(os.open(os.devnull, os.O_RDONLY))
        os.set_inheritable(fds[-1], True)
except OSError:
    pass
for fd in fds[len(fds) - int(sys.argv[1]):]:
    os.close(fd)
sys.exit(subprocess.run(sys.argv[2:], close_fds=False).returncode)
"""
        env = dict(os.environ, SHARDFEED_REMOTE_RETRIES="1")
        connects = 0
        with servers.Nginx(www) as ng:
            for free in range(1, 7):
                r = subprocess.run([sys.executable, "-c", child, str(free), SHARDFEED, "inspect",
                                    ng.url + "/ds", "--cache-dir", self.cache(f"cache-{free}")],
                                   capture_output=True, text=True, env=env, timeout=60)
                if r.returncode == 0:
                    continue
                with self.subTest(free=free):
                    self.assertEqual(r.returncode, 1, r.stderr)
                    self.assertIn("the limit on open files per process is 64", r.stderr)
                connects += "Couldn't connect" in r.stderr
        self.assertGreater(connects, 0, "no run ran out at a connection")

if __name__ == "__main__":
    main()
