"""Local test servers for remote datasets, on loopback only (issue 18).

    S3Server(root)        s3rver (npm) storing under `root`, behind a small front
                          that checks every request's AWS Signature V4 (s3rver
                          itself accepts any signature: it only parses them)
    Nginx(root)           Debian's nginx serving the folder `root`, with Range
    FaultProxy(url, faults={kind: p}, seed=0)
                          forwards to `url`, injecting faults at random

Each is a context manager that binds 127.0.0.1 on a free port, is stopped on
exit (also when the test fails: the servers' processes are also killed when
the test process dies, PR_SET_PDEATHSIG) and waits for nothing without a
deadline. A server that is not installed raises unittest.SkipTest saying what
to install (tools/install-deps.sh remote).

Signatures through the proxy: a client addresses the proxy (its .url as the
endpoint, AWS_ENDPOINT_URL) and signs for the Host it sends, the proxy's
127.0.0.1:PORT. The proxy forwards the Host header unchanged, and the
signature check in front of s3rver verifies against the Host it receives, so
a signature made for the proxy still verifies; rewriting Host to the
upstream's would break every signature. A client may also use the proxy as a
forward proxy (curl --proxy, CURLOPT_PROXY): the request line then has the
absolute upstream URL and Host is already the upstream's; the proxy forwards
the path. s3rver addresses buckets path-style for a numeric host either way.

Every file here runs under Debian's /usr/bin/python3 with the standard library
only.
"""

import atexit
import ctypes
import datetime
import hashlib
import hmac
import http.client
import http.server
import os
import random
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import threading
import time
import unittest
import urllib.parse
import xml.etree.ElementTree as ET

LOOPBACK = "127.0.0.1"
START_DEADLINE_S = 20.0  # node starts s3rver in about a second; a loaded CI machine takes longer
STOP_DEADLINE_S = 5.0
S3RVER_PREFIX = os.environ.get("SF_S3RVER_PREFIX", "/usr/local/lib/shardfeed-test/s3rver")
S3RVER_KEY = "S3RVER"  # s3rver's built-in account: key id and secret are both S3RVER
S3_REGION = "us-east-1"
FAULT_KINDS = ("drop", "reset", "delay", "500", "503", "429", "403", "truncate", "corrupt", "corrupt_any",
               "corrupt_request", "overlong")

_live = []  # servers to stop if the interpreter exits with one still running


@atexit.register
def _stop_all():
    for s in list(_live):
        s.stop()


def free_port():
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child before exec: SIGKILL when the test process dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _listening_is_ours(port, pgid):
    """Whether the socket listening on 127.0.0.1:port (or *:port) belongs to a process of
    process group `pgid` (Linux /proc; True where /proc cannot tell). free_port's port can
    be taken by another test's server (a FaultProxy binds port 0) before ours binds it: nginx
    then retries its bind for a few seconds, alive, while the connect check reached the other
    server, and a test read another test's files through it (HTTP 404, 2026-12-05 CI)."""
    try:
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            if not os.path.exists(table):
                continue
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    addr, hexport = fields[1].rsplit(":", 1)
                    if int(hexport, 16) == port and fields[3] == "0A":  # LISTEN
                        inodes.add(f"socket:[{fields[9]}]")
        if not inodes:
            return False
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
                if int(stat[stat.rindex(")") + 2:].split()[2]) != pgid:
                    continue
                fds = f"/proc/{pid}/fd"
                if any(os.readlink(os.path.join(fds, fd)) in inodes for fd in os.listdir(fds)):
                    return True
            except (OSError, ValueError, IndexError):
                continue
        return False
    except OSError:
        return True


