"""osqueue as a PySpark Python data source (osqueue.spark_source, format "osqueue_python") on a classic
local session: batch read, streams (AvailableNow, kill -9 and restart), the sink's idempotence, and
queues shared with the JVM connector in both directions. One session for the module (conftest's)."""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyarrow", reason="the Python data source needs pyarrow (osqueue[spark])")
pytest.importorskip("pyspark.sql.datasource", reason="the Python data source API (pyspark 4.0 on)")

from osqueue.spark_source import register  # noqa: E402
from osqueue.spark_source.options import SinkOptions  # noqa: E402
from osqueue.spark_source.writer import OsqueueStreamWriter, write_task  # noqa: E402

from . import python_source_scenario  # noqa: E402
from .support import manifest, native_values, produce_entries  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
# The source runs in Spark's Python workers, which must import osqueue: this venv's Python (set before
# the session starts, at collection; the stream job's subprocesses inherit it).
os.environ["PYSPARK_PYTHON"] = sys.executable


@pytest.fixture(scope="module")
def pyspark_session(spark):
    """conftest's session (the JVM connector jar on it) with the Python source registered."""
    assert register(spark) == "osqueue_python"
    return spark


def test_python_source_on_this_line(pyspark_session, tmp_path):
    """The matrix's classic case (tests/spark_lines.sh): batch read, df.write, AvailableNow through the sink."""
    python_source_scenario.run(pyspark_session, tmp_path)


def _values(df) -> list[str]:
    return [bytes(r.value).decode() for r in df.orderBy("sequence", "index").collect()]


def test_batch_read_takes_the_window_options_and_acks_nothing(pyspark_session, queue_dir):
    expected = produce_entries(str(queue_dir), batches=4, per_batch=3)

    def read():  # a new reader each time: option() changes the reader it is called on
        return pyspark_session.read.format("osqueue_python")

    rows = read().option("STARTINGSEQUENCE", "1").option("endingSequence", "3").load(str(queue_dir)).collect()
    assert sorted((r.sequence, r["index"]) for r in rows) == [(s, i) for s in (1, 2) for i in range(3)]
    assert {bytes(r.metadata).decode() for r in rows} == {"meta-e1", "meta-e2"}
    assert all(r.ingestionTime is not None and r.location.startswith("ingest/") for r in rows)
    assert _values(read().load(str(queue_dir))) == expected
    assert len(manifest(queue_dir).entries) == 4  # a batch read dequeues nothing
    with pytest.raises(Exception, match=r"OSQUEUE_UNKNOWN_OPTION.*maxBatchesPerTrigger|OSQUEUE_UNKNOWN_OPTION"):
        read().option("maxBatchesPerTrigger", "2").load(str(queue_dir)).collect()
    with pytest.raises(Exception, match=r"\[OSQUEUE_INVALID_OPTION_VALUE\].*'failondataloss'"):
        read().option("failOnDataLoss", "maybe").load(str(queue_dir)).collect()


def test_the_jvm_connector_keeps_format_osqueue(pyspark_session, queue_dir):
    """With the jar on the session, register(as_osqueue=True) is refused and format("osqueue") stays
    the JVM connector; "osqueue_python" picks the Python source."""
    with pytest.raises(Exception, match=r"DATA_SOURCE_ALREADY_EXISTS.*'osqueue'"):
        register(pyspark_session, as_osqueue=True)
    produce_entries(str(queue_dir), batches=1, per_batch=2)
    jvm_plan = pyspark_session.read.format("osqueue").load(str(queue_dir))._jdf.queryExecution().toString()
    py_plan = pyspark_session.read.format("osqueue_python").load(str(queue_dir))._jdf.queryExecution().toString()
    assert "Python" not in jvm_plan and "osqueue" in jvm_plan.lower()
    assert "Python" in py_plan


