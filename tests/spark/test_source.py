"""The osqueue Spark source end to end: real Spark, real files, a real S3 server."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import osqueue
from osqueue.format import decode_manifest
from osqueue.store import LocalFileSystemStore

from .support import produce_entries, standalone_cluster

HERE = pathlib.Path(__file__).resolve().parent


def run_query(spark, path, checkpoint, *, available_now=True, options=None, timeout=120):
    """Runs a stream into an in-memory per-batch-id dict (replays overwrite: idempotent). Returns it."""
    batches: dict[int, list] = {}

    def collect(df, batch_id):
        batches[batch_id] = [
            (
                r.sequence,
                r["index"],
                bytes(r.value).decode(),
                None if r.metadata is None else bytes(r.metadata).decode(),
                r.ingestionTime,
                r.location,
            )
            for r in df.collect()
        ]

    reader = spark.readStream.format("osqueue").option("gc", "false")
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    writer = reader.load(path).writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
    query = (writer.trigger(availableNow=True) if available_now else writer).start()
    if available_now:
        assert query.awaitTermination(timeout), "AvailableNow query did not finish"
    return batches, query


def flatten(batches):
    return [row for bid in sorted(batches) for row in sorted(batches[bid])]


def manifest_of(path: pathlib.Path):
    return decode_manifest((path / "ingest" / "manifest").read_bytes(), "manifest")


def source_metric(query, name):
    """The last value of a source metric in the query's progress reports (they are cumulative)."""
    values = [
        int(p["sources"][0]["metrics"][name])
        for p in query.recentProgress
        if name in (p["sources"][0].get("metrics") or {})
    ]
    assert values, f"no '{name}' in the progress of {query}"
    return values[-1]


def assert_exactly_once(rows, expected_values):
    values = [r[2] for r in rows]
    assert values == expected_values, "entries lost, duplicated or out of order"
    assert [(r[0], r[1]) for r in rows] == sorted({(r[0], r[1]) for r in rows})


def test_stream_delivers_every_entry_once_in_order_with_metadata(spark, queue_dir, tmp_path):
    before = time.time()
    expected = produce_entries(str(queue_dir), batches=6, per_batch=5)
    batches, _ = run_query(spark, str(queue_dir), tmp_path / "ckpt")
    rows = flatten(batches)
    assert_exactly_once(rows, expected)
    for _seq, _index, value, meta, ingestion, location in rows:
        assert meta == "meta-e" + value[1:].split("-")[0]
        assert before - 1 <= ingestion.timestamp() <= time.time() + 1
        assert location.startswith("ingest/") and location.endswith(".batch")
    # The run ended with its micro-batch committed in the checkpoint: everything it read is dequeued.
    assert manifest_of(queue_dir).entries == []


def test_each_row_carries_the_metadata_and_ingestion_time_of_its_own_range(spark, queue_dir, tmp_path):
    """Several produce() calls in one flushed batch: one file, several metadata ranges."""
    calls = [(["a0", "a1"], b"first"), (["b0"], b"second"), (["c0", "c1", "c2"], b"third")]
    with osqueue.Producer(str(queue_dir), flush_interval=3600) as p:
        for values, meta in calls:
            p.produce([v.encode() for v in values], metadata=meta)
            time.sleep(0.05)  # distinct ingestion times per range
        p.flush()
    (entry,) = manifest_of(queue_dir).entries
    assert [mi.start_index for mi in entry.metadata] == [0, 2, 3]
    expected = [
        (i, v, meta.decode(), entry.metadata[k].ingestion_time_ms)
        for k, (values, meta) in enumerate(calls)
        for v in values
        for i in [sum(len(c[0]) for c in calls[:k]) + values.index(v)]
    ]
    batches, _ = run_query(spark, str(queue_dir), tmp_path / "ckpt")
    rows = flatten(batches)
    assert [(r[1], r[2], r[3], round(r[4].timestamp() * 1000)) for r in rows] == expected
    assert {r[5] for r in rows} == {entry.location}


