"""Spark fixtures: a local SparkSession with the installed osqueue jar, queues, LocalStack and Ceph RGW S3 servers."""

from __future__ import annotations

import os
import pathlib
import re
import sys
import uuid

import pytest

pytest.importorskip("pyspark", reason="the Spark tests run in the project venv (tests/run_all.sh)")

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "s3"))

from fixtures import new_bucket, run_s3_server  # noqa: E402

from .support import spark_builder  # noqa: E402


def _python_source_line_ends() -> set[str]:
    """The oldest and newest pyspark line of the full run's matrix that has the Python data source API (4.0 on)."""
    text = (REPO / ".ci" / "pyspark-lines.env").read_text(encoding="utf-8")
    versions = re.search(r'^PYSPARK_LINE_VERSIONS="([^"]*)"', text, re.M)
    assert versions, ".ci/pyspark-lines.env has no PYSPARK_LINE_VERSIONS"
    lines = [".".join(v.split(".")[:2]) for v in versions.group(1).split()]
    with_source = [v for v in lines if tuple(map(int, v.split("."))) >= (4, 0)]
    return {with_source[0], with_source[-1]}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "line_ends: a kill -9 case of the Python data source, minutes per line: run on the oldest and newest "
        "pyspark line with the source (.ci/pyspark-lines.env), or on any line with OSQUEUE_EVERY_LINE=1",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("line_ends") is None or os.environ.get("OSQUEUE_EVERY_LINE") == "1":
        return
    import pyspark

    line = ".".join(pyspark.__version__.split(".")[:2])
    ends = _python_source_line_ends()
    if line not in ends:
        pytest.skip(
            f"runs on the pyspark lines {' and '.join(sorted(ends))} in the full run (tests/spark_lines.sh); "
            f"OSQUEUE_EVERY_LINE=1 runs it on {line} too"
        )


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
