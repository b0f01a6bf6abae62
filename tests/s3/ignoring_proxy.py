#!/usr/bin/env python3
"""A loopback HTTP proxy in front of an S3 server that drops conditional-write headers: an S3
store that accepts If-Match / If-None-Match and overwrites anyway (for the probe tests).

    python tests/s3/ignoring_proxy.py --upstream http://127.0.0.1:PORT [--drop if-match,if-none-match] [--spoil-if-match]

--spoil-if-match replaces every If-Match value by a tag no object has: a server whose If-Match never
matches, not even the object's own tag (the header is still sent, so a wrong tag still fails).

Prints ONE JSON line, {"endpoint": "http://127.0.0.1:PORT"}, once it listens, and runs until stdin
reaches EOF or SIGTERM/SIGINT arrives. Every request is forwarded as it came (SigV4 signatures
included: moto does not check them) except for the dropped headers. Stdlib only, nothing from the
project: the JVM tests run this file too. In Python, `IgnoringProxy(upstream)` is a context manager.
"""

import argparse
import http.client
import http.server
import json
import signal
import sys
import threading
import urllib.parse

from s3server import stop_at_stdin_eof  # this directory is on sys.path: as a script, and in the tests

HOST = "127.0.0.1"
CONDITIONS = ("if-match", "if-none-match")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


SPOILED_TAG = '"00000000000000000000000000000000"'


def handler_for(upstream, drop, seen, spoil_if_match=False):
    target = urllib.parse.urlsplit(upstream)

    class Forward(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _body(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _forward(self):
            seen.append(self.command)
            body = self._body()
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in drop and k.lower() not in HOP_BY_HOP and k.lower() != "content-length"
            }
            if spoil_if_match:
                headers = {k: (SPOILED_TAG if k.lower() == "if-match" else v) for k, v in headers.items()}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            finally:
                conn.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    return Forward


class IgnoringProxy:
    """`with IgnoringProxy("http://127.0.0.1:PORT") as proxy:` serves `proxy.endpoint`;
    `proxy.requests` lists the method of every request forwarded."""

    def __init__(self, upstream, drop=CONDITIONS, spoil_if_match=False):
        self.requests = []  # the method of every request forwarded
        self.server = http.server.ThreadingHTTPServer(
            (HOST, 0), handler_for(upstream, {d.lower() for d in drop}, self.requests, spoil_if_match)
        )
        self.server.daemon_threads = True
        self.endpoint = f"http://{HOST}:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="the S3 server, http://127.0.0.1:PORT")
    ap.add_argument("--drop", default=",".join(CONDITIONS), help="headers to drop (default: %(default)s)")
    ap.add_argument("--spoil-if-match", action="store_true", help="send every If-Match with a tag no object has")
    args = ap.parse_args()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    stop_at_stdin_eof(stop)
    drop = [d.strip() for d in args.drop.split(",") if d.strip()]
    with IgnoringProxy(args.upstream, drop, args.spoil_if_match) as proxy:
        print(json.dumps({"endpoint": proxy.endpoint}), flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
