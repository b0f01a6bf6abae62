"""When a streaming query ends, the source dequeues what Spark durably committed, and nothing more.

Spark commits a micro-batch's offsets to a source only when it plans the next batch; a run that
ends (AvailableNow or Once finishing, `query.stop()`) plans none. The source's `stop()` then reads
the checkpoint's commit log and dequeues through its last committed batch (docs/adr/0003). What the
queue holds is checked with `osqueue inspect --json`, as a user would.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from .support import produce_entries, queued_sequences
from .test_source import _output_rows, _run_job, flatten, run_query


def _committed(ckpt) -> list[int]:
    return sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())


def _planned(ckpt) -> list[int]:
    return sorted(int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit())


def _wait_for(predicate, seconds, job=None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        if job is not None and job.poll() is not None:
            pytest.fail("stream job exited early:\n" + job.stdout.read())
        time.sleep(0.1)
    pytest.fail(f"timed out after {seconds} s")


@pytest.mark.parametrize("max_batches", [None, "4"], ids=["one-micro-batch", "several-micro-batches"])
def test_a_finished_available_now_run_leaves_nothing_it_delivered_queued(spark, queue_dir, tmp_path, max_batches):
    expected = produce_entries(str(queue_dir), batches=10, per_batch=3)  # 30 entries, as in the issue
    assert queued_sequences(queue_dir) == list(range(10))
    options = {"maxBatchesPerTrigger": max_batches} if max_batches else {}
    batches, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", options=options)
    assert [r[2] for r in flatten(batches)] == expected
    assert queued_sequences(queue_dir) == [], "the run's last micro-batch is still queued"
    # The last progress agrees: nothing left to consume.
    last = query.recentProgress[-1]["sources"][0]["metrics"]
    assert (int(last["queueLength"]), int(last["batchesBehindLatest"])) == (0, 0), last


def test_a_finished_trigger_once_run_leaves_nothing_queued(spark, queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=4, per_batch=2)
    seen: dict[int, list] = {}
    query = (
        spark.readStream.format("osqueue")
        .option("gc", "false")
        .load(str(queue_dir))
        .writeStream.foreachBatch(
            lambda df, bid: seen.__setitem__(
                bid, [bytes(r.value).decode() for r in df.orderBy("sequence", "index").collect()]
            )
        )
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(once=True)
        .start()
    )
    assert query.awaitTermination(120) and query.exception() is None
    assert [v for b in sorted(seen) for v in seen[b]] == expected
    assert queued_sequences(queue_dir) == []


def test_a_stopped_query_dequeues_its_last_committed_batch_and_resumes_after_it(spark, queue_dir, tmp_path):
    first = produce_entries(str(queue_dir), batches=3, per_batch=2, tag="a")
    batches, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", available_now=False)
    try:
        query.processAllAvailable()
        assert [r[2] for r in flatten(batches)] == first
        # Running, its one micro-batch committed in the checkpoint but not yet to the source: still queued.
        assert queued_sequences(queue_dir) == [0, 1, 2]
    finally:
        query.stop()
    assert queued_sequences(queue_dir) == [], "query.stop() left the last committed batch queued"
    second = produce_entries(str(queue_dir), batches=2, per_batch=2, tag="b")
    again, _ = run_query(spark, str(queue_dir), tmp_path / "ckpt")
    assert [r[2] for r in flatten(again)] == second, "the restart re-read or skipped entries"
    assert queued_sequences(queue_dir) == []


def test_a_query_stopped_during_a_batch_keeps_that_batch_queued_and_the_restart_reads_it(spark, queue_dir, tmp_path):
    """The batch in flight at query.stop() never completes its sink commit: no commit-log entry, not dequeued."""
    expected = produce_entries(str(queue_dir), batches=3, per_batch=2)
    ckpt = tmp_path / "ckpt"
    in_batch, stopping = threading.Event(), threading.Event()
    delivered: dict[int, list] = {}

    def sink(df, batch_id):
        rows = sorted((r.sequence, r["index"], bytes(r.value).decode()) for r in df.collect())
        if any(r[0] == 2 for r in rows):  # the last batch: hold it until stop() is under way, then fail
            in_batch.set()
            stopping.wait(60)
            raise RuntimeError("the sink's commit did not complete")
        delivered[batch_id] = rows

    query = (
        spark.readStream.format("osqueue")
        .option("gc", "false")
        .option("maxBatchesPerTrigger", "1")
        .load(str(queue_dir))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    assert in_batch.wait(120), "the query never reached its last batch"
    stopper = threading.Thread(target=query.stop)
    stopper.start()
    _wait_for(lambda: not query.isActive, 60)  # stop() is under way
    stopping.set()
    stopper.join(90)
    assert not stopper.is_alive()
    held = _planned(ckpt)[-1]
    assert held not in _committed(ckpt), "the held batch was committed"
    assert queued_sequences(queue_dir) == [2], "the uncommitted batch was dequeued (or a committed one was not)"
    again, _ = run_query(spark, str(queue_dir), ckpt)
    assert sorted(again) == [held], "the restart did not re-run the uncommitted batch (alone)"
    assert [r[2] for b in sorted(delivered) for r in delivered[b]] + [r[2] for r in flatten(again)] == expected
    assert queued_sequences(queue_dir) == []


def test_kill_dash_nine_after_the_sink_wrote_and_before_the_commit_log_keeps_the_batch_queued(queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=3, per_batch=2)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    job = _run_job(queue_dir, ckpt, out, "--max-batches", "1", "--hold-at-sequence", "2")
    # The job writes the batch holding sequence 2 to its sink, then hangs before returning to Spark.
    _wait_for(lambda: any(r["sequence"] == 2 for r in _output_rows(out)), 180, job)
    time.sleep(1)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    held = max(_planned(ckpt))
    assert (out / f"batch-{held}.json").exists() and held not in _committed(ckpt), "not the window under test"
    assert queued_sequences(queue_dir) == [2], "a batch whose commit log was never written must stay queued"
    written_before = (out / f"batch-{held}.json").read_text()
    restart = _run_job(queue_dir, ckpt, out, "--available-now")
    output = restart.communicate(timeout=300)[0]
    assert restart.returncode == 0, output
    assert f"batch {held}: 2 rows" in output, "the restart did not deliver the batch again:\n" + output
    assert (out / f"batch-{held}.json").read_text() == written_before, "the replay read other entries"
    rows = _output_rows(out)
    assert [r["value"] for r in rows] == expected
    assert len({(r["sequence"], r["index"]) for r in rows}) == len(rows)
    assert queued_sequences(queue_dir) == []


def test_kill_dash_nine_after_the_commit_log_leaves_the_batch_for_the_next_run_to_dequeue_unread(queue_dir, tmp_path):
    """The other crash window: Spark committed the batch, the source had not dequeued it yet."""
    expected = produce_entries(str(queue_dir), batches=3, per_batch=2)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    job = _run_job(queue_dir, ckpt, out, "--max-batches", "1")
    _wait_for(lambda: (out / "batch-2.json").exists() and 2 in _committed(ckpt), 180, job)
    time.sleep(1)  # idle, waiting for data: no batch is planned
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    assert _planned(ckpt) == _committed(ckpt) == [0, 1, 2]
    assert queued_sequences(queue_dir) == [2], "the crash window: committed by Spark, not yet dequeued"
    restart = _run_job(queue_dir, ckpt, out, "--available-now")
    output = restart.communicate(timeout=300)[0]
    assert restart.returncode == 0, output
    assert not re.search(r"^batch \d+: ", output, re.M), "the restart delivered a committed batch again:\n" + output
    assert [r["value"] for r in _output_rows(out)] == expected
    assert queued_sequences(queue_dir) == [], "the next run did not dequeue the batch its checkpoint committed"