def test_stream_on_localstack_s3_via_s3a(spark, localstack, s3_queue, tmp_path):
    uri, options = s3_queue
    bucket, prefix = uri.removeprefix("s3a://").split("/", 1)
    s3 = localstack.client()

    def manifest():
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}/ingest/manifest")["Body"].read()
        return decode_manifest(body, "manifest")

    before = time.time()
    expected = produce_entries(uri, batches=4, per_batch=3, store_options=options)
    locations = {e.sequence: e.location for e in manifest().entries}
    batches, _ = run_query(spark, uri, tmp_path / "ckpt", options={**options, "maxBatchesPerTrigger": "1"})
    rows = flatten(batches)
    assert_exactly_once(rows, expected)
    for seq, _index, value, meta, ingestion, location in rows:
        assert meta == "meta-e" + value[1:].split("-")[0]
        assert before - 1 <= ingestion.timestamp() <= time.time() + 1
        assert location == locations[seq]
    # One batch per micro-batch; the last one, committed in the checkpoint, is dequeued when the run ends.
    assert manifest().entries == []
    # The same queue spelled s3:// resumes the s3a:// checkpoint (queues are told apart by id).
    more = produce_entries(uri, batches=2, per_batch=1, store_options=options, tag="m")
    again, _ = run_query(spark, "s3://" + uri.removeprefix("s3a://"), tmp_path / "ckpt", options=options)
    assert [r[2] for r in flatten(again)] == more
    assert manifest().entries == [], "the s3:// run did not ack what Spark committed"


def test_s3_settings_come_from_the_session_when_the_reader_sets_none(spark, s3_queue, tmp_path):
    """Users configure S3 once, as spark.hadoop.fs.s3a.*; the source reads no per-reader keys here."""
    uri, options = s3_queue
    expected = produce_entries(uri, batches=2, per_batch=2, store_options=options)
    keys = {f"spark.hadoop.{k}": v for k, v in options.items()}
    for k, v in keys.items():
        spark.conf.set(k, v)
    try:
        batches, _ = run_query(spark, uri, tmp_path / "ckpt")
        assert [r[2] for r in flatten(batches)] == expected
    finally:
        for k in keys:
            spark.conf.unset(k)


def test_restart_resumes_from_checkpoint_and_dequeues_leftovers(spark, queue_dir, tmp_path):
    first = produce_entries(str(queue_dir), batches=3, per_batch=2, tag="a")
    b1, _ = run_query(spark, str(queue_dir), tmp_path / "ckpt")
    assert manifest_of(queue_dir).entries == [], "the first run's committed batch is dequeued when it ends"
    second = produce_entries(str(queue_dir), batches=2, per_batch=2, tag="b")
    b2, _ = run_query(spark, str(queue_dir), tmp_path / "ckpt")
    assert [r[2] for r in flatten(b1)] == first
    assert [r[2] for r in flatten(b2)] == second, "restart must resume from the checkpoint, not the head"
    assert [e.sequence for e in manifest_of(queue_dir).entries] == [] and manifest_of(queue_dir).next_sequence == 5


def test_max_batches_per_trigger_bounds_each_micro_batch(spark, queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=7, per_batch=2)
    batches, _ = run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"maxBatchesPerTrigger": "2"})
    assert_exactly_once(flatten(batches), expected)
    sizes = [len({r[0] for r in batches[b]}) for b in sorted(batches) if batches[b]]
    assert max(sizes) <= 2 and len(sizes) >= 4, sizes


