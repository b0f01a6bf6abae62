"""The osqueue Spark sink across real processes and servers: a driver JVM that dies at each crash
point, two drivers of one query, LocalStack S3 and a standalone cluster.

The sink's behaviour in one process (round trips, replays, writer ids, aborts, re-uploads, bad
options) is tested in Scala on every Spark line: jvm/spark/src/test-lines (OsqueueSinkSuite,
OsqueueSinkCommitterSuite, OsqueueDataWriterSuite).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from .support import make_input, manifest, native_values, standalone_cluster

HERE = pathlib.Path(__file__).resolve().parent


def sink_job(input_dir, queue, ckpt, *extra, timeout=300):
    return subprocess.run(
        [sys.executable, str(HERE / "sink_job.py"), str(input_dir), str(queue), str(ckpt), *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_queue(spark, queue, options=None):
    reader = spark.read.format("osqueue")
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    rows = reader.load(str(queue)).orderBy("sequence", "index").collect()
    return [(bytes(r.value).decode(), bytes(r.metadata).decode()) for r in rows]


@pytest.mark.parametrize("point", ["during-task-write", "before-append", "after-append", "between-append-and-state"])
def test_driver_crash_points_leave_each_row_exactly_once(spark, tmp_path, point):
    expected = make_input(tmp_path / "in", files=3, lines=4)
    crashed = sink_job(tmp_path / "in", tmp_path / "q", tmp_path / "ckpt", "--crash-at", point)
    assert crashed.returncode != 0, "the crash point was not reached"
    # The state the named point implies for epoch 0: task files uploaded; appended or not.
    uploaded = list((tmp_path / "q").rglob("*.batch"))
    manifest_file = tmp_path / "q" / "ingest" / "manifest"
    appended = len(manifest(tmp_path / "q").entries) if manifest_file.exists() else 0
    assert uploaded, f"crash at {point}: no task file was uploaded"
    if point in ("during-task-write", "before-append"):
        assert appended == 0, f"crash at {point}: the epoch was already appended"
    else:
        assert appended >= 1, f"crash at {point}: the epoch was not appended yet"
    p = sink_job(tmp_path / "in", tmp_path / "q", tmp_path / "ckpt")
    assert p.returncode == 0, p.stderr[-3000:]
    assert [v for v, _ in read_queue(spark, tmp_path / "q")] == expected
    locations = [e.location for e in manifest(tmp_path / "q").entries]
    if point == "between-append-and-state":
        # The replay appended a second copy of epoch 0; osqueue readers delivered one.
        assert len(locations) > 3
    else:
        assert len(locations) == 3, "a replayed epoch was appended again"
    assert native_values(tmp_path / "q") == expected, "native consumer: a row lost or delivered twice"


def _wait_for(condition, timeout: float, what: str, proc=None, log=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited ({proc.returncode}): {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f": {log.read_text()[-3000:]}" if log else ""))
        time.sleep(0.2)


def test_an_old_driver_of_the_same_query_is_fenced_and_lands_nothing(spark, tmp_path):
    """Two drivers of one query (the checkpoint copied, as shared storage would let happen): the
    new run claims the writer; the old one, still running, fails its next commit and lands nothing."""
    inp, q, ckpt, ckpt2 = tmp_path / "in", tmp_path / "q", tmp_path / "ckpt", tmp_path / "ckpt-new"

    def add_file(tag: str) -> list[str]:
        rows = make_input(inp, files=1, lines=5, tag=tag)
        now = time.time()
        os.utime(inp / f"{tag}0.txt", (now, now))
        return rows

    first = add_file("a")
    log = tmp_path / "old-driver.log"
    with open(log, "w") as out:
        old = subprocess.Popen(
            [sys.executable, str(HERE / "sink_job.py"), str(inp), str(q), str(ckpt), "--trigger-ms", "200"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for(lambda: (ckpt / "commits" / "0").exists(), 240, "the old driver's first epoch", old, log)
        shutil.copytree(ckpt, ckpt2)  # the same query id, so the same writer id
        second = add_file("b")  # both drivers may pick this one up; either way it must land once
        new = sink_job(inp, q, ckpt2)
        assert new.returncode == 0, new.stderr[-3000:]

        landed_before = manifest(q).next_sequence
        third = add_file("c")  # only the old driver runs now: its commit must be refused
        _wait_for(lambda: old.poll() is not None, 240, "the old driver to fail", log=log)
        assert old.returncode != 0
        text = log.read_text()
        assert "WriterFencedException" in text and "was fenced" in text, text[-3000:]
        assert manifest(q).next_sequence == landed_before, "a write of the fenced driver landed"
        assert not any(v.startswith("c") for v, _ in read_queue(spark, q))

        again = sink_job(inp, q, ckpt2)  # a new run of the new driver delivers the rest
        assert again.returncode == 0, again.stderr[-3000:]
        assert [v for v, _ in read_queue(spark, q)] == first + second + third
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()


def test_sink_on_localstack(spark, s3_queue, tmp_path):
    uri, options = s3_queue
    expected = make_input(tmp_path / "in", files=2, lines=3)
    p = sink_job(
        tmp_path / "in", uri, tmp_path / "ckpt", *[x for k, v in options.items() for x in ("--option", f"{k}={v}")]
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert [v for v, _ in read_queue(spark, uri, options)] == expected
    assert native_values(uri, options) == expected


def test_sink_on_a_standalone_cluster(tmp_path):
    expected = make_input(tmp_path / "in", files=3, lines=4)
    with standalone_cluster(tmp_path) as master:
        p = sink_job(tmp_path / "in", tmp_path / "q", tmp_path / "ckpt", "--master", master)
        assert p.returncode == 0, p.stderr[-3000:]
    assert list((tmp_path / "work").glob("app-*/*/stderr")), "tasks did not run in the worker's JVM"
    assert native_values(tmp_path / "q") == expected
