"""The latency proxy: a threaded HTTP/1.1 proxy on 127.0.0.1 that sleeps a fixed time before
forwarding each request to the S3 server, on a kept-alive connection.

It runs in its own process so that it does not take the GIL from the code being measured:
``python -m bench.harness.proxy UPSTREAM LATENCY_MS`` prints its endpoint as one JSON line on
stdout and serves until stdin closes. ``GET /__proxy__/count?<suffix>`` answers how many requests
it forwarded, by method, whose path ends with the suffix (the idle-cost figures). Standard library only.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import socket
import sys
import threading
import time
import urllib.parse
from typing import Any

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "expect",
}


_COUNT_PATH = "/__proxy__/count"


def _make_proxy_handler(upstream_host: str, upstream_port: int, latency_s: float) -> type:
    local = threading.local()
    counts: dict[tuple[str, str], int] = {}  # (method, path) -> requests forwarded
    counts_lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def setup(self) -> None:
            super().setup()
            # No Nagle: a reply's small writes must not wait for the client's delayed ACK.
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _forward(self) -> None:
            body = self._body()
            if latency_s > 0:
                time.sleep(latency_s)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            for attempt in range(2):
                conn = getattr(local, "conn", None)
                if conn is None:
                    conn = local.conn = http.client.HTTPConnection(upstream_host, upstream_port, timeout=120)
                    conn.connect()
                    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    break
                except (OSError, http.client.HTTPException):
                    conn.close()
                    local.conn = None
                    if attempt == 1:
                        self.send_error(502)
                        return
            self.send_response_only(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            else:
                length = resp.getheader("Content-Length")
                if length is not None:
                    self.send_header("Content-Length", length)
            # Status, headers and body in one write (no Nagle/delayed-ACK stall between them).
            self._headers_buffer.append(b"\r\n")  # type: ignore[attr-defined]
            if self.command != "HEAD":
                self._headers_buffer.append(data)  # type: ignore[attr-defined]
            self.flush_headers()

        def _count_or_forward(self) -> None:
            # `GET /__proxy__/count?<suffix>`: requests so far, by method, whose path ends with it.
            if self.path.startswith(_COUNT_PATH):
                needle = urllib.parse.unquote(self.path[len(_COUNT_PATH) :].lstrip("?"))
                with counts_lock:
                    body = json.dumps(
                        {
                            m: sum(n for (mm, p), n in counts.items() if mm == m and p.endswith(needle))
                            for m in ("GET", "PUT", "POST", "DELETE", "HEAD")
                        }
                    ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            with counts_lock:
                key = (self.command, self.path.split("?")[0])
                counts[key] = counts.get(key, 0) + 1
            self._forward()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _count_or_forward

    return Handler


def serve_proxy(upstream: str, latency_ms: float) -> None:
    """Runs the latency proxy on 127.0.0.1 (free port) until stdin closes; prints its endpoint
    as one JSON line on stdout."""
    parsed = http.client.urlsplit(upstream)
    handler = _make_proxy_handler(parsed.hostname or "127.0.0.1", parsed.port or 80, latency_ms / 1000.0)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"endpoint": f"http://127.0.0.1:{server.server_address[1]}"}), flush=True)
    with contextlib.suppress(Exception):
        sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m bench.harness.proxy UPSTREAM LATENCY_MS")
    serve_proxy(sys.argv[1], float(sys.argv[2]))
