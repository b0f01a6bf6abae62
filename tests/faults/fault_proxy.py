"""A fault-injecting HTTP proxy for S3 servers (issue 6). Standard library only.

It listens on 127.0.0.1 only and forwards each request to one upstream HTTP endpoint (a moto or
LocalStack S3 server). Per request, a seeded random generator decides whether to inject a fault:

| kind         | what the client sees                                  | forwarded? |
| ------------ | ----------------------------------------------------- | ---------- |
| ``503``      | ``503 SlowDown`` (S3's throttling reply)               | no         |
| ``500``      | ``500 InternalError``                                  | no         |
| ``stall``    | nothing for ``stall_seconds`` (past its timeout), then a reset | no  |
| ``reset``    | a TCP reset (RST) instead of a reply                   | no         |
| ``drop_reply`` | a TCP reset after the server applied the request: the *ambiguous* case | yes |
| ``delay``    | the reply, ``delay_seconds`` late (within the client's timeout) | yes |

Rates are per kind (``rates``); ``conditional_rates`` applies instead to PUTs carrying
``If-Match`` or ``If-None-Match`` (the manifest's compare-and-swap writes), so tests can target
them; ``drop_reply_every=n`` also drops the reply of every n-th conditional PUT (a guaranteed
share of ambiguous writes). Decisions are drawn under a lock from ``random.Random(seed)`` in arrival order: the i-th
request of a run always gets the same decision (thread scheduling may still change which request
is i-th). ``counts`` counts injected faults by kind (and ``forwarded`` / ``requests``).

    with FaultProxy(upstream, seed=7, rates={"503": 0.02}, conditional_rates={"drop_reply": 0.05}) as p:
        endpoint = p.endpoint   # http://127.0.0.1:<port>
"""

from __future__ import annotations

import collections
import http.client
import random
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KINDS = ("503", "500", "stall", "reset", "drop_reply", "delay")  # new kinds go last: same draws for old rates

_ERROR_BODY = {
    "503": (503, "Service Unavailable", "SlowDown", "Please reduce your request rate."),
    "500": (500, "Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
}
# Hop-by-hop headers never forwarded (RFC 9110 §7.6.1).
_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "transfer-encoding"}


def is_conditional_put(method: str, headers: Mapping[str, str]) -> bool:
    lower = {k.lower() for k in headers}
    return method == "PUT" and ("if-match" in lower or "if-none-match" in lower)


class FaultProxy:
    """A threaded HTTP/1.1 proxy on 127.0.0.1 in front of ``upstream`` (``http://host:port``)."""

    def __init__(
        self,
        upstream: str,
        *,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        conditional_rates: Mapping[str, float] | None = None,
        stall_seconds: float = 3.0,
        upstream_timeout: float = 30.0,
        drop_reply_every: int | None = None,
        delay_seconds: float = 0.2,
    ) -> None:
        u = urllib.parse.urlsplit(upstream)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream_host, self.upstream_port = u.hostname, u.port or 80
        for r in (rates or {}), (conditional_rates or {}):
            unknown = set(r) - set(KINDS)
            if unknown:
                raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {KINDS}")
            if sum(r.values()) > 1.0:
                raise ValueError("fault rates add up to more than 1")
        self.rates = dict(rates or {})
        self.conditional_rates = dict(conditional_rates) if conditional_rates is not None else None
        self.stall_seconds = stall_seconds
        self.delay_seconds = delay_seconds
        self.drop_reply_every = drop_reply_every
        self.upstream_timeout = upstream_timeout
        self.enabled = True
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.injected_on_conditional: collections.Counter[str] = collections.Counter()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        server = _QuietServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- decisions ------------------------------------------------------------------------------

    def decide(self, method: str, headers: Mapping[str, str]) -> str | None:
        """The fault for the next request (None: forward normally). Counts it."""
        conditional = is_conditional_put(method, headers)
        rates = self.conditional_rates if (conditional and self.conditional_rates is not None) else self.rates
        with self._lock:
            self.counts["requests"] += 1
            if conditional:
                self.counts["conditional_puts"] += 1
            x = self._rng.random()  # drawn even when disabled, so enabling never shifts the sequence
            if not self.enabled:
                return None
            if conditional and self.drop_reply_every and self.counts["conditional_puts"] % self.drop_reply_every == 0:
                self.counts["drop_reply"] += 1
                self.injected_on_conditional["drop_reply"] += 1
                return "drop_reply"
            acc = 0.0
            for kind in KINDS:
                acc += rates.get(kind, 0.0)
                if x < acc:
                    self.counts[kind] += 1
                    if conditional:
                        self.injected_on_conditional[kind] += 1
                    return kind
            return None

    def injected(self) -> dict[str, int]:
        """Injected faults by kind (kinds never injected are 0)."""
        with self._lock:
            return {k: self.counts[k] for k in KINDS}


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that gives up on a request (its timeout, a delay fault) resets the connection: not an error."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reset(self) -> None:
        """Abort the connection with an RST (SO_LINGER 0), never a clean reply."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True

    def _handle(self) -> None:
        body = self._read_body()
        headers = {k: v for k, v in self.headers.items()}
        fault = self.owner.decide(self.command, headers)
        if fault in _ERROR_BODY:
            status, reason, code, message = _ERROR_BODY[fault]
            payload = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>{message}</Message><RequestId>fault-proxy</RequestId></Error>"
            ).encode()
            self.send_response(status, reason)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        if fault == "stall":
            time.sleep(self.owner.stall_seconds)
            self._reset()
            return
        if fault == "reset":
            self._reset()
            return
        if fault == "delay":
            time.sleep(self.owner.delay_seconds)
        # Forward (also for drop_reply: the server applies the request, then the reply is lost).
        conn = http.client.HTTPConnection(
            self.owner.upstream_host, self.owner.upstream_port, timeout=self.owner.upstream_timeout
        )
        try:
            fwd = {k: v for k, v in headers.items() if k.lower() not in _HOP and k.lower() != "content-length"}
            if body or self.command in ("PUT", "POST"):
                fwd["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body if body else None, headers=fwd)
            resp = conn.getresponse()
            data = resp.read()
            status, reason, resp_headers = resp.status, resp.reason, resp.getheaders()
        finally:
            conn.close()
        with self.owner._lock:
            self.owner.counts["forwarded"] += 1
        if fault == "drop_reply":
            self._reset()
            return
        self.send_response(status, reason)
        for k, v in resp_headers:
            if k.lower() not in _HOP and k.lower() not in ("content-length", "date", "server"):
                self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", dict((k.lower(), v) for k, v in resp_headers).get("content-length", "0"))
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._handle()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