def _wait_listening(port, proc, name, log_path, deadline_s=START_DEADLINE_S):
    """Returns when `proc` (which leads its own process group) listens on `port`; raises
    RuntimeError when it exits, does not listen in time, or another process has the port
    (the callers then try another port)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} before listening: {_tail(log_path)}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                pass
        except OSError:
            time.sleep(0.05)
            continue
        if _listening_is_ours(port, proc.pid):
            return
        raise RuntimeError(f"{name}: another process took {LOOPBACK}:{port} first")
    raise RuntimeError(f"{name} not listening on {LOOPBACK}:{port} after {deadline_s:.0f} s: {_tail(log_path)}")


def _tail(path, n=2000):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode("utf-8", "replace").strip() or "(empty log)"
    except OSError:
        return "(no log)"


class _Process:
    """A server process in its own session, stopped with its children."""

    def __init__(self, argv, log_path, name):
        self.name = name
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        _live.append(self)

    def stop(self):
        if self in _live:
            _live.remove(self)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=STOP_DEADLINE_S)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=STOP_DEADLINE_S)
        self.log.close()


# ---- AWS Signature V4 (the checker in front of s3rver, and create_bucket) ----

def _sigv4_key(secret, date, region, service):
    k = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def _canonical_query(query):
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    enc = [(urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~")) for k, v in pairs]
    return "&".join(f"{k}={v}" for k, v in sorted(enc))


def _canonical_request(method, raw_path, headers, signed, payload_hash):
    path, _, query = raw_path.partition("?")
    lines = [method, path, _canonical_query(query)]
    for name in signed:
        value = " ".join((headers.get(name) or "").split())
        lines.append(f"{name}:{value}")
    return "\n".join(lines) + "\n\n" + ";".join(signed) + "\n" + payload_hash


def sigv4_problem(method, raw_path, headers, body, secrets):
    """None when the request's SigV4 Authorization verifies (or it has none:
    anonymous), else (http status, S3 error code, message). `headers` maps
    lowercase names to values; `secrets` maps key ids to secrets."""
    auth = headers.get("authorization")
    if not auth:
        return None
    try:
        algo, rest = auth.split(" ", 1)
        fields = dict(p.strip().split("=", 1) for p in rest.split(","))
        key_id, date, region, service, term = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        given = fields["Signature"]
    except (ValueError, KeyError):
        return 400, "AuthorizationHeaderMalformed", "The authorization header is malformed"
    if algo != "AWS4-HMAC-SHA256" or term != "aws4_request":
        return 400, "AuthorizationHeaderMalformed", f"Unsupported algorithm {algo}"
    if key_id not in secrets:
        return 403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
    if "host" not in signed:
        return 400, "AuthorizationHeaderMalformed", "host is not among the signed headers"
    payload_hash = headers.get("x-amz-content-sha256")
    if not payload_hash:
        return 400, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
    if payload_hash != "UNSIGNED-PAYLOAD" and payload_hash != hashlib.sha256(body).hexdigest():
        return 400, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match"
    amz_date = headers.get("x-amz-date", "")
    canonical = _canonical_request(method, raw_path, headers, signed, payload_hash)
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    want = hmac.new(_sigv4_key(secrets[key_id], date, region, service), to_sign.encode(),
                    hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, given):
        return 403, "SignatureDoesNotMatch", ("The request signature we calculated does not match the "
                                              "signature you provided. Check your key and signing method.")
    return None


def sigv4_headers(method, url, body=b"", key=S3RVER_KEY, secret=S3RVER_KEY, region=S3_REGION):
    """Headers that sign a request to `url` (a test's own S3 calls)."""
    u = urllib.parse.urlsplit(url)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": u.netloc, "x-amz-date": amz_date,
               "x-amz-content-sha256": hashlib.sha256(body).hexdigest()}
    signed = sorted(headers)
    raw_path = (u.path or "/") + ("?" + u.query if u.query else "")
    canonical = _canonical_request(method, raw_path, headers, signed, headers["x-amz-content-sha256"])
    scope = f"{date}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    sig = hmac.new(_sigv4_key(secret, date, region, "s3"), to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key}/{scope}, "
                                f"SignedHeaders={';'.join(signed)}, Signature={sig}")
    return headers