def _available_now(spark, queue, ckpt, fmt="osqueue_python"):
    seen: list[str] = []
    reader = spark.readStream.format(fmt)
    if fmt == "osqueue_python":
        reader = reader.option("checkpointLocation", str(ckpt))
    q = (
        reader.load(str(queue))
        .writeStream.foreachBatch(lambda df, _: seen.extend(_values(df)))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    assert q.exception() is None
    return seen


def _wait_until_empty(queue_dir, timeout: float = 30.0) -> None:
    """The source's reader worker dequeues the last committed micro-batch as Spark ends it, just after
    awaitTermination returns: poll with a deadline."""
    deadline = time.monotonic() + timeout
    while manifest(queue_dir).entries and time.monotonic() < deadline:
        time.sleep(0.05)
    assert manifest(queue_dir).entries == []


def test_a_queue_written_by_either_sink_is_read_exactly_once_by_either_source(pyspark_session, tmp_path):
    """JVM and Python sinks and sources share queues: each sink's df.write, replayed with the same
    (writerId, writerBatchId), enqueues once, and each source's AvailableNow run then reads every entry
    exactly once and leaves nothing it delivered queued (the 4 combinations)."""
    for sink, source in itertools.product(("osqueue", "osqueue_python"), repeat=2):
        queue = tmp_path / f"{sink}-{source}-queue"
        rows = [(f"{sink}-{source}-{i}", b"m") for i in range(12)]
        df = pyspark_session.createDataFrame(rows, "value string, metadata binary").repartition(3)
        for _ in range(2):  # the replay of (etl, 7) adds nothing
            df.write.format(sink).mode("append").option("writerId", "etl").option("writerBatchId", "7").save(str(queue))
        assert len(manifest(queue).entries) == 3
        state = json.loads((queue / "ingest" / "manifest.writers" / "ZXRs").read_text())  # one format, both sinks
        assert (state["writerId"], state["lastCommittedBatch"], state["owner"]) == ("etl", 7, "df.write")
        seen = _available_now(pyspark_session, queue, tmp_path / f"{sink}-{source}-ckpt", fmt=source)
        assert sorted(seen) == sorted(v for v, _ in rows), (sink, source)
        _wait_until_empty(queue)


def test_a_replayed_stream_epoch_adds_nothing(queue_dir):
    """The driver's commit of one epoch twice (a restart replaying it): one copy is enqueued, the
    replay's files are deleted."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    options = SinkOptions.parse({"path": str(queue_dir), "writerId": "stream-a"})
    writer = OsqueueStreamWriter(options, StructType([StructField("value", BinaryType())]), "python:/ckpt")
    first = write_task(options, iter([(b"a", None), (b"b", None)]))
    replay = write_task(options, iter([(b"a", None), (b"b", None)]))
    writer.commit([first], 0)
    writer.commit([replay], 0)
    assert native_values(queue_dir) == ["a", "b"]
    assert not (queue_dir / replay.batches[0].location).exists()


def _run_python_job(queue, ckpt, out, *extra):
    return subprocess.Popen(
        [sys.executable, str(HERE / "stream_job.py"), str(queue), str(ckpt), str(out), "--python-source", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _output_values(out: pathlib.Path) -> list[str]:
    rows = []
    for f in out.glob("batch-*.json"):
        rows += json.loads(f.read_text())
    return [r["value"] for r in sorted(rows, key=lambda r: (r["sequence"], r["index"]))]


@pytest.mark.line_ends
def test_kill_dash_nine_mid_stream_twice_then_restart_gives_exact_counts(queue_dir, tmp_path):
    """Entries produced while the job runs, the job killed with -9 twice mid-stream; AvailableNow
    runs from the same checkpoint then end with every entry delivered once (by batch id: a replayed
    micro-batch rewrites its own file) and nothing delivered left queued."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    expected: list[str] = []
    for run in range(2):
        job = _run_python_job(queue_dir, ckpt, out)
        deadline = time.monotonic() + 180
        for round_ in range(3):
            expected += produce_entries(str(queue_dir), batches=2, per_batch=2, tag=f"r{run}-{round_}-")
            while expected[-1] not in _output_values(out) and time.monotonic() < deadline:
                if job.poll() is not None:
                    pytest.fail("stream job exited early:\n" + job.stdout.read())
                time.sleep(0.05)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    expected += produce_entries(str(queue_dir), batches=2, per_batch=2, tag="last-")
    # pyspark 4.0 and 4.1 run AvailableNow on a Python source as ONE micro-batch (Spark warns "does not
    # support Trigger.AvailableNow"): a run after a kill first replays the batch the kill left uncommitted,
    # and the next run reads the rest. Drain with at most two runs (4.2+ drains in the first).
    for _ in range(2):
        job = _run_python_job(queue_dir, ckpt, out, "--available-now")
        assert job.wait(300) == 0, job.stdout.read()
        if _output_values(out) == expected:
            break
    assert _output_values(out) == expected
    assert manifest(queue_dir).entries == []


def test_real_time_mode_is_refused_before_the_queue_is_touched(pyspark_session, queue_dir, tmp_path):
    """Spark (4.1+) refuses real-time mode on every Python data source: PythonMicroBatchStream does not
    implement SupportsRealTimeMode (checked in pyspark 4.1 to 4.3), and the query fails at its start with
    STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED naming it, before any offset: the queue is not
    taken over (its epoch is unchanged) and nothing is dequeued. Real-time mode needs the JVM connector."""
    import pyspark

    import osqueue.spark as osq

    if tuple(int(p) for p in pyspark.__version__.split(".")[:2]) < (4, 1):
        pytest.skip(f"pyspark {pyspark.__version__} has no real-time mode (4.1+)")
    produce_entries(str(queue_dir), batches=1, per_batch=1, tag="rt")
    before = manifest(queue_dir)
    writer = (
        pyspark_session.readStream.format("osqueue_python")
        .load(str(queue_dir))
        .writeStream.outputMode("update")
        .foreach(lambda row: None)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    query = osq.trigger_real_time(writer, "5 seconds").start()  # 5 s: Spark's minimum real-time batch
    try:
        with pytest.raises(Exception, match=r"STREAMING_REAL_TIME_MODE\.INPUT_STREAM_NOT_SUPPORTED.*PythonMicroBatch"):
            query.awaitTermination(120)
    finally:
        query.stop()
    after = manifest(queue_dir)
    assert [e.sequence for e in after.entries] == [e.sequence for e in before.entries]
    assert after.epoch == before.epoch, "the refused query took the queue over"
