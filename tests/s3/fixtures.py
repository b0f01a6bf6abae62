"""Real S3 servers for tests, started through tests/s3/s3server.py.

Use from any pytest suite (both import styles work):

    from tests.s3.fixtures import s3_server, s3_bucket    # in a conftest.py: makes the fixtures visible
    # or: sys.path.insert(0, "<repo>/tests/s3"); from fixtures import ...

    def test_x(s3_bucket):
        b = s3_bucket("moto")          # or "localstack", "ceph"; a fresh, uniquely named bucket
        b.client.put_object(Bucket=b.name, Key="k", Body=b"v", IfNoneMatch="*")

`s3_server(kind)` starts each kind once per session; `run_s3_server(kind)` is the plain context manager.
"""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    from . import s3server
except ImportError:  # imported as a top-level module with tests/s3 on sys.path
    import s3server

SCRIPT = Path(s3server.__file__).resolve()
KINDS = ("moto", "localstack", "ceph")


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    region: str
    access_key: str
    secret_key: str
    kind: str
    proc: subprocess.Popen  # the s3server.py process

    def client(self, **config):
        """A boto3 S3 client: SigV4-signed with the dummy keys (unsigned requests make moto answer 403
        where it means 412) and path-style addressing (no DNS for bucket subdomains)."""
        import boto3
        from botocore.config import Config

        cfg = Config(s3={"addressing_style": "path"}).merge(Config(**config))
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            config=cfg,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )


@dataclass(frozen=True)
class S3Bucket:
    server: S3Server
    name: str
    client: object


def missing_reason(kind):
    """Why `kind` cannot run here, or None. Missing LocalStack is a skip locally but a failure in CI;
    missing Ceph is always a skip (it installs only as root: .ci/setup.sh)."""
    if kind == "ceph" and s3server.ceph_missing():
        return (
            f"Ceph RGW is not installed (missing {', '.join(s3server.ceph_missing())}): "
            f"apt-get install {s3server.CEPH_PACKAGES}, or run .ci/setup.sh as root"
        )
    python = s3server.interpreter(kind)
    if kind == "localstack" and not Path(python).exists():
        return f"LocalStack interpreter {python} not found: run .ci/setup-localstack.sh"
    return None


@contextlib.contextmanager
def run_s3_server(kind="moto", *, state_dir=None, env=None):
    """Start s3server.py, yield an S3Server once its JSON line arrives, stop it on exit.

    state_dir: where the server keeps its files (default: a fresh temp dir); env: the launcher's environment.
    """
    reason = missing_reason(kind)
    if reason:
        if os.environ.get("CI") and kind != "ceph":
            pytest.fail(reason)
        pytest.skip(reason)
    with tempfile.TemporaryFile() as err:
        # stdin stays a pipe: closing it (or our death) is what stops the server.
        extra = ["--state-dir", str(state_dir)] if state_dir else []
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--kind", kind, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
        try:
            line = proc.stdout.readline()  # s3server.py enforces the startup timeout itself
            if not line:
                proc.wait(30)
                err.seek(0)
                raise RuntimeError(
                    f"s3server.py --kind {kind} exited {proc.returncode}: {err.read().decode(errors='replace').strip()}"
                )
            info = json.loads(line)
            yield S3Server(info["endpoint"], info["region"], info["access_key"], info["secret_key"], kind, proc)
        finally:
            stop_server(proc)


def stop_server(proc, timeout=30):
    """Close stdin (the contract's stop signal) and wait; escalate if it hangs."""
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    proc.stdout.close()
    return proc.returncode


def new_bucket(server, client=None):
    """Create a uniquely named bucket and return its name."""
    client = client or server.client()
    name = f"osq-{uuid.uuid4().hex[:20]}"
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def s3_server():
    """Factory `s3_server(kind="moto") -> S3Server`; each kind starts once per session."""
    with contextlib.ExitStack() as stack:
        servers, failures = {}, {}

        def get(kind="moto"):
            if kind in failures:  # don't pay a failing startup (up to 180 s) once per test
                raise failures[kind]
            if kind not in servers:
                try:
                    servers[kind] = stack.enter_context(run_s3_server(kind))
                except BaseException as e:
                    failures[kind] = e
                    raise
            return servers[kind]

        yield get


@pytest.fixture
def s3_bucket(s3_server):
    """Factory `s3_bucket(kind="moto") -> S3Bucket`: a fresh bucket per call on the session's server."""

    def make(kind="moto"):
        server = s3_server(kind)
        client = server.client()
        return S3Bucket(server, new_bucket(server, client), client)

    return make
