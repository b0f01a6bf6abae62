"""Shared fixtures for the osqueue Python tests.

S3: when ``OSQUEUE_S3_TEST_ENDPOINT`` holds a JSON object like
``{"endpoint": "http://127.0.0.1:PORT", "region": "us-east-1", "access_key": "test",
"secret_key": "test"}`` the S3 tests run against that server; else when ``OSQUEUE_S3_KIND`` names
a kind of ``tests/s3/s3server.py`` (``ceph``, ``localstack``, ``moto``) one such server is started
for the session (skipped, with the reason, when it is not installed); otherwise an in-process
moto server is started once per session. Every S3 test gets a fresh bucket.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

ROOT = pathlib.Path(__file__).resolve().parents[2]
for p in (ROOT / "python", pathlib.Path(__file__).resolve().parent, ROOT / "tests" / "s3"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from helpers import ManualClock  # noqa: E402

from osqueue.store import InMemoryStore, LocalFileSystemStore, S3Store  # noqa: E402

# Nothing of hypothesis's in the working tree (no example database, caches in the temp dir);
# failures print the reproducing example anyway.
if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
    set_hypothesis_home_dir(pathlib.Path(tempfile.gettempdir()) / "osqueue-hypothesis")
settings.register_profile("osqueue", database=None, deadline=None)
settings.load_profile("osqueue")

# Loopback S3 endpoints must never go through an HTTP proxy.
for var in ("NO_PROXY", "no_proxy"):
    existing = os.environ.get(var, "")
    if "127.0.0.1" not in existing:
        os.environ[var] = ",".join(filter(None, [existing, "127.0.0.1", "localhost"]))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def mem_store(clock: ManualClock) -> InMemoryStore:
    """A store whose clock (its objects' last-modified times) is the test's ``clock``."""
    return InMemoryStore(f"t-{uuid.uuid4().hex[:8]}", clock)


@pytest.fixture
def local_store(tmp_path: pathlib.Path) -> LocalFileSystemStore:
    return LocalFileSystemStore(tmp_path / "queue")


def _serialize_moto_conditional_puts() -> None:
    """moto checks If-Match/If-None-Match and then stores the object without a lock, so two
    concurrent conditional PUTs can both succeed (a lost update S3 itself never allows). The
    in-process server gets the PUT handler serialized so it behaves like S3."""
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "_osqueue_serialized", False):
        return
    original = S3Response.put_object
    lock = threading.Lock()

    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    put_object._osqueue_serialized = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[dict[str, str]]:
    configured = os.environ.get("OSQUEUE_S3_TEST_ENDPOINT")
    if configured:
        yield json.loads(configured)
        return
    kind = os.environ.get("OSQUEUE_S3_KIND")
    if kind:
        from fixtures import run_s3_server

        with run_s3_server(kind) as server:
            yield {
                "endpoint": server.endpoint,
                "region": server.region,
                "access_key": server.access_key,
                "secret_key": server.secret_key,
                "kind": kind,
            }
        return
    server_mod = pytest.importorskip("moto.server")
    _serialize_moto_conditional_puts()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield {
            "endpoint": f"http://{host}:{port}",
            "region": "us-east-1",
            "access_key": "test",
            "secret_key": "test",
        }
    finally:
        server.stop()


@pytest.fixture
def s3_options(s3_endpoint: dict[str, str]) -> dict[str, str]:
    return {
        "fs.s3a.endpoint": s3_endpoint["endpoint"],
        "fs.s3a.endpoint.region": s3_endpoint.get("region", "us-east-1"),
        "fs.s3a.access.key": s3_endpoint.get("access_key", "test"),
        "fs.s3a.secret.key": s3_endpoint.get("secret_key", "test"),
        "fs.s3a.path.style.access": "true",
    }


@pytest.fixture(scope="session")
def s3_admin(s3_endpoint: dict[str, str]) -> Iterator[Any]:
    """One boto3 client for the session (creating clients is slow)."""
    options = {
        "fs.s3a.endpoint": s3_endpoint["endpoint"],
        "fs.s3a.endpoint.region": s3_endpoint.get("region", "us-east-1"),
        "fs.s3a.access.key": s3_endpoint.get("access_key", "test"),
        "fs.s3a.secret.key": s3_endpoint.get("secret_key", "test"),
        "fs.s3a.path.style.access": "true",
    }
    client = S3Store("admin-unused", "", options).client
    yield client
    client.close()


@pytest.fixture
def s3_bucket(s3_admin: Any) -> Iterator[str]:
    bucket = f"osq-{uuid.uuid4().hex[:16]}"
    s3_admin.create_bucket(Bucket=bucket)
    try:
        yield bucket
    finally:
        try:
            for page in s3_admin.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    s3_admin.delete_object(Bucket=bucket, Key=obj["Key"])
            s3_admin.delete_bucket(Bucket=bucket)
        except Exception:
            pass


@pytest.fixture
def s3_store(s3_bucket: str, s3_admin: Any) -> S3Store:
    """A store in a fresh bucket, under the prefix ``queues/q1`` (shares the session's client)."""
    return S3Store(s3_bucket, "queues/q1", client=s3_admin)


@pytest.fixture(params=["memory", "local", "s3"])
def any_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Any]:
    """The same test against every store."""
    if request.param == "memory":
        yield InMemoryStore(f"t-{uuid.uuid4().hex[:8]}")
    elif request.param == "local":
        yield LocalFileSystemStore(tmp_path / "queue")
    else:
        yield request.getfixturevalue("s3_store")