def _wait_for(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_min_batches_per_trigger_waits_for_enough_batches(spark, queue_dir, tmp_path):
    first = produce_entries(str(queue_dir), batches=2, per_batch=2, tag="a")
    batches, query = run_query(
        spark,
        str(queue_dir),
        tmp_path / "ckpt",
        available_now=False,
        options={"minBatchesPerTrigger": "3", "maxTriggerDelay": "1h"},
    )
    try:
        assert _wait_for(lambda: len(query.recentProgress) >= 3, 60), "the query made no triggers"
        # Spark may run an empty batch 0 (from the initial offset to itself): no rows in it.
        assert not any(batches.values()), "2 batches available, 3 required: nothing may be read yet"
        third = produce_entries(str(queue_dir), batches=1, per_batch=2, tag="b")
        assert _wait_for(lambda: any(batches.values()), 60), "the third batch did not release the micro-batch"
        (rows,) = [b for b in batches.values() if b]
        assert sorted(r[2] for r in rows) == sorted(first + third), "one micro-batch with all three batches"
    finally:
        query.stop()


def test_max_trigger_delay_releases_fewer_batches_than_the_minimum(spark, queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=2, per_batch=2)
    started = time.monotonic()
    batches, query = run_query(
        spark,
        str(queue_dir),
        tmp_path / "ckpt",
        available_now=False,
        options={"minBatchesPerTrigger": "5", "maxTriggerDelay": "3s"},
    )
    try:
        assert _wait_for(lambda: any(batches.values()), 90), "maxTriggerDelay did not release the waiting batches"
        assert time.monotonic() - started >= 2.5, "released before maxTriggerDelay"
        (rows,) = [b for b in batches.values() if b]
        assert [r[2] for r in sorted(rows)] == expected
    finally:
        query.stop()


def test_available_now_drains_what_was_there_and_stops_while_producers_write(spark, queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=5, per_batch=2)
    stop = threading.Event()

    def keep_producing():
        with osqueue.Producer(str(queue_dir), flush_interval=0.01) as p:
            i = 0
            while not stop.is_set():
                p.produce([f"late{i}".encode()]).wait_durable(10)
                i += 1

    t = threading.Thread(target=keep_producing, daemon=True)
    t.start()
    time.sleep(0.3)
    try:
        present_at_start = manifest_of(queue_dir).next_sequence
        batches, _ = run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"maxBatchesPerTrigger": "2"})
        after = manifest_of(queue_dir).next_sequence
    finally:
        stop.set()
        t.join(10)
    rows = flatten(batches)
    values = [r[2] for r in rows]
    assert values[: len(expected)] == expected
    late = values[len(expected) :]
    assert len(late) == len(set(late)) and all(v.startswith("late") for v in late)
    # Exactly a prefix of the queue, with nothing missing inside it, covering all present at start.
    sequences = sorted({r[0] for r in rows})
    assert sequences == list(range(len(sequences))), "a gap in what AvailableNow delivered"
    assert present_at_start <= len(sequences) <= after


def test_progress_reports_queue_metrics(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=4, per_batch=1)
    _, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"maxBatchesPerTrigger": "1"})
    progress = query.recentProgress
    metrics = [p["sources"][0]["metrics"] for p in progress if p["sources"][0].get("metrics")]
    assert metrics, "no source metrics in progress"
    first = metrics[0]
    assert {"queueLength", "batchesBehindLatest", "numFilesOutstanding", "lagSeconds", "dataLossEvents"} <= set(first)
    assert int(first["batchesBehindLatest"]) >= 1
    assert float(first["lagSeconds"]) >= 0
    assert int(metrics[-1]["batchesBehindLatest"]) == 0


def test_progress_lag_covers_the_wait_and_outstanding_files_match_batches_behind(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=3, per_batch=1)
    time.sleep(2)  # the entries age before any read; lagSeconds must see at least that age
    _, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"maxBatchesPerTrigger": "1"})
    metrics = [p["sources"][0]["metrics"] for p in query.recentProgress if p["sources"][0].get("metrics")]
    behind = [m for m in metrics if int(m["batchesBehindLatest"]) >= 1]
    assert behind, "no progress reported while batches were outstanding"
    assert float(behind[0]["lagSeconds"]) >= 1.5
    for m in metrics:
        assert int(m["numFilesOutstanding"]) == int(m["batchesBehindLatest"])
        # The manifest never holds more than was produced, nor fewer than what is still unread.
        assert int(m["batchesBehindLatest"]) <= int(m["queueLength"]) <= 3


