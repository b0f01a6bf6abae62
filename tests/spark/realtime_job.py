"""A real-time-mode query (Spark 4.1+, Trigger.RealTime) from an osqueue queue into files, run as its own process.

`python realtime_job.py QUEUE CHECKPOINT OUT [--batch-duration 2s] [--option k=v ...] [--conf k=v ...]`

Real-time mode runs with the sinks Spark allows in it; of those in open-source Spark (console,
foreach, memory, Kafka) this job uses `foreach`: each row is written as it arrives to
OUT/epoch-<batch id>-p<partition>.jsonl (flushed per row, so a test sees rows as they land). The
file is truncated when Spark opens the writer for a (partition, batch id), so a batch that Spark
runs again after a crash replaces what its first attempt wrote: the sink is idempotent per batch id.
The trigger is set with `osqueue.spark.trigger_real_time` (`trigger(realTime=...)` from PySpark 4.2;
on classic PySpark 4.1, which has no such argument, Trigger.RealTime on the JVM writer).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from support import spark_builder  # noqa: E402

from osqueue.spark import trigger_real_time  # noqa: E402


class FileRowWriter:
    """A ForeachWriter: one JSON line per row, per (partition, batch id) file."""

    def __init__(self, out: str):
        self.out = out
        self.f = None

    def open(self, partition_id, epoch_id):
        self.f = open(pathlib.Path(self.out) / f"epoch-{epoch_id}-p{partition_id}.jsonl", "w")
        return True

    def process(self, r):
        seen_ms = time.time() * 1000
        self.f.write(
            json.dumps(
                {"sequence": r.sequence, "index": r["index"], "value": bytes(r.value).decode(), "seen_ms": seen_ms}
            )
            + "\n"
        )
        self.f.flush()

    def close(self, error):
        if self.f is not None:
            self.f.close()


def real_time_writer(df, spark, sink, duration: str):
    """`df.writeStream` with `sink` applied and Trigger.RealTime(duration) set."""
    writer = sink(df.writeStream.outputMode("update"))  # real-time mode refuses Append
    return trigger_real_time(writer, duration)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("queue")
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--batch-duration", default="2 seconds")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--option", action="append", default=[])
    ap.add_argument("--conf", action="append", default=[])
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    builder = spark_builder("osqueue-realtime-job", args.master).config(
        "spark.sql.streaming.realTimeMode.minBatchDuration", "500"
    )
    for kv in args.conf:
        k, v = kv.split("=", 1)
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    reader = spark.readStream.format("osqueue").option("gc", "false")
    for kv in args.option:
        k, v = kv.split("=", 1)
        reader = reader.option(k, v)
    df = reader.load(args.queue)
    writer = real_time_writer(df, spark, lambda w: w.foreach(FileRowWriter(str(out))), args.batch_duration)
    query = writer.option("checkpointLocation", args.checkpoint).start()
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
