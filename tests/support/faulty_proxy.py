"""An HTTP proxy in front of an S3 server (moto's, tests/support/local_s3.py) that brings a cloud
store's weather to the loopback: a seeded share of requests answered `503 SlowDown`, a share of
connections dropped after the request arrived (no answer at all), optional slow answers, and an
optional share of CompleteMultipartUpload requests answered `200 OK` with an error in the body
(what S3 does when it fails late in that call). Everything else is forwarded unchanged.

    with local_s3("b") as s3, faulty_proxy(s3, Weather(slow_down=0.10, drop=0.02, seed=1)) as proxy:
        location = proxy.s3.uri("studies/x")     # the same bucket, reached through the proxy
        ...
        proxy.counts                             # {"requests": 2545, "slow_down": 253, "dropped": 59, ...}

Requests are forwarded with their headers as sent (a SigV4 signature covers the Host header,
which names the proxy: moto does not check signatures, a real S3 behind it would refuse them).
"""
from __future__ import annotations

import contextlib
import http.client
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from local_s3 import LocalS3

SLOW_DOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                  b"<Message>Please reduce your request rate.</Message></Error>")
LATE_ERROR_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
                   b"<Message>We encountered an internal error. Please try again.</Message></Error>")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


@dataclass(frozen=True)
class Weather:
    """What the proxy does to the requests it passes on; every share is drawn per request from
    one generator seeded with `seed`, so a run's faults are reproducible in number (which request
    gets one depends on the order threads arrive in)."""

    slow_down: float = 0.0
    """Share of requests answered `503 SlowDown` (S3's throttling answer), not forwarded."""
    drop: float = 0.0
    """Share of requests whose connection is closed once the request was read, without an answer."""
    slow: float = 0.0
    """Share of requests answered only after `delay_s` (forwarded, then held)."""
    delay_s: float = 1.0
    """How long a slow answer is held."""
    late_error: float = 0.0
    """Share of CompleteMultipartUpload requests answered `200 OK` with an `<Error>` body, not forwarded."""
    seed: int = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the AWS SDK expects
    server: _ProxyServer

    def log_message(self, *args) -> None:  # quiet: the counts say what happened
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _answer(self, status: int, body: bytes, headers: list[tuple[str, str]] = ()) -> None:
        """Send an answer; a HEAD's Content-Length is the upstream's (the object's size), not its empty body's."""
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        if not any(key.lower() == "content-length" for key, _ in headers):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        body = self._body()
        fault = self.server.draw(self.command, self.path)
        if fault == "dropped":
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(2)  # RST-like: the client sees the connection end mid-request
            return
        if fault == "slow_down":
            self._answer(503, SLOW_DOWN_BODY, [("Content-Type", "application/xml")])
            return
        if fault == "late_error":
            self._answer(200, LATE_ERROR_BODY, [("Content-Type", "application/xml")])
            return
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                headers["Content-Length"] = str(len(body))
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            if fault == "slow":
                time.sleep(self.server.weather.delay_s)
            dropped = HOP_BY_HOP if self.command == "HEAD" else HOP_BY_HOP | {"content-length"}
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in dropped]
            self._answer(response.status, data, kept)
        finally:
            upstream.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int], weather: Weather):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream, self.weather = upstream, weather
        self.random = random.Random(weather.seed)
        self.counts: Counter = Counter()
        self.lock = threading.Lock()

    def draw(self, method: str, path: str) -> str | None:
        """The fault this request gets (None: forwarded as it is), counted."""
        query = parse_qs(urlsplit(path).query, keep_blank_values=True)
        completes_upload = method == "POST" and "uploadId" in query
        w = self.weather
        with self.lock:
            self.counts["requests"] += 1
            roll = self.random.random()
            fault = ("slow_down" if roll < w.slow_down else "dropped" if roll < w.slow_down + w.drop
                     else "slow" if roll < w.slow_down + w.drop + w.slow else None)
            if fault is None and completes_upload and self.random.random() < w.late_error:
                fault = "late_error"
            if fault:
                self.counts[fault] += 1
            return fault


@dataclass(frozen=True)
class FaultyProxy:
    s3: LocalS3
    """The upstream's bucket, reached through the proxy (its `uri(path)` gives locations)."""
    server: _ProxyServer

    @property
    def counts(self) -> dict[str, int]:
        """Requests seen and faults made: requests, slow_down, dropped, slow, late_error."""
        with self.server.lock:
            return dict(self.server.counts)


@contextlib.contextmanager
def faulty_proxy(s3: LocalS3, weather: Weather):
    """A proxy on a free loopback port in front of `s3`'s server, making `weather`; yields a FaultyProxy."""
    upstream = parse_qs(s3.query)["endpoint_override"][0].rsplit(":", 1)
    server = _ProxyServer((upstream[0], int(upstream[1])), weather)
    thread = threading.Thread(target=server.serve_forever, name="faulty-proxy", daemon=True)
    thread.start()
    try:
        query = s3.query.replace(f"endpoint_override={upstream[0]}:{upstream[1]}",
                                 f"endpoint_override=127.0.0.1:{server.server_address[1]}")
        yield FaultyProxy(replace(s3, query=query), server)
    finally:
        server.shutdown()
        server.server_close()