def test_second_query_fences_the_first(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=2, per_batch=1)
    seen = []
    q1 = (
        spark.readStream.format("osqueue")
        .option("gc", "false")
        .load(str(queue_dir))
        .writeStream.foreachBatch(lambda df, bid: seen.append(df.count()))
        .option("checkpointLocation", str(tmp_path / "c1"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    q1.processAllAvailable()
    first_after_q1 = manifest_of(queue_dir).entries[0].sequence
    epoch_q1 = manifest_of(queue_dir).epoch
    b2, q2 = run_query(spark, str(queue_dir), tmp_path / "c2")  # a second reader takes over
    assert manifest_of(queue_dir).epoch == epoch_q1 + 1
    produce_entries(str(queue_dir), batches=1, per_batch=1, tag="x")
    after_takeover = manifest_of(queue_dir)
    with pytest.raises(Exception) as err:
        q1.awaitTermination(60)
    assert "fenced" in str(err.value)
    assert f"consumer with epoch {epoch_q1} was fenced" in str(err.value)
    assert f"now at epoch {epoch_q1 + 1}" in str(err.value), "the error does not name the new epoch"
    assert not q1.isActive
    # The fenced query acked nothing after the takeover: the manifest is as the new reader left it.
    final = manifest_of(queue_dir)
    assert final.entries[0].sequence == after_takeover.entries[0].sequence >= first_after_q1
    assert [(e.sequence, e.location) for e in final.entries] == [
        (e.sequence, e.location) for e in after_takeover.entries
    ]


def test_corrupt_batch_fails_the_query_naming_the_object(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=2, per_batch=1)
    location = manifest_of(queue_dir).entries[1].location
    (queue_dir / location).write_bytes(b"\x00\x01garbage\x00\x00\x00\x00\x01\x00")
    with pytest.raises(Exception) as err:
        run_query(spark, str(queue_dir), tmp_path / "ckpt")
    assert location in str(err.value)
    assert "corrupt data batch" in str(err.value)


def test_corrupt_batch_fails_even_when_data_loss_is_allowed(spark, queue_dir, tmp_path):
    """failOnDataLoss=false skips what is gone, not what is damaged: corruption still stops the query."""
    produce_entries(str(queue_dir), batches=2, per_batch=1)
    location = manifest_of(queue_dir).entries[1].location
    (queue_dir / location).write_bytes(b"\x00\x01garbage\x00\x00\x00\x00\x01\x00")
    with pytest.raises(Exception) as err:
        run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"failOnDataLoss": "false"})
    assert location in str(err.value)
    assert "corrupt data batch" in str(err.value)


def test_missing_batch_is_data_loss_unless_allowed(spark, queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=3, per_batch=1)
    location = manifest_of(queue_dir).entries[1].location
    (queue_dir / location).unlink()
    with pytest.raises(Exception) as err:
        run_query(spark, str(queue_dir), tmp_path / "c1")
    assert "OSQUEUE_DATA_LOSS" in str(err.value) and location in str(err.value)
    batches, query = run_query(spark, str(queue_dir), tmp_path / "c2", options={"failOnDataLoss": "false"})
    assert [r[2] for r in flatten(batches)] == [expected[0], expected[2]]
    # The executors' skip is counted where the error hint says: the driver's source metrics.
    assert source_metric(query, "missingBatches") == 1
    assert source_metric(query, "dataLossEvents") == 1


def test_entries_removed_behind_the_checkpoint_are_data_loss(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=2, per_batch=1, tag="a")
    run_query(spark, str(queue_dir), tmp_path / "ckpt")
    produce_entries(str(queue_dir), batches=3, per_batch=1, tag="b")
    c = osqueue.Consumer(str(queue_dir))  # someone else consumes behind the query's back
    while (b := c.next_batch()) is not None:
        c.ack(b.sequence)
    c.close()
    with pytest.raises(Exception) as err:
        run_query(spark, str(queue_dir), tmp_path / "ckpt")
    assert "OSQUEUE_DATA_LOSS" in str(err.value) and "were removed" in str(err.value)


def test_entries_removed_behind_the_checkpoint_are_one_event_when_allowed(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=2, per_batch=1, tag="a")
    run_query(spark, str(queue_dir), tmp_path / "ckpt")  # the checkpoint ends at sequence 2
    later = produce_entries(str(queue_dir), batches=3, per_batch=1, tag="b")  # sequences 2, 3, 4
    c = osqueue.Consumer(str(queue_dir))  # someone else consumes 0..2 behind the query's back
    while (b := c.next_batch()) is not None and b.sequence <= 2:
        c.ack(b.sequence)
    c.close()
    assert manifest_of(queue_dir).entries[0].sequence == 3
    batches, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"failOnDataLoss": "false"})
    assert [r[2] for r in flatten(batches)] == later[1:]
    assert source_metric(query, "dataLossEvents") == 1, "one lost range must be counted once"


