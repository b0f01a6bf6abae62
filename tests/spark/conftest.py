"""Spark fixtures: a local SparkSession with the installed osqueue jar, queues, a LocalStack S3 server."""
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


@pytest.fixture
def s3_queue(localstack):
    """A fresh bucket on LocalStack: (s3a:// root URI, store options for osqueue and Spark)."""
    bucket = new_bucket(localstack)
    options = {
        "fs.s3a.endpoint": localstack.endpoint,
        "fs.s3a.access.key": localstack.access_key,
        "fs.s3a.secret.key": localstack.secret_key,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": localstack.region,
    }
    return f"s3a://{bucket}/q-{uuid.uuid4().hex[:8]}", options

