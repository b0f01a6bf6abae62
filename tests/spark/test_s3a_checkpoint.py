"""Stateless end to end: the queue and the streaming query's checkpoint both on s3a:// (the moto S3
server), with hadoop-aws brought by configure_spark_with_osqueue(builder, s3=True) at the installed
pyspark's Hadoop version; the query is killed with kill -9 mid-stream and restarted, exact counts."""

from __future__ import annotations

import os
import signal
import time

import pytest
from fixtures import run_s3_server

from .conftest import queue_on
from .support import produce_entries
from .test_source import _output_rows, _run_job


@pytest.fixture(scope="module")
def moto():
    with run_s3_server("moto") as server:
        yield server


def test_checkpoint_on_s3a_survives_kill_dash_nine_with_exact_counts(moto, tmp_path):
    queue, options = queue_on(moto)
    bucket = queue.split("/")[2]
    checkpoint = f"s3a://{bucket}/checkpoints/events"
    expected = produce_entries(queue, batches=12, per_batch=3, store_options=options)
    job_args = ["--s3", "--max-batches", "2", *[f"--conf=spark.hadoop.{k}={v}" for k, v in options.items()]]
    out = tmp_path / "out"

    job = _run_job(queue, checkpoint, out, *job_args)
    deadline = time.time() + 400  # the first run may download hadoop-aws and its AWS SDK bundle
    while len(list(out.glob("batch-*.json"))) < 3 and time.time() < deadline:
        if job.poll() is not None:
            pytest.fail("stream job exited early:\n" + job.stdout.read()[-5000:])
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    killed_at = len(list(out.glob("batch-*.json")))
    assert 3 <= killed_at < 6, f"the kill came after {killed_at} of 6 micro-batches: not mid-stream"

    job = _run_job(queue, checkpoint, out, *job_args, "--available-now")
    assert job.wait(400) == 0, job.stdout.read()[-5000:]
    rows = _output_rows(out)
    assert [r["value"] for r in rows] == expected
    assert len({(r["sequence"], r["index"]) for r in rows}) == len(rows)

    # The checkpoint is in the bucket, not on local disk.
    keys = [o["Key"] for o in moto.client().list_objects_v2(Bucket=bucket, Prefix="checkpoints/events/")["Contents"]]
    assert any(k.startswith("checkpoints/events/offsets/") for k in keys), keys
    assert any(k.startswith("checkpoints/events/commits/") for k in keys), keys
