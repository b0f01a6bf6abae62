"""The osqueue source in Spark's real-time mode (Trigger.RealTime, Spark 4.1+): real Spark, real files.

Each query runs as its own process (tests/spark/realtime_job.py) with the `foreach` sink, one of
the sinks open-source Spark allows in real-time mode; its output files are per (batch id,
partition) and a replayed batch replaces its file, so the rows in the files are what the query
delivered once each, whatever crashed on the way.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

import osqueue

from .support import manifest, produce_entries

HERE = pathlib.Path(__file__).resolve().parent

pyspark = pytest.importorskip("pyspark")
if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 1):
    pytest.skip("real-time mode needs Spark 4.1+", allow_module_level=True)


def start_job(queue, ckpt, out, *extra):
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "realtime_job.py"),
            str(queue),
            str(ckpt),
            str(out),
            "--batch-duration",
            "1 second",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def rows_in(out: pathlib.Path) -> list[dict]:
    """The rows in the sink's files, in batch-id order, each file in the order the rows arrived."""
    rows = []
    for f in sorted(out.glob("epoch-*.jsonl"), key=lambda p: (int(p.stem.split("-")[1]), p.stem)):
        for line in f.read_text().splitlines():
            if line.endswith("}"):  # a line cut by kill -9 is not a delivered row
                rows.append(json.loads(line))
    return rows


def wait_for_rows(out, n, job, timeout=120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(rows_in(out)) >= n:
            return
        if job.poll() is not None:
            pytest.fail("real-time job exited early:\n" + job.stdout.read())
        time.sleep(0.1)
    pytest.fail(f"{len(rows_in(out))} of {n} rows within {timeout} s")


def kill(job):
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)


def committed_end(ckpt: pathlib.Path) -> tuple[int, int]:
    """(nextSequence, entryIndex) of the last batch in the checkpoint's commit log."""
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    o = json.loads((ckpt / "offsets" / str(last)).read_text().splitlines()[-1])
    return o["nextSequence"], o.get("entryIndex", 0)


