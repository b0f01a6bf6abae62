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

import os
import shutil
import sys
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
    args = s3server.launcher_arguments(__doc__.split("\n\n")[0]).parse_args()
    stop = s3server.stop_event(args.ignore_stdin)
    program = azurite_program()
    if not Path(program).exists() and not shutil.which(program):
        log(f"error: azurite is not installed ({program} not found): run .ci/setup.sh (it installs azurite with npm)")
        return 2
    workdir = s3server.make_workdir(args.state_dir, "osqueue-azurite-", log)
    if workdir is None:
        return 2
    (workdir / "data").mkdir()

    def command(port):
        argv = [program, "--blobHost", HOST, "--blobPort", str(port), "--location", str(workdir / "data")]
        argv += ["--disableTelemetry", "--skipApiVersionCheck"]
        env = {**os.environ, **s3server.confined_env(workdir)}
        env["NO_PROXY"] = env["no_proxy"] = ",".join(filter(None, [env.get("NO_PROXY"), "127.0.0.1,localhost"]))
        return argv, env

    def endpoint(port):
        return f"http://{HOST}:{port}/{ACCOUNT}"

    return s3server.serve(
        "azurite",
        workdir,
        stop,
        port=args.port,
        start_timeout=START_TIMEOUT,
        stop_grace=STOP_GRACE,
        command=command,
        ready=lambda port: blob_ready(endpoint(port)),
        info=lambda port: {
            "endpoint": endpoint(port),
            "account": ACCOUNT,
            "account_key": ACCOUNT_KEY,
            "kind": "azurite",
        },
        say=log,
    )


if __name__ == "__main__":
    sys.exit(main())
