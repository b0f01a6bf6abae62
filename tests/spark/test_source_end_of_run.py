"""When a streaming query ends, the source dequeues what Spark durably committed, and nothing more.

Spark commits a micro-batch's offsets to a source only when it plans the next batch; a run that
ends (AvailableNow or Once finishing, `query.stop()`) plans none. The source's `stop()` then reads
the checkpoint's commit log and dequeues through its last committed batch (docs/adr/0003). What the
queue holds is checked with `osqueue inspect --json`, as a user would. Here: the two crash windows
of a Python driver killed with -9; the in-process cases (AvailableNow, Once, query.stop(), a stop
during a batch) are in OsqueueMicroBatchStreamSuite.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from .support import produce_entries, queued_sequences
from .test_source import _output_rows, _run_job


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