def http_request(method, url, body=b"", headers=None, timeout=30):
    """(status, headers as a dict of lowercase names, body) of one request."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def s3_error_body(code, message):
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>").encode()


# ---- The forwarding core (FaultProxy and the signature check) ----------------

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-connection", "proxy-authorization"}


class _Forwarder:
    """A threaded HTTP/1.1 server on 127.0.0.1 that reads each request whole,
    asks `decide(method, raw_path, headers, body)` what to do, and forwards it
    to `upstream` unless told otherwise. decide returns None (forward as is),
    ("respond", status, code, message) or ("fault", kind). `done()`, when
    given, is called when a request that decide saw is answered."""

    def __init__(self, upstream, decide, delay_s=0.0, done=None):
        u = urllib.parse.urlsplit(upstream)
        if u.hostname != LOOPBACK and u.hostname != "localhost":
            raise ValueError(f"{upstream}: the test servers reach loopback only")
        self.upstream_host, self.upstream_port = LOOPBACK, u.port or 80
        self.decide = decide
        self.done = done
        self.delay_s = delay_s
        self._pick = random.Random(0)  # corrupt_any's and corrupt_request's positions
        forwarder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30  # an idle keep-alive connection ends
            # Headers and body are written separately: with Nagle's algorithm on, the body
            # waits for the client's delayed ACK, 40 ms a request.
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def handle_one_request(self):
                try:
                    super().handle_one_request()
                except (ConnectionError, socket.timeout):
                    self.close_connection = True

            def __getattr__(self, name):
                if name.startswith("do_"):
                    return self._serve
                raise AttributeError(name)

            def _serve(self):
                forwarder._serve(self)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server((LOOPBACK, 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        _live.append(self)

    def stop(self):
        if self in _live:
            _live.remove(self)
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(STOP_DEADLINE_S)

    @staticmethod
    def _read_body(h):
        if h.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(h.rfile.read(size))
                h.rfile.readline()
        n = int(h.headers.get("content-length") or 0)
        return h.rfile.read(n) if n else b""

    def _serve(self, h):
        decided = []
        try:
            self._serve_one(h, decided)
        finally:
            if self.done and decided:
                self.done()

    def _serve_one(self, h, decided):
        if h.headers.get("expect", "").lower() == "100-continue":
            h.send_response_only(100)
            h.end_headers()
        body = self._read_body(h)
        raw_path = h.path
        if raw_path.startswith("http://"):  # used as a forward proxy: keep the path
            u = urllib.parse.urlsplit(raw_path)
            raw_path = (u.path or "/") + ("?" + u.query if u.query else "")
        headers = {k.lower(): v for k, v in h.headers.items()}
        action = self.decide(h.command, raw_path, headers, body)
        decided.append(True)
        kind = action[1] if action and action[0] == "fault" else None
        if action and action[0] == "respond":
            return self._respond(h, action[1], {"content-type": "application/xml"},
                                 s3_error_body(action[2], action[3]))
        if kind == "drop":
            return self._abort(h, rst=False)
        if kind in ("500", "503", "429", "403"):
            code = {"500": "InternalError", "503": "SlowDown", "429": "TooManyRequests",
                    "403": "AccessDenied"}[kind]
            return self._respond(h, int(kind), {"content-type": "application/xml"},
                                 s3_error_body(code, f"injected by FaultProxy ({kind})"))
        if kind == "delay":
            time.sleep(self.delay_s)
        if kind == "corrupt_request" and body:
            i = self._pick.randrange(len(body))
            body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1:]
        try:
            status, reason, out_headers, out_body = self._forward(h.command, raw_path, h.headers, body)
        except OSError as e:
            return self._respond(h, 502, {"content-type": "text/plain"}, f"upstream: {e}".encode())
        if kind in ("corrupt", "corrupt_any") and out_body:
            # corrupt: the same byte of every body of this length (alike damage);
            # corrupt_any: a byte drawn anew for each response.
            pick = random.Random(len(out_body)) if kind == "corrupt" else self._pick
            i = pick.randrange(len(out_body))
            out_body = out_body[:i] + bytes([out_body[i] ^ 0xFF]) + out_body[i + 1:]
        if kind in ("reset", "truncate"):
            return self._send_part(h, status, reason, out_headers, out_body, rst=kind == "reset")
        if kind == "overlong":
            return self._send_overlong(h, status, reason, out_headers, out_body)
        return self._respond(h, status, out_headers, out_body, reason=reason,
                             head=h.command == "HEAD")

    def _forward(self, method, raw_path, in_headers, body):
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        try:
            conn.putrequest(method, raw_path, skip_host=True, skip_accept_encoding=True)
            for k, v in in_headers.items():
                if k.lower() not in _HOP_BY_HOP and k.lower() not in ("content-length", "expect"):
                    conn.putheader(k, v)
            if body or method in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            r = conn.getresponse()
            out_body = r.read()
            out_headers = {k.lower(): v for k, v in r.getheaders() if k.lower() not in _HOP_BY_HOP}
            if method != "HEAD":
                out_headers["content-length"] = str(len(out_body))
            return r.status, r.reason, out_headers, out_body
        finally:
            conn.close()

    @staticmethod
    def _respond(h, status, headers, body, reason=None, head=False):
        h.send_response_only(status, reason)
        for k, v in headers.items():
            if k != "content-length":
                h.send_header(k, v)
        h.send_header("Content-Length", headers.get("content-length", str(len(body))))
        h.end_headers()
        if not head:
            h.wfile.write(body)
        h.wfile.flush()

    @staticmethod
    def _abort(h, rst):
        h.close_connection = True
        if rst:  # SO_LINGER 0: close sends RST instead of FIN
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        h.wfile.flush()

    def _send_part(self, h, status, reason, headers, body, rst):
        """The full headers (Content-Length of the whole body) and part of the
        body, then RST (reset) or FIN (truncate). An empty body gets the
        headers only: the connection still ends short of nothing, so a reset
        comes before the headers instead."""
        if not body and rst:
            return self._abort(h, rst=True)
        h.send_response_only(status, reason)
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body[:len(body) // 2])
        self._abort(h, rst)


    def _send_overlong(self, h, status, reason, headers, body):
        """The whole body under a Content-Length 5 bytes longer, then FIN: every
        byte asked for arrived, and the transfer still ends short."""
        h.send_response_only(status, reason)
        for k, v in headers.items():
            h.send_header(k, str(len(body) + 5) if k == "content-length" else v)
        h.end_headers()
        h.wfile.write(body)
        self._abort(h, rst=False)


class FaultProxy:
    """Forwards to `upstream_url`, injecting faults: `faults` maps a kind of
    FAULT_KINDS to the probability a request gets it (one draw per request
    from Random(seed); the kinds' probabilities add up to at most 1), to
    the requests `match(method, path)` accepts (default: every request).
    `.counts[kind]` is how many requests got each; `.requests` how many came;
    `.log` lists (method, path, fault kind or None) in arrival order;
    `.in_flight` counts the requests being answered now and `.max_in_flight`
    the most at once (`count_from_now()` to measure from then on).

      drop      the connection closed without a response (not forwarded)
      reset     forwarded; headers and half the body, then a TCP RST
                (an empty body: the RST instead of the response)
      delay     forwarded after sleeping `delay_s`
      500, 503, 429   that status with an S3 XML error (not forwarded)
      403       403 AccessDenied (not forwarded): what S3 answers for a missing object
                to credentials without s3:ListBucket
      truncate  forwarded; headers with the full Content-Length, half the body, FIN
      overlong  forwarded; the whole body under a Content-Length 5 bytes longer, FIN
      corrupt   forwarded; one byte of the body inverted (none when empty), the same
                position in every body of the same length
      corrupt_any   the same, at a position drawn anew for each response
      corrupt_request   forwarded with one byte of the request's body inverted (at a
                position drawn anew each time; requests without a body are passed by):
                an upload damaged on the way
    """

    def __init__(self, upstream_url, faults=None, seed=0, delay_s=1.0, match=None):
        self.upstream_url = upstream_url
        self.match = match
        self.log = []
        self.faults = dict(faults or {})
        unknown = set(self.faults) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)} (kinds: {', '.join(FAULT_KINDS)})")
        if sum(self.faults.values()) > 1.0 + 1e-9:
            raise ValueError("fault probabilities add up to more than 1")
        self.delay_s = delay_s
        self.counts = {k: 0 for k in FAULT_KINDS}
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._fwd = None
        self.url = None

    def _decide(self, method, raw_path, headers, body):
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            kind = self._draw(method, raw_path)
            self.log.append((method, raw_path, kind))
            if kind:
                self.counts[kind] += 1
                return ("fault", kind)
        return None

    def _done(self):
        with self._lock:
            self.in_flight -= 1

    def count_from_now(self):
        """max_in_flight from now on: the requests in flight now, and the most at
        once after. Not 0: requests that had all arrived before this call (a
        Loader's downloads may begin before its constructor returns) and kept
        on, with none after, left it at 0. A Loader's open fetches the manifest
        and every shard's header and index before it returns, so right after it
        the requests in flight are downloads."""
        with self._lock:
            self.max_in_flight = self.in_flight

    def _draw(self, method, raw_path):
        if self.match and not self.match(method, raw_path):
            return None
        u = self._rng.random()
        acc = 0.0
        for kind in FAULT_KINDS:
            acc += self.faults.get(kind, 0.0)
            if u < acc:
                if kind in ("truncate", "corrupt", "overlong") and method == "HEAD":
                    return None  # no body to cut or flip
                if kind == "corrupt_request" and method not in ("PUT", "POST"):
                    return None  # no request body to flip
                return kind
        return None

    def __enter__(self):
        self._fwd = _Forwarder(self.upstream_url, self._decide, delay_s=self.delay_s,
                               done=self._done)
        self.url = self._fwd.url
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self._fwd:
            self._fwd.stop()


# ---- s3rver --------------------------------------------------------------------

class S3Server:
    """s3rver (npm, installed under S3RVER_PREFIX) with its data under
    `root`. `.endpoint` is a front on its own port that checks each signed
    request's SigV4 signature against s3rver's account (S3RVER/S3RVER) and
    forwards it; `verify_signatures=False` hands out s3rver's own port."""

    def __init__(self, root, verify_signatures=True):
        self.root = root
        self.verify_signatures = verify_signatures
        self._proc = None
        self._front = None
        self.endpoint = None
        self.s3rver_url = None

    @staticmethod
    def command():
        exe = os.path.join(S3RVER_PREFIX, "node_modules", ".bin", "s3rver")
        if not os.access(exe, os.X_OK) or not shutil.which("node"):
            raise unittest.SkipTest(f"s3rver is not installed ({exe} with node on PATH): "
                                    "run tools/install-deps.sh remote")
        return exe

    def __enter__(self):
        exe = self.command()
        data = os.path.join(self.root, "s3rver-data")
        os.makedirs(data, exist_ok=True)
        log = os.path.join(self.root, "s3rver.log")
        for attempt in range(3):  # the free port may be taken between probe and bind
            port = free_port()
            self._proc = _Process([exe, "--directory", data, "--address", LOOPBACK, "--port", str(port),
                                   "--silent", "--no-vhost-buckets"], log, "s3rver")
            try:
                _wait_listening(port, self._proc.proc, "s3rver", log)
                break
            except RuntimeError:
                self._proc.stop()
                if attempt == 2:
                    raise
        self.s3rver_url = f"http://{LOOPBACK}:{port}"
        self.endpoint = self.s3rver_url
        if self.verify_signatures:
            self._front = _Forwarder(self.s3rver_url, self._check)
            self.endpoint = self._front.url
        return self

    def _check(self, method, raw_path, headers, body):
        problem = sigv4_problem(method, raw_path, headers, body, {S3RVER_KEY: S3RVER_KEY})
        return ("respond",) + problem if problem else None

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self._front:
            self._front.stop()
        if self._proc:
            self._proc.stop()

    def env(self):
        """The environment a client needs for this server (AWS's variable names)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ENDPOINT_URL_S3": self.endpoint,
                "AWS_ACCESS_KEY_ID": S3RVER_KEY, "AWS_SECRET_ACCESS_KEY": S3RVER_KEY,
                "AWS_REGION": S3_REGION}

    def request(self, method, path, body=b"", signed=True):
        """(status, headers, body) of a request to `path` ("/bucket/key")."""
        url = self.endpoint + path
        return http_request(method, url, body, sigv4_headers(method, url, body) if signed else {})

    def create_bucket(self, name):
        status, _, body = self.request("PUT", "/" + name)
        if status != 200:
            raise RuntimeError(f"creating bucket {name}: HTTP {status}: {body[:300]!r}")

    def get_object(self, bucket, key):
        """The object's bytes, or None when it does not exist."""
        status, _, body = self.request("GET", f"/{bucket}/{urllib.parse.quote(key, safe='/-_.~')}")
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError(f"GET {bucket}/{key}: HTTP {status}: {body[:300]!r}")
        return body

    def list_keys(self, bucket, prefix=""):
        """Every key under `prefix` (ListObjects, the first 1000)."""
        q = "?prefix=" + urllib.parse.quote(prefix, safe="") if prefix else ""
        status, _, body = self.request("GET", f"/{bucket}{q}")
        if status != 200:
            raise RuntimeError(f"listing {bucket}: HTTP {status}: {body[:300]!r}")
        tree = ET.fromstring(body)  # with or without S3's namespace
        return sorted(k.text for c in tree.iter() if c.tag.split("}")[-1] == "Contents"
                      for k in c if k.tag.split("}")[-1] == "Key")


# ---- nginx -----------------------------------------------------------------------

class Nginx:
    """Debian's nginx serving the folder `root` on 127.0.0.1 (Range requests
    answered 206 by its static module). `.url` is the server's root URL; a
    file root/ds/manifest.sfm is at .url + "/ds/manifest.sfm". `dav=True`
    also takes PUT (folders created as needed) and DELETE, as a WebDAV
    server does. Its config, logs and temporary folders live in `work`
    (default: a folder next to `root`). `limit_rate` (nginx's syntax, e.g.
    "20m": bytes a second) caps each response's rate, as an object store
    serves each connection at a rate of its own."""

    def __init__(self, root, work=None, dav=False, limit_rate=None):
        self.root = os.path.abspath(root)
        self.dav = dav
        self.limit_rate = limit_rate
        self.work = os.path.abspath(work) if work else self.root.rstrip("/") + ".nginx"
        self._proc = None
        self.url = None

    @staticmethod
    def command():
        exe = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
        if not exe:
            raise unittest.SkipTest("nginx is not installed: run tools/install-deps.sh remote (nginx-light)")
        return exe

    def _config(self, exe, port):
        # Point every temp folder nginx was built with at the work folder
        # (Debian's are under /var/lib/nginx, not writable for a user).
        built = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10).stderr
        temps = []
        for kind in ("client-body", "proxy", "fastcgi", "uwsgi", "scgi"):
            if f"--http-{kind}-temp-path" in built:
                directive = {"client-body": "client_body"}.get(kind, kind) + "_temp_path"
                temps.append(f"    {directive} {self.work}/{kind};")
        user = "    " if os.getuid() else "user root root;"  # root: workers read what root made
        return "\n".join([
            user, "worker_processes 1;", "daemon off;", f"pid {self.work}/nginx.pid;",
            f"error_log {self.work}/error.log warn;", "events { worker_connections 256; }",
            "http {", "    access_log off;", "    default_type application/octet-stream;",
            f"    limit_rate {self.limit_rate};" if self.limit_rate else "",
            *temps,
            f"    server {{ listen {LOOPBACK}:{port}; root {self.root};",
            "        dav_methods PUT DELETE; create_full_put_path on; client_max_body_size 0;"
            if self.dav else "", "    }", "}", ""])

    def __enter__(self):
        exe = self.command()
        os.makedirs(self.work, exist_ok=True)
        log = os.path.join(self.work, "error.log")
        for attempt in range(3):
            port = free_port()
            conf = os.path.join(self.work, "nginx.conf")
            with open(conf, "w") as f:
                f.write(self._config(exe, port))
            self._proc = _Process([exe, "-p", self.work, "-c", conf, "-e", log], log, "nginx")
            try:
                _wait_listening(port, self._proc.proc, "nginx", log)
                break
            except RuntimeError:
                self._proc.stop()
                if attempt == 2:
                    raise
        self.url = f"http://{LOOPBACK}:{port}"
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self._proc:
            self._proc.stop()
