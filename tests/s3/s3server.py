#!/usr/bin/env python3
"""Run ONE S3-compatible server (moto, LocalStack or Ceph RGW) on 127.0.0.1 for tests.

    python tests/s3/s3server.py --kind moto|localstack|ceph [--port 0]

When S3 answers a signed ListBuckets, ONE JSON line goes to stdout:
    {"endpoint": "http://127.0.0.1:PORT", "region": "us-east-1",
     "access_key": "test", "secret_key": "test", "kind": "moto"}
Everything else goes to stderr. The server keeps every file it writes (state, caches,
certificates, its log) in one state directory this script creates and removes when the server
stops (kept only when something failed): a fresh one under the system temp dir, or --state-dir.
The server's HOME, XDG dirs and TMPDIR point into it, so nothing a server caches in a user's home
can make a run pass here and fail on a machine that never ran it.
The server runs until stdin reaches EOF (so a dying parent takes it down) or
SIGTERM/SIGINT arrives; then its whole process tree is stopped and we exit 0.

Stdlib only, and nothing from the project: the JVM tests run this file too.
"""

import argparse
import datetime
import errno
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOST, REGION, ACCESS_KEY, SECRET_KEY = "127.0.0.1", "us-east-1", "test", "test"
START_TIMEOUT = {"moto": 30.0, "localstack": 180.0, "ceph": 120.0}
# Seconds between SIGTERM and SIGKILL. LocalStack's hypercorn shutdown hangs now and then (~1 in 7
# stops: loop.stop() from another thread never wakes the loop); its state is throwaway, so don't wait long.
STOP_GRACE = {"moto": 10.0, "localstack": 5.0, "ceph": 10.0}
# What a one-node Ceph RADOS Gateway needs on PATH (Debian: radosgw ceph-mon ceph-osd ceph-common).
CEPH_PROGRAMS = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph-authtool", "monmaptool", "ceph")
CEPH_PACKAGES = "radosgw ceph-mon ceph-osd ceph-common"
try:  # resolved here, not in the forked child
    import ctypes

    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (ImportError, OSError, AttributeError):  # not Linux
    _PRCTL = None
# urllib honours *_proxy env vars; loopback probes must never go through a proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def log(msg):
    print(f"s3server: {msg}", file=sys.stderr, flush=True)


def interpreter(kind):
    """The Python that runs the server (moto, ceph's supervisor: ours; localstack: its own >= 3.12 venv)."""
    if kind == "ceph":
        return sys.executable
    if kind == "moto":
        return os.environ.get("OSQUEUE_MOTO_PYTHON") or sys.executable
    return os.environ.get("OSQUEUE_LOCALSTACK_PYTHON") or str(REPO / ".venv-localstack" / "bin" / "python")


def confined_env(workdir):
    """Environment that keeps a server's home, caches and temp files inside workdir."""
    dirs = {
        "HOME": "home",
        "XDG_CACHE_HOME": "home/.cache",
        "XDG_CONFIG_HOME": "home/.config",
        "XDG_DATA_HOME": "home/.local/share",
        "TMPDIR": "tmp",
    }
    for sub in dirs.values():
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    return {var: str(workdir / sub) for var, sub in dirs.items()}


def server_command(kind, port, workdir):
    """argv and extra env for the server process."""
    if kind == "moto":
        return [interpreter(kind), "-c", MOTO_SERIALIZED, HOST, str(port)], confined_env(workdir)
    if kind == "ceph":  # tests/s3/ceph_cluster.py: mon + memstore OSD + RGW, state in workdir
        cluster = str(Path(__file__).resolve().with_name("ceph_cluster.py"))
        return [interpreter(kind), cluster, str(workdir), HOST, str(port), str(free_port())], confined_env(workdir)
    env = {
        **confined_env(workdir),
        "GATEWAY_LISTEN": f"{HOST}:{port}",
        "GATEWAY_SERVER": "hypercorn",  # the default (twisted) ignores the host and binds 0.0.0.0
        "LOCALSTACK_HOST": f"{HOST}:{port}",  # host:port in the URLs it generates (e.g. Location)
        "SERVICES": "s3",
        "EAGER_SERVICE_LOADING": "1",  # load S3 before reporting ready, not on first request
        "PERSISTENCE": "0",
        "DNS_ADDRESS": "0",  # else it starts a DNS server on 0.0.0.0:53 and probes upstream DNS
        "DISABLE_EVENTS": "1",  # no analytics
        "SKIP_SSL_CERT_DOWNLOAD": "1",  # self-signed cert instead of a download
        # Keep every file it writes inside our fresh dir: host mode defaults to site-packages for
        # its file system (whose cache/ holds the TLS certificate it makes at start) and to
        # ~/.localstack for its config. TMPDIR (confined_env) is also where S3 spills object bodies.
        "LOCALSTACK_VOLUME_DIR": str(workdir / "volume"),
        "FILESYSTEM_ROOT": str(workdir / "fs"),
        "CONFIG_DIR": str(workdir / "config"),
        # Inside any container (this machine's cgroups say so) LocalStack believes it runs in its own
        # Docker image and ignores FILESYSTEM_ROOT: it then caches its certificate in the system dir
        # /var/lib/localstack/cache, where one made by an older pin hid a broken pin from CI.
        "OVERRIDE_IN_DOCKER": "0",
    }
    return [interpreter(kind), "-m", "localstack.runtime.main"], env


