"""gs:// in Spark on fake-gcs-server: the connector with the osqueue-gcs artifact that
configure_spark_with_osqueue(stores=["gcs"]) adds to spark.jars.packages (resolved here from the
build's target/maven-repo, as a user resolves it from Maven Central), the fs.gs.* settings given as
spark.hadoop.* session settings. A source stream and a sink stream, each killed with kill -9
mid-stream and restarted: exact counts, nothing twice."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid

import pytest

import osqueue

from .support import make_input, native_values, produce_entries, queued_sequences
from .test_source import _output_rows, _run_job

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUILD_REPO = REPO / "target" / "maven-repo"
sys.path.insert(0, str(REPO / "tests" / "gcs"))

from gcs_fixtures import run_gcs_server  # noqa: E402


@pytest.fixture(scope="module")
def gcs():
    artifact = list((BUILD_REPO / "io" / "github" / "osqueue").glob(f"osqueue-gcs_*/{osqueue.__version__}/*.jar"))
    if not artifact:
        pytest.fail(
            f"no osqueue-gcs in {BUILD_REPO}: run `bash .ci/sbt publishBuildRepo` first (tests/run_all.sh does)"
        )
    with run_gcs_server() as server:
        yield server


def _queue(gcs) -> str:
    bucket = f"osq-{uuid.uuid4().hex[:16]}"
    gcs.client().create_bucket(bucket)
    return f"gs://{bucket}/q"


def _spark_args(gcs, tmp_path) -> list[str]:
    # A fresh Ivy cache: the artifact has no dependencies, so nothing else is fetched.
    return [
        "--stores",
        "gcs",
        f"--conf=spark.jars.repositories={BUILD_REPO.as_uri()}",
        f"--conf=spark.jars.ivy={tmp_path / 'ivy'}",
        *[f"--conf=spark.hadoop.{k}={v}" for k, v in gcs.options.items()],
    ]


def _kill_after(job, out: pathlib.Path, files: int, pattern: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while len(list(out.glob(pattern))) < files and time.time() < deadline:
        if job.poll() is not None:
            pytest.fail("the job exited early:\n" + job.stdout.read()[-5000:])
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)


def test_source_on_gs_survives_kill_dash_nine_with_exact_counts(gcs, tmp_path):
    queue = _queue(gcs)
    expected = produce_entries(queue, batches=12, per_batch=3, store_options=gcs.options)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    args = [*_spark_args(gcs, tmp_path), "--max-batches", "2"]

    _kill_after(_run_job(queue, ckpt, out, *args), out, 3, "batch-*.json")
    killed_at = len(list(out.glob("batch-*.json")))
    assert 3 <= killed_at < 6, f"the kill came after {killed_at} of 6 micro-batches: not mid-stream"

    job = _run_job(queue, ckpt, out, *args, "--available-now")
    assert job.wait(400) == 0, job.stdout.read()[-5000:]
    rows = _output_rows(out)
    assert [r["value"] for r in rows] == expected
    assert len({(r["sequence"], r["index"]) for r in rows}) == len(rows)
    assert queued_sequences(queue, gcs.options) == []  # the last run dequeued all it delivered


def test_sink_to_gs_survives_kill_dash_nine_with_exact_counts(gcs, tmp_path):
    queue = _queue(gcs)
    inp, ckpt = tmp_path / "in", tmp_path / "ckpt"
    expected = make_input(inp, files=8, lines=5)
    args = _spark_args(gcs, tmp_path)
    log = tmp_path / "sink.log"
    with open(log, "w") as f:
        job = subprocess.Popen(
            [sys.executable, str(HERE / "sink_job.py"), str(inp), queue, str(ckpt), "--trigger-ms", "300", *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.time() + 300
    while not (ckpt / "commits" / "2").exists() and time.time() < deadline:  # mid-stream: 3 of 8 files committed
        if job.poll() is not None:
            pytest.fail("the sink job exited early:\n" + log.read_text()[-5000:])
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    committed = len([p for p in (ckpt / "commits").iterdir() if p.name.isdigit()])
    assert 3 <= committed < 8, f"the kill came after {committed} of 8 files: not mid-stream"

    again = subprocess.run(
        [sys.executable, str(HERE / "sink_job.py"), str(inp), queue, str(ckpt), *args],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    got = native_values(queue, gcs.options)
    assert sorted(got) == sorted(expected) and len(got) == len(expected)  # each line once