def _reset_queue(queue_dir):
    """What a restore or re-initialization of the manifest does: sequences start again at 0, same queue id."""
    for name in ("manifest", "manifest.dequeued"):
        (queue_dir / "ingest" / name).unlink(missing_ok=True)


def test_checkpoint_ahead_of_a_reset_queue_is_data_loss(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=3, per_batch=1, tag="a")
    run_query(spark, str(queue_dir), tmp_path / "ckpt")  # the checkpoint ends at sequence 3
    _reset_queue(queue_dir)
    produce_entries(str(queue_dir), batches=2, per_batch=1, tag="b")  # sequences 0, 1
    with pytest.raises(Exception) as err:
        run_query(spark, str(queue_dir), tmp_path / "ckpt")
    assert "OSQUEUE_DATA_LOSS" in str(err.value) and "reset or recreated" in str(err.value)


def test_checkpoint_ahead_of_a_reset_queue_continues_at_its_first_entry_when_allowed(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=3, per_batch=1, tag="a")
    run_query(spark, str(queue_dir), tmp_path / "ckpt")  # the checkpoint ends at sequence 3
    _reset_queue(queue_dir)
    reset = produce_entries(str(queue_dir), batches=2, per_batch=1, tag="b")  # sequences 0, 1
    allowed = {"failOnDataLoss": "false", "maxBatchesPerTrigger": "1"}
    batches, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", options=allowed)
    assert [r[2] for r in flatten(batches)] == reset, "the reset queue's entries were skipped"
    assert [r[0] for r in flatten(batches)] == [0, 1]
    assert source_metric(query, "dataLossEvents") == 1
    # The old checkpoint position acked nothing; Spark's commits of [0, 1) and (at the end of the
    # run) [1, 2) acked the reset queue's two entries, which the run read.
    assert [e.sequence for e in manifest_of(queue_dir).entries] == []
    more = produce_entries(str(queue_dir), batches=1, per_batch=1, tag="c")
    batches, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", options=allowed)
    assert [r[2] for r in flatten(batches)] == more, "a restart after the reset re-read or skipped entries"
    assert source_metric(query, "dataLossEvents") == 0


def test_checkpoint_inside_a_reset_queue_that_grew_past_it_is_data_loss(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=3, per_batch=1, tag="a")
    run_query(spark, str(queue_dir), tmp_path / "ckpt")  # the checkpoint ends at sequence 3
    _reset_queue(queue_dir)
    produce_entries(str(queue_dir), batches=6, per_batch=1, tag="b")  # sequences 0..5: past the checkpoint
    with pytest.raises(Exception) as err:
        run_query(spark, str(queue_dir), tmp_path / "ckpt")
    assert "OSQUEUE_DATA_LOSS" in str(err.value) and "incarnation" in str(err.value)
    assert [e.sequence for e in manifest_of(queue_dir).entries] == list(range(6)), "the failed query dequeued entries"


def test_checkpoint_inside_a_reset_queue_reads_it_from_its_first_entry_when_allowed(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=3, per_batch=1, tag="a")
    run_query(spark, str(queue_dir), tmp_path / "ckpt")
    _reset_queue(queue_dir)
    reset = produce_entries(str(queue_dir), batches=6, per_batch=1, tag="b")
    batches, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"failOnDataLoss": "false"})
    assert [r[2] for r in flatten(batches)] == reset, "the reset queue's entries below the old checkpoint were skipped"
    assert source_metric(query, "dataLossEvents") == 1
    more = produce_entries(str(queue_dir), batches=1, per_batch=1, tag="c")
    batches, query = run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"failOnDataLoss": "false"})
    assert [r[2] for r in flatten(batches)] == more and source_metric(query, "dataLossEvents") == 0
    # Every entry read after the reset is dequeued (the run's end dequeues its last committed batch), nothing more.
    m = manifest_of(queue_dir)
    assert m.entries == [] and m.next_sequence == 7


