"""Spark fixtures: a local SparkSession with the installed osqueue jar, queues, LocalStack and Ceph RGW S3 servers."""

from __future__ import annotations

import pathlib
import sys
import uuid

import pytest

pytest.importorskip("pyspark", reason="the Spark tests run in the project venv (tests/run_all.sh)")

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "s3"))

from fixtures import new_bucket, run_s3_server  # noqa: E402

from .support import spark_builder  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    session = spark_builder("osqueue-tests").getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture
def queue_dir(tmp_path) -> pathlib.Path:
    d = tmp_path / "queue"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def localstack():
    with run_s3_server("localstack") as server:
        yield server


def queue_on(server):
    """A fresh bucket on `server`: (s3a:// root URI, store options for osqueue and Spark)."""
    bucket = new_bucket(server)
    options = {
        "fs.s3a.endpoint": server.endpoint,
        "fs.s3a.access.key": server.access_key,
        "fs.s3a.secret.key": server.secret_key,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": server.region,
    }
    return f"s3a://{bucket}/q-{uuid.uuid4().hex[:8]}", options


@pytest.fixture
def s3_queue(localstack):
    """A fresh bucket on LocalStack: (s3a:// root URI, store options for osqueue and Spark)."""
    return queue_on(localstack)


@pytest.fixture(scope="session")
def ceph():
    """A one-node Ceph RGW (skipped, with the reason, when Ceph is not installed)."""
    with run_s3_server("ceph") as server:
        yield server


@pytest.fixture
def ceph_queue(ceph):
    """A fresh bucket on Ceph RGW: (s3a:// root URI, store options for osqueue and Spark)."""
    return queue_on(ceph)
