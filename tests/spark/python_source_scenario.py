"""What the Python data source (format "osqueue_python") must do on every pyspark line, in one Spark
session, classic or Spark Connect (tests/spark/test_python_source.py and test_connect.py run it; the
matrix tests/spark_lines.sh runs both on each line): a batch read with a window, df.write replayed
with the same (writerId, writerBatchId), and an AvailableNow stream from one queue into another
through the Python sink, which leaves nothing it delivered queued. On pyspark 4.2+ the stream runs
with maxBatchesPerTrigger (admission control: several micro-batches)."""

from __future__ import annotations

import json
import pathlib
import time

import pyspark

from osqueue.spark_source import register

from .support import manifest, native_values, produce_entries

SPARK = tuple(int(p) for p in pyspark.__version__.split(".")[:2])
WAIT_S = 120.0


def _values(rows) -> list[str]:
    return [bytes(r["value"]).decode() for r in sorted(rows, key=lambda r: (r["sequence"], r["index"]))]


def _drained(queue: pathlib.Path, timeout: float = 30.0) -> bool:
    """On pyspark 4.0 and 4.1 the source dequeues the last committed micro-batch as its query stops, just
    after the query ends: poll with a deadline (on 4.2+ it is dequeued before the query ends)."""
    deadline = time.monotonic() + timeout
    while manifest(queue).entries and time.monotonic() < deadline:
        time.sleep(0.05)
    return not manifest(queue).entries


def _commits(ckpt: pathlib.Path) -> int:
    return len([p for p in (ckpt / "commits").glob("[0-9]*") if p.name.isdigit()])


def run(spark, tmp: pathlib.Path) -> None:
    fmt = register(spark)
    source, target = tmp / "source", tmp / "target"
    expected = produce_entries(str(source), batches=3, per_batch=2, tag="s")

    # Batch read, with a window; it dequeues nothing.
    assert _values(spark.read.format(fmt).load(str(source)).collect()) == expected
    window = spark.read.format(fmt).option("startingSequence", "1").option("endingSequence", "2").load(str(source))
    assert _values(window.collect()) == expected[2:4]
    assert len(manifest(source).entries) == 3

    # df.write through the Python sink; the same (writerId, writerBatchId) again adds nothing.
    written = [f"w{i}" for i in range(5)]
    df = spark.createDataFrame([(v.encode(),) for v in written], "value binary")
    for _ in range(2):
        df.write.format(fmt).mode("append").option("writerId", "lines").option("writerBatchId", "1").save(str(target))
    assert sorted(native_values(target)) == written  # (read by a native consumer: target is drained)

    # AvailableNow from source into target through the Python sink (a stream writer needs writerId).
    ckpt = tmp / "ckpt"

    def stream(**options: str):
        reader = spark.readStream.format(fmt).option("checkpointLocation", str(ckpt))
        for k, v in options.items():
            reader = reader.option(k, v)
        return (
            reader.load(str(source))
            .select("value", "metadata")
            .writeStream.format(fmt)
            .option("writerId", "pipe")
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start(str(target))
        )

    # Admission control (pyspark 4.2+): at most 2 of the 3 entries per micro-batch. Older lines refuse the
    # option (tests/python/test_spark_source_options.py; one more query start here would cost seconds).
    query = stream(maxBatchesPerTrigger="2") if SPARK >= (4, 2) else stream()
    assert query.awaitTermination(WAIT_S), "the AvailableNow run did not finish"
    assert query.exception() is None, query.exception()
    assert sorted(native_values(target)) == sorted(expected)
    if SPARK >= (4, 2):  # admission control: 3 entries at most 2 per micro-batch
        assert _commits(ckpt) == 2, _commits(ckpt)
    # The run claimed its writer once (fencing older drivers), though each commit ran in a fresh worker.
    state = json.loads((target / "ingest" / "manifest.writers" / "cGlwZQ").read_text())
    assert state["generation"] == 1 and state["run"], state
    # The last micro-batch: on 4.2+ the run's last latestOffset dequeues it (Spark never commits it to the
    # source); on 4.0 and 4.1 (one micro-batch: AvailableNow falls back to a single batch) the reader's stop(),
    # run from the SIGTERM pyspark ends its Python worker with, just after the query ends.
    if SPARK >= (4, 2):
        assert not manifest(source).entries, "the run's last latestOffset did not dequeue its last micro-batch"
    assert _drained(source), "AvailableNow left entries it delivered queued"