# moto checks If-Match/If-None-Match and then writes, unlocked, in a threaded server: two
# concurrent conditional PUTs can both succeed. One request at a time makes them atomic, as on S3.
MOTO_SERIALIZED = """
import sys, threading
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()
def serialized(environ, start_response):
    with lock:
        return list(app(environ, start_response))
run_simple(sys.argv[1], int(sys.argv[2]), serialized, threaded=True)
"""


def ceph_missing():
    """The Ceph programs that are not on PATH."""
    return [p for p in CEPH_PROGRAMS if not shutil.which(p)]


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_taken(port):
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
            return False
        except OSError as e:
            return e.errno == errno.EADDRINUSE


def port_open(port):
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


def http_get(url, headers=None):
    """(status, body) or (None, b"") when nothing usable answers."""
    try:
        with _OPENER.open(urllib.request.Request(url, headers=headers or {}), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, ValueError):
        return None, b""


def list_buckets(endpoint):
    """A real S3 ListBuckets, SigV4-signed with the dummy keys (LocalStack routes unsigned GET / elsewhere)."""
    host = endpoint.split("://", 1)[1]
    amz_date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    payload = hashlib.sha256(b"").hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(["GET", "/", "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed, payload])
    scope = f"{amz_date[:8]}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{SECRET_KEY}".encode()
    for part in (amz_date[:8], REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{scope}, SignedHeaders={signed}, Signature={sig}"
    )
    status, body = http_get(endpoint + "/", headers)
    return status == 200 and b"ListAllMyBucketsResult" in body


def s3_ready(kind, endpoint):
    if kind == "localstack":
        status, body = http_get(endpoint + "/_localstack/health")
        try:
            if status != 200 or json.loads(body)["services"]["s3"] not in ("available", "running"):
                return False
        except (ValueError, KeyError, TypeError):
            return False
    return list_buckets(endpoint)


def descendants(pid):
    """All live descendants of pid, from /proc (Linux)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])  # comm may contain spaces/parens
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def kill_quietly(pid, sig, group=False):
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def owns_port(pid, port):
    """Whether pid or a descendant holds the LISTEN socket on port, so a probe that succeeds is
    answered by OUR server and not by someone else's on a reused port."""
    if not Path("/proc/net/tcp").exists():
        return True  # not Linux: cannot tell, trust the probe
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for f in map(str.split, rows):
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                sockets.add(f"socket:[{f[9]}]")
    for p in (pid, *descendants(pid)):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{p}/fd/{fd}") in sockets:
                    return True
            except OSError:
                pass
    return False


def alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_tree(proc, grace):
    """SIGTERM the server's process group and every descendant; SIGKILL whatever outlives the grace period."""
    tree = descendants(proc.pid)  # snapshot first: once the server dies its orphans are reparented away
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        kill_quietly(proc.pid, sig, group=True)  # own session, so pgid == pid
        for pid in tree:
            kill_quietly(pid, sig)
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if proc.poll() is not None and not any(alive(p) for p in tree):
                return
            time.sleep(0.1)


def _die_with_parent():
    """preexec_fn (runs in the child): the kernel SIGKILLs the server if this script dies uncleanly."""
    if _PRCTL:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stop_at_stdin_eof(stop):
    """Sets `stop` when stdin reaches EOF (a dying parent closes it), from a daemon thread."""

    def watch_stdin():
        try:  # raw fd: a daemon thread blocked in sys.stdin would hold its lock at interpreter exit
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()


def log_tail(path, lines=15):
    try:
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text if line.strip()) or "(empty log)"


def launcher_arguments(
    description, state_help="where the server keeps every file (created; must not exist yet; removed at stop)"
):
    """The arguments every launcher here takes: --port, --ignore-stdin, --state-dir."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--port", type=int, default=0, help="0 (default): pick a free port")
    ap.add_argument("--ignore-stdin", action="store_true", help="don't stop at stdin EOF (manual runs under nohup &)")
    ap.add_argument("--state-dir", type=Path, help=state_help)
    return ap


def stop_event(ignore_stdin):
    """Set by SIGTERM, SIGINT and (unless ignore_stdin) stdin's EOF: how a launcher is told to stop."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if not ignore_stdin:
        stop_at_stdin_eof(stop)
    return stop


def make_workdir(state_dir, prefix, say):
    """The state directory: --state-dir (created here, so it must not exist), else a fresh temp dir."""
    if not state_dir:
        return Path(tempfile.mkdtemp(prefix=prefix))
    try:
        state_dir.mkdir(parents=True)
    except FileExistsError:
        say(f"error: --state-dir {state_dir} already exists (it is created and removed here)")
        return None
    return state_dir.resolve()


def serve(name, workdir, stop, *, port, start_timeout, stop_grace, command, ready, info, say, poll=0.2):
    """Starts ``command(port) -> (argv, env)`` in ``workdir``, waits until ``ready(port)`` and the
    process owns the port, prints ``info(port)`` as ONE JSON line, and supervises it until ``stop``.
    Port 0 picks a free port, up to 3 times (one can be taken before the server binds it). Returns
    the exit code; ``workdir`` is removed unless something failed."""
    logfile = workdir / "server.log"
    deadline = time.monotonic() + start_timeout
    started = time.monotonic()
    for _ in range(3):
        chosen = port or free_port()
        argv, env = command(chosen)
        with open(logfile, "ab") as out:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        while proc.poll() is None and not stop.is_set() and time.monotonic() < deadline:
            if ready(chosen) and owns_port(proc.pid, chosen):
                break
            time.sleep(poll)
        else:
            code = proc.poll()
            stop_tree(proc, stop_grace)
            if stop.is_set():
                say(f"stopped before {name} was ready")
                shutil.rmtree(workdir, ignore_errors=True)
                return 0
            if code is not None and not port and port_taken(chosen):
                say(f"port {chosen} was taken before {name} bound it; retrying")
                continue
            why = f"exited with code {code}" if code is not None else f"not ready after {start_timeout:.0f}s"
            say(f"error: {name} on port {chosen} {why}; log {logfile}; tail: {log_tail(logfile)}")
            return 1
        break
    else:
        say(f"error: no free port for {name} after 3 tries; log {logfile}")
        return 1

    say(f"{name} ready on port {chosen} in {time.monotonic() - started:.1f}s (pid {proc.pid}, state {workdir})")
    rc = 0
    try:
        print(json.dumps(info(chosen)), flush=True)
        while not stop.wait(0.5):
            if proc.poll() is not None:
                say(
                    f"error: {name} exited unexpectedly with code {proc.returncode}; log {logfile}; tail: {log_tail(logfile)}"
                )
                rc = 1
                break
    except BrokenPipeError:  # the reader went away: same as stdin EOF
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit-time flush can't fail
    stop_tree(proc, stop_grace)
    if rc == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


def main():
    ap = launcher_arguments(
        __doc__.split("\n\n")[0],
        "where the server keeps every file (created; must not exist yet; removed at stop). "
        "Default: a fresh directory under the system temp dir",
    )
    ap.add_argument("--kind", choices=sorted(START_TIMEOUT), required=True)
    args = ap.parse_args()
    kind = args.kind
    stop = stop_event(args.ignore_stdin)

    if kind == "ceph" and ceph_missing():
        log(
            f"error: Ceph RGW is not installed (missing {', '.join(ceph_missing())}): "
            f"apt-get install {CEPH_PACKAGES}, or run .ci/setup.sh as root"
        )
        return 2
    python = interpreter(kind)
    if not Path(python).exists() and not shutil.which(python):
        hint = " (run .ci/setup-localstack.sh)" if kind == "localstack" else ""
        log(f"error: {kind} interpreter not found: {python}{hint}")
        return 2
    workdir = make_workdir(args.state_dir, f"osqueue-s3-{kind}-", log)
    if workdir is None:
        return 2

    def command(port):
        argv, extra_env = server_command(kind, port, workdir)
        env = {**os.environ, **extra_env, "PYTHONUNBUFFERED": "1"}
        env["NO_PROXY"] = env["no_proxy"] = ",".join(filter(None, [env.get("NO_PROXY"), "127.0.0.1,localhost"]))
        return argv, env

    def info(port):
        return {
            "endpoint": f"http://{HOST}:{port}",
            "region": REGION,
            "access_key": ACCESS_KEY,
            "secret_key": SECRET_KEY,
            "kind": kind,
        }

    return serve(
        f"{kind} S3 server",
        workdir,
        stop,
        port=args.port,
        start_timeout=START_TIMEOUT[kind],
        stop_grace=STOP_GRACE[kind],
        command=command,
        ready=lambda port: s3_ready(kind, f"http://{HOST}:{port}"),
        info=info,
        say=log,
    )


if __name__ == "__main__":
    sys.exit(main())
