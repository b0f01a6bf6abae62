#!/usr/bin/env python3
"""Run azurite's Blob service (Azure Blob Storage emulator, from npm) on 127.0.0.1 for tests.

    python tests/azure/azurite_server.py [--port 0] [--state-dir DIR]

When the Blob service answers, ONE JSON line goes to stdout:
    {"endpoint": "http://127.0.0.1:PORT/devstoreaccount1", "account": "devstoreaccount1",
     "account_key": "...", "kind": "azurite"}
Everything else goes to stderr. As tests/s3/s3server.py (whose process helpers this reuses): all
of azurite's files (its blobs, metadata, log, HOME and TMPDIR) live in one state directory created
here and removed at stop; the server runs until stdin reaches EOF or SIGTERM/SIGINT arrives.
azurite is installed by .ci/setup.sh into .cache/azurite of the checkout ($OSQUEUE_AZURITE overrides
the path of its azurite-blob program). Telemetry is off: the machine reaches no other host.

Stdlib only, and nothing from the project: the JVM tests run this file too.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
import s3server  # noqa: E402  (confined_env, free_port, process-tree helpers)

REPO = Path(__file__).resolve().parents[2]
HOST = s3server.HOST
# azurite's one built-in account and its published, well-known key (not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
START_TIMEOUT = 60.0
STOP_GRACE = 5.0


def log(msg):
    print(f"azurite_server: {msg}", file=sys.stderr, flush=True)


def azurite_program():
    """The azurite-blob program: $OSQUEUE_AZURITE, else the one .ci/setup.sh installs in the checkout."""
    return os.environ.get("OSQUEUE_AZURITE") or str(
        REPO / ".cache" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    )


def blob_ready(endpoint):
    """Any HTTP answer from the account URL (403/400 without credentials) means the service is up."""
    status, _ = s3server.http_get(endpoint + "?comp=list")
    return status is not None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="0 (default): pick a free port")
    ap.add_argument("--ignore-stdin", action="store_true", help="don't stop at stdin EOF (manual runs under nohup &)")
    ap.add_argument(
        "--state-dir", type=Path, help="where azurite keeps every file (created; must not exist yet; removed at stop)"
    )
    args = ap.parse_args()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if not args.ignore_stdin:
        s3server.stop_at_stdin_eof(stop)

    program = azurite_program()
    if not Path(program).exists() and not shutil.which(program):
        log(f"error: azurite is not installed ({program} not found): run .ci/setup.sh (it installs azurite with npm)")
        return 2
    if args.state_dir:
        try:
            args.state_dir.mkdir(parents=True)
        except FileExistsError:
            log(f"error: --state-dir {args.state_dir} already exists (it is created and removed here)")
            return 2
        workdir = args.state_dir.resolve()
    else:
        workdir = Path(tempfile.mkdtemp(prefix="osqueue-azurite-"))
    logfile = workdir / "server.log"
    (workdir / "data").mkdir()
    deadline = time.monotonic() + START_TIMEOUT
    started = time.monotonic()
    for _ in range(3):  # a picked free port can be grabbed before azurite binds it
        port = args.port or s3server.free_port()
        argv = [
            program,
            "--blobHost",
            HOST,
            "--blobPort",
            str(port),
            "--location",
            str(workdir / "data"),
            "--disableTelemetry",
            "--skipApiVersionCheck",
        ]
        env = {**os.environ, **s3server.confined_env(workdir)}
        env["NO_PROXY"] = env["no_proxy"] = ",".join(filter(None, [env.get("NO_PROXY"), "127.0.0.1,localhost"]))
        with open(logfile, "ab") as out:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=s3server._die_with_parent,
            )
        endpoint = f"http://{HOST}:{port}/{ACCOUNT}"
        while proc.poll() is None and not stop.is_set() and time.monotonic() < deadline:
            if blob_ready(endpoint) and s3server.owns_port(proc.pid, port):
                break
            time.sleep(0.2)
        else:
            code = proc.poll()
            s3server.stop_tree(proc, STOP_GRACE)
            if stop.is_set():
                log("stopped before azurite was ready")
                shutil.rmtree(workdir, ignore_errors=True)
                return 0
            if code is not None and not args.port and s3server.port_taken(port):
                log(f"port {port} was taken before azurite bound it; retrying")
                continue
            why = f"exited with code {code}" if code is not None else f"not ready after {START_TIMEOUT:.0f}s"
            log(f"error: azurite on {endpoint} {why}; log {logfile}; tail: {s3server.log_tail(logfile)}")
            return 1
        break
    else:
        log(f"error: no free port for azurite after 3 tries; log {logfile}")
        return 1

    log(f"azurite ready on {endpoint} in {time.monotonic() - started:.1f}s (pid {proc.pid}, state {workdir})")
    info = {"endpoint": endpoint, "account": ACCOUNT, "account_key": ACCOUNT_KEY, "kind": "azurite"}
    rc = 0
    try:
        print(json.dumps(info), flush=True)
        while not stop.wait(0.5):
            if proc.poll() is not None:
                log(
                    f"error: azurite exited unexpectedly with code {proc.returncode}; tail: {s3server.log_tail(logfile)}"
                )
                rc = 1
                break
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    s3server.stop_tree(proc, STOP_GRACE)
    if rc == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
