"""The osqueue Spark source end to end from PySpark: S3 through s3a, PySpark's view of the errors, the
batch read, a Python driver killed with -9, executors in another JVM, and GC beside a stream.

The source's own behaviour (exactly once across restarts, read limits, fencing, data loss, foreign
and reset checkpoints, bad options) is tested in Scala: jvm/spark/src/test-lines/.../OsqueueMicroBatchStreamSuite.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

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


def assert_exactly_once(rows, expected_values):
    values = [r[2] for r in rows]
    assert values == expected_values, "entries lost, duplicated or out of order"
    assert [(r[0], r[1]) for r in rows] == sorted({(r[0], r[1]) for r in rows})


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
