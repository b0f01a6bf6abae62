"""The micro-batch source dequeues in the background (issue 16): Spark's commit only hands the
committed end to the source's dequeuer, which coalesces commits into manifest writes while the
query goes on; `stop()` waits for it. Under a producer appending all the time, every entry is
delivered once, the queue shrinks while the query runs, and nothing delivered stays queued.
"""

from __future__ import annotations

import time

import pytest

from .support import produce_entries, queued_sequences
from .test_realtime import produce_slowly
from .test_source import flatten, run_query


def test_under_a_producer_appending_all_the_time_the_query_dequeues_as_it_goes_and_leaves_nothing_delivered(
    spark, queue_dir, tmp_path
):
    # ~20 manifest appends per second: the load that made the dequeue's CAS lose round after round.
    expected, producer = produce_slowly(queue_dir, batches=120, per_batch=2, every_s=0.03, tag="p")
    batches, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", available_now=False)
    try:
        deadline = time.monotonic() + 180
        dequeued_while_running = False
        while time.monotonic() < deadline and len(flatten(dict(batches))) < len(expected):
            assert query.exception() is None, query.exception()
            queued = queued_sequences(queue_dir)
            dequeued_while_running |= bool(queued) and queued[0] > 0
            time.sleep(0.2)
        producer.join(60)
        rows = flatten(dict(batches))
        assert [r[2] for r in rows] == expected, "entries lost, duplicated or out of order"
        assert dequeued_while_running, "nothing was dequeued while the query ran"
        # Idle long enough for latestOffset's polls to back off to maxPollInterval; what lands then is read.
        time.sleep(4)
        later = produce_entries(str(queue_dir), batches=2, per_batch=2, tag="late")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(flatten(dict(batches))) < len(expected) + len(later):
            time.sleep(0.1)
        assert [r[2] for r in flatten(dict(batches))] == expected + later
        # The rows reach foreachBatch before Spark writes their batch to the commit log; a stop() in
        # between rightly leaves that batch queued (it is replayed), so stop once it is committed.
        last = max(batches)
        while time.monotonic() < deadline and not (tmp_path / "ckpt" / "commits" / str(last)).exists():
            time.sleep(0.05)
        assert (tmp_path / "ckpt" / "commits" / str(last)).exists(), f"batch {last} was never committed"
    finally:
        query.stop()
    assert queued_sequences(queue_dir) == [], "the query's delivered entries are still queued after stop()"
    assert query.exception() is None


def test_a_fenced_query_fails_with_the_fence_error_although_its_commits_dequeue_in_the_background(
    spark, queue_dir, tmp_path
):
    expected, producer = produce_slowly(queue_dir, batches=40, per_batch=1, every_s=0.05, tag="f")
    batches, first = run_query(spark, str(queue_dir), tmp_path / "ckpt1", available_now=False)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not batches:
            time.sleep(0.1)
        assert batches, "the first query read nothing"
        # A second query takes the queue over: the first one's next call (plan, commit) meets the fence.
        _, second = run_query(spark, str(queue_dir), tmp_path / "ckpt2", available_now=False)
        try:
            with pytest.raises(Exception, match="fenced"):
                first.awaitTermination(120)
        finally:
            second.stop()
    finally:
        first.stop()
        producer.join(60)