def wait_for_commit_through(ckpt: pathlib.Path, next_sequence: int, job, timeout=120.0) -> None:
    """Until the commit log has a batch that ended at `next_sequence` (real-time batches commit when their time is up)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (ckpt / "commits").is_dir() and any(p.name.isdigit() for p in (ckpt / "commits").iterdir()):
            if committed_end(ckpt)[0] >= next_sequence:
                return
        if job.poll() is not None:
            pytest.fail("real-time job exited early:\n" + job.stdout.read())
        time.sleep(0.2)
    pytest.fail(f"no committed batch ended at {next_sequence} within {timeout} s")


def produce_slowly(queue, batches, per_batch, every_s, tag):
    values = [f"{tag}{b}-{i}" for b in range(batches) for i in range(per_batch)]

    def run():
        with osqueue.Producer(str(queue), flush_interval=0.02) as p:
            for b in range(batches):
                p.produce([f"{tag}{b}-{i}".encode() for i in range(per_batch)]).wait_durable(30)
                time.sleep(every_s)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return values, t


def test_real_time_query_reads_each_entry_once_in_order_as_it_lands_and_acks_committed_batches(queue_dir, tmp_path):
    before = produce_entries(str(queue_dir), batches=3, per_batch=2, tag="b")
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    job = start_job(queue_dir, ckpt, out)
    try:
        wait_for_rows(out, len(before), job)
        later, producer = produce_slowly(queue_dir, batches=20, per_batch=3, every_s=0.15, tag="l")
        producer.join(60)
        wait_for_rows(out, len(before) + len(later), job)
        wait_for_commit_through(ckpt, manifest(queue_dir).next_sequence, job)
    finally:
        kill(job)
    rows = rows_in(out)
    assert [r["value"] for r in rows] == before + later, "entries lost, duplicated or out of order"
    epochs = {int(f.stem.split("-")[1]) for f in out.glob("epoch-*.jsonl")}
    assert len(epochs) >= 3, f"the rows came in {len(epochs)} real-time batches; the batches did not turn over"
    # Acking follows Spark's commits: everything below the last committed position was dequeued
    # (by the commit of that batch or the one before), nothing above it.
    end, _ = committed_end(ckpt)
    assert end > 0
    first = (
        manifest(queue_dir).entries[0].sequence if manifest(queue_dir).entries else manifest(queue_dir).next_sequence
    )
    assert 0 < first <= end


def test_kill_dash_nine_mid_stream_and_restart_delivers_each_entry_exactly_once(queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=1, per_batch=1, tag="w")  # the queue exists before the query
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    values, producer = produce_slowly(queue_dir, batches=60, per_batch=2, every_s=0.1, tag="k")
    for seen in (10, 40):  # different moments, each while the producer writes
        job = start_job(queue_dir, ckpt, out)
        wait_for_rows(out, seen, job)
        kill(job)
    producer.join(120)
    job = start_job(queue_dir, ckpt, out)
    try:
        wait_for_rows(out, 1 + len(values), job)
        wait_for_commit_through(ckpt, manifest(queue_dir).next_sequence, job)
    finally:
        kill(job)
    rows = rows_in(out)
    assert [r["value"] for r in rows] == ["w0-0"] + values, "entries lost, duplicated or out of order"
    assert len({(r["sequence"], r["index"]) for r in rows}) == len(rows)
    end, index = committed_end(ckpt)
    logs = {
        p.name: (p.read_text().splitlines()[-1], (ckpt / "commits" / p.name).exists())
        for p in (ckpt / "offsets").iterdir()
        if p.name.isdigit()
    }
    assert (end, index) == (manifest(queue_dir).next_sequence, 0), (
        f"the last committed batch did not read everything: {logs}"
    )
    first = (
        manifest(queue_dir).entries[0].sequence if manifest(queue_dir).entries else manifest(queue_dir).next_sequence
    )
    assert first <= end


def test_a_second_query_fences_the_first_which_stops_reading(queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=2, per_batch=1, tag="a")
    zombie = start_job(queue_dir, tmp_path / "c1", tmp_path / "o1")
    try:
        wait_for_rows(tmp_path / "o1", 2, zombie)
        epoch = manifest(queue_dir).epoch
        second = start_job(queue_dir, tmp_path / "c2", tmp_path / "o2")
        try:
            deadline = time.time() + 120
            while manifest(queue_dir).epoch == epoch and time.time() < deadline:
                time.sleep(0.1)
            assert manifest(queue_dir).epoch == epoch + 1, "the second query did not take over"
            after = produce_entries(str(queue_dir), batches=3, per_batch=1, tag="x")
            try:
                zombie.wait(60)
            except subprocess.TimeoutExpired:
                pytest.fail("the fenced query kept running")
            log = zombie.stdout.read()
            assert zombie.returncode != 0 and f"consumer with epoch {epoch} was fenced" in log, log[-3000:]
            assert not [r for r in rows_in(tmp_path / "o1") if r["value"] in after], "the fenced query read on"
            wait_for_rows(tmp_path / "o2", 3, second)  # (the first query's commits acked the "a" entries)
            assert [r["value"] for r in rows_in(tmp_path / "o2")][-3:] == after
        finally:
            kill(second)
    finally:
        if zombie.poll() is None:
            kill(zombie)


@pytest.mark.parametrize(
    "options, message",
    [
        (["maxBatchesPerTrigger=2"], "option 'maxbatchespertrigger' does not apply in real-time mode"),
        (["pollInterval=soon"], "invalid value for option 'pollinterval': 'soon'"),
        (
            ["pollInterval=2s", "maxPollInterval=1s"],
            "option 'maxpollinterval' (1s) must not be below 'pollinterval' (2s)",
        ),
    ],
)
def test_bad_real_time_options_fail_the_query_naming_the_option(queue_dir, tmp_path, options, message):
    produce_entries(str(queue_dir), batches=1, per_batch=1)
    extra = [a for o in options for a in ("--option", o)]
    job = start_job(queue_dir, tmp_path / "c", tmp_path / "o", *extra)
    try:
        log, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            kill(job)
    assert job.returncode != 0 and message in log, log[-3000:]