def test_checkpoint_of_another_queue_is_refused(spark, tmp_path):
    qa, qb = tmp_path / "qa", tmp_path / "qb"
    produce_entries(str(qa), batches=1, per_batch=1)
    produce_entries(str(qb), batches=1, per_batch=1)
    run_query(spark, str(qa), tmp_path / "ckpt")
    produce_entries(str(qa), batches=1, per_batch=1, tag="more")  # forces a second batch to be logged
    run_query(spark, str(qa), tmp_path / "ckpt")
    epoch_b = manifest_of(qb).epoch
    with pytest.raises(Exception) as err:
        run_query(spark, str(qb), tmp_path / "ckpt")
    assert "OSQUEUE_FOREIGN_CHECKPOINT" in str(err.value)
    assert manifest_of(qb).epoch == epoch_b, "a query refused for its checkpoint fenced the queue's reader"


def test_checkpoint_of_a_queue_recreated_at_the_same_path_is_refused(spark, queue_dir, tmp_path):
    produce_entries(str(queue_dir), batches=2, per_batch=1, tag="a")
    run_query(spark, str(queue_dir), tmp_path / "ckpt")
    shutil.rmtree(queue_dir)
    produce_entries(str(queue_dir), batches=5, per_batch=1, tag="b")
    with pytest.raises(Exception) as err:
        run_query(spark, str(queue_dir), tmp_path / "ckpt")
    assert "OSQUEUE_FOREIGN_CHECKPOINT" in str(err.value) and "was recreated" in str(err.value)


def test_the_same_queue_under_another_spelling_of_its_path_resumes(spark, queue_dir, tmp_path):
    first = produce_entries(str(queue_dir), batches=2, per_batch=1, tag="a")
    b1, _ = run_query(spark, str(queue_dir), tmp_path / "ckpt")
    second = produce_entries(str(queue_dir), batches=2, per_batch=1, tag="b")
    b2, _ = run_query(spark, queue_dir.as_uri(), tmp_path / "ckpt")  # file:///... for /...
    assert [r[2] for r in flatten(b1)] == first
    assert [r[2] for r in flatten(b2)] == second


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "option 'path' is required"),
        ({"path": "/tmp/x", "maxBatchesPerTrigger": "0"}, "'maxbatchespertrigger': '0'"),
        ({"path": "/tmp/x", "maxBatchesPerTrigger": "ten"}, "expected a positive integer"),
        ({"path": "/tmp/x", "minBatchesPerTrigger": "5", "maxBatchesPerTrigger": "2"}, "must not exceed"),
        ({"path": "/tmp/x", "maxTriggerDelay": "soon", "minBatchesPerTrigger": "2"}, "expected a duration"),
        ({"path": "/tmp/x", "failOnDataLoss": "maybe"}, "expected true or false"),
        ({"path": "/tmp/x", "gc": "sometimes"}, "invalid value for option 'gc': 'sometimes'"),
        ({"path": "/tmp/x", "gcInterval": "often"}, "invalid value for option 'gcinterval': 'often'"),
        ({"path": "/tmp/x", "gcInterval": "0s"}, "invalid value for option 'gcinterval': '0s'"),
        ({"path": "/tmp/x", "gcGracePeriod": "-1s"}, "invalid value for option 'gcgraceperiod': '-1s'"),
        ({"path": "/tmp/x", "maxBatchPerTrigger": "2"}, "unknown option 'maxbatchpertrigger'"),
        ({"path": "/tmp/x", "manifestPath": "../escape"}, "invalid value for option 'manifestpath'"),
        ({"path": "ftp://host/q"}, "ftp://host/q"),
    ],
)
def test_bad_options_fail_before_reading_with_the_option_named(spark, options, message, tmp_path):
    reader = spark.readStream.format("osqueue")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as err:
        q = reader.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
        q.awaitTermination(60)
    assert message in str(err.value)


def test_a_bad_option_reaches_pyspark_with_its_condition_and_parameters(spark, tmp_path):
    """The connector's errors are SparkThrowables: PySpark reads their condition like Spark's own."""
    from pyspark.errors import IllegalArgumentException

    with pytest.raises(IllegalArgumentException) as err:
        spark.read.format("osqueue").option("gc", "sometimes").load(str(tmp_path / "q"))
    assert err.value.getCondition() == "OSQUEUE_INVALID_OPTION_VALUE"
    assert err.value.getMessageParameters() == {
        "option": "gc",
        "value": "sometimes",
        "expected": "expected true or false",
    }
    assert "[OSQUEUE_INVALID_OPTION_VALUE] invalid value for option 'gc': 'sometimes'" in str(err.value)


def test_user_schema_is_refused(spark, queue_dir, tmp_path):
    with pytest.raises(Exception) as err:
        df = spark.readStream.format("osqueue").schema("value string").load(str(queue_dir))
        df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start().awaitTermination(60)
    assert "fixed schema" in str(err.value)
    with pytest.raises(Exception) as err:
        spark.read.format("osqueue").schema("value string").load(str(queue_dir)).collect()
    assert "fixed schema" in str(err.value)


def test_option_keys_are_case_insensitive(spark, queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=3, per_batch=1)
    batches, _ = run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"MAXBATCHESPERTRIGGER": "1"})
    assert [r[2] for r in flatten(batches)] == expected
    assert all(len({r[0] for r in rows}) <= 1 for rows in batches.values())


def _run_job(queue, ckpt, out, *extra):
    return subprocess.Popen(
        [sys.executable, str(HERE / "stream_job.py"), str(queue), str(ckpt), str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _output_rows(out: pathlib.Path):
    rows = []
    for f in sorted(out.glob("batch-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        rows += json.loads(f.read_text())
    return sorted(rows, key=lambda r: (r["sequence"], r["index"]))


def _kill_twice_then_drain(queue_dir, ckpt, out):
    """kill -9 the stream job after 3 and after 9 output batches (2 queue batches per trigger), then
    drain with AvailableNow from the same checkpoint; the output rows of all runs."""
    for kill_after in (3, 9):
        job = _run_job(queue_dir, ckpt, out, "--max-batches", "2")
        deadline = time.time() + 180
        while len(list(out.glob("batch-*.json"))) < kill_after and time.time() < deadline:
            if job.poll() is not None:
                pytest.fail("stream job exited early:\n" + job.stdout.read())
            time.sleep(0.05)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    job = _run_job(queue_dir, ckpt, out, "--max-batches", "2", "--available-now")
    assert job.wait(300) == 0, job.stdout.read()
    return _output_rows(out)


def test_kill_dash_nine_mid_stream_and_restart_delivers_each_entry_exactly_once(queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=30, per_batch=3)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    rows = _kill_twice_then_drain(queue_dir, ckpt, out)
    assert [r["value"] for r in rows] == expected
    assert len({(r["sequence"], r["index"]) for r in rows}) == len(rows)
    # The final run ended with its last batch committed: the queue holds nothing it delivered.
    offsets_dir = ckpt / "offsets"
    last = max(int(p.name) for p in offsets_dir.iterdir() if p.name.isdigit())
    assert (ckpt / "commits" / str(last)).exists()
    last_end = json.loads((offsets_dir / str(last)).read_text().splitlines()[-1])["nextSequence"]
    assert last_end == manifest_of(queue_dir).next_sequence == 30
    assert manifest_of(queue_dir).entries == []


def test_standalone_cluster_executors_in_another_jvm(queue_dir, tmp_path):
    with standalone_cluster(tmp_path) as master:
        expected = produce_entries(str(queue_dir), batches=6, per_batch=4)
        out = tmp_path / "out"
        job = _run_job(queue_dir, tmp_path / "ckpt", out, "--available-now", "--master", master)
        output = job.communicate(timeout=300)[0]
        assert job.returncode == 0, output
        assert [r["value"] for r in _output_rows(out)] == expected
        # The executor ran in the worker's JVM: its stderr lives under the work dir.
        assert list((tmp_path / "work").glob("app-*/*/stderr"))


def test_gc_with_the_stream_deletes_consumed_batches_and_nothing_unread(spark, queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=5, per_batch=2, gc_grace_period=1.0)  # the queue's grace
    seen = []
    q = (
        spark.readStream.format("osqueue")
        .option("gcInterval", "200ms")
        .option("gcGracePeriod", "1s")
        .option("maxBatchesPerTrigger", "2")
        .load(str(queue_dir))
        .writeStream.foreachBatch(
            lambda df, bid: seen.extend(bytes(r.value).decode() for r in df.orderBy("sequence", "index").collect())
        )
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        q.processAllAvailable()
        more = produce_entries(str(queue_dir), batches=1, per_batch=1, tag="late")  # makes Spark commit the last batch
        q.processAllAvailable()
        time.sleep(1.5)  # past the grace period
        # GC ages files by the store's clock against the head's last write (docs/format.md §6): an idle
        # queue's head stands still, so rewrite it unchanged, as a busy queue's writers would.
        store = LocalFileSystemStore(str(queue_dir))
        head = store.get("ingest/manifest")
        assert head is not None
        store.put_if_version_matches("ingest/manifest", head.data, head.version)
        time.sleep(1.0)  # several GC cycles
        referenced = {e.location for e in manifest_of(queue_dir).entries}
        on_disk = {f"ingest/{p.name}" for p in (queue_dir / "ingest").glob("*.batch")}
        assert on_disk == referenced, "GC left consumed batches or deleted referenced ones"
        assert seen == expected + more
    finally:
        q.stop()


def produce_apart(path, batches: int, per_batch: int, gc_grace_period: float = 600.0) -> list[str]:
    """Like produce_entries, but each batch file in a later millisecond: GC orders files by their ULID time."""
    values = []
    for b in range(batches):
        time.sleep(0.002)
        values += produce_entries(path, batches=1, per_batch=per_batch, tag=f"e{b}.", gc_grace_period=gc_grace_period)
    return values


@pytest.mark.parametrize("gc", ["true", "false"])
def test_gc_runs_a_cycle_when_the_stream_starts(spark, queue_dir, tmp_path, gc):
    """A short AvailableNow run collects what earlier runs consumed, without waiting a gcInterval."""
    produce_apart(str(queue_dir), batches=4, per_batch=1, gc_grace_period=1.0)  # the queue's grace: 1 s
    locations = [e.location for e in manifest_of(queue_dir).entries]
    run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"maxBatchesPerTrigger": "1"})
    time.sleep(1.0)  # the consumed files are past the queue's grace period (gcGracePeriod cannot shorten it)
    assert manifest_of(queue_dir).entries == []  # all consumed, their files still there
    assert all((queue_dir / loc).exists() for loc in locations)
    run_query(spark, str(queue_dir), tmp_path / "ckpt", options={"gc": gc, "gcGracePeriod": "1ms"})
    kept = [(queue_dir / loc).exists() for loc in locations]
    assert kept == ([False] * 4 if gc == "true" else [True] * 4)


def test_gc_with_a_tiny_grace_period_keeps_what_a_replayed_batch_reads(spark, queue_dir, tmp_path):
    """A micro-batch fails after its offsets were logged; the restart replays it while GC runs hard."""
    expected = produce_apart(str(queue_dir), batches=6, per_batch=2, gc_grace_period=1.0)  # the queue's grace: 1 s
    locations = [e.location for e in manifest_of(queue_dir).entries]
    out: dict[int, list] = {}
    ckpt = str(tmp_path / "ckpt")

    def start(fail_at):
        def collect(df, batch_id):
            out[batch_id] = sorted((r.sequence, r["index"], bytes(r.value).decode()) for r in df.collect())
            if batch_id == fail_at:
                raise RuntimeError(f"failing batch {batch_id} after it was read")

        return (
            spark.readStream.format("osqueue")
            .option("gcInterval", "20ms")
            .option("gcGracePeriod", "1ms")
            .option("maxBatchesPerTrigger", "2")
            .load(str(queue_dir))
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )

    with pytest.raises(Exception) as err:
        start(fail_at=1).awaitTermination(120)
    assert "failing batch 1" in str(err.value)
    failed_run = dict(out)
    assert sorted(failed_run) == [0, 1]
    out.clear()
    time.sleep(1.0)  # batch 0's files are past the queue's 1 s grace period whatever the first run's speed
    q = start(fail_at=None)
    assert q.awaitTermination(120) and q.exception() is None
    assert sorted(out)[0] == 1, "the restart did not replay the failed batch"
    assert out[1] == failed_run[1], "the replayed batch read other entries"
    merged = {**failed_run, **out}
    assert [r[2] for b in sorted(merged) for r in merged[b]] == expected
    # GC did run: the files of batch 0, acked before the restart, are gone.
    assert not (queue_dir / locations[0]).exists() and not (queue_dir / locations[1]).exists()
