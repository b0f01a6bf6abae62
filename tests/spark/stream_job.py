"""A streaming query from an osqueue queue into per-batch JSON files, run as its own process.

`python stream_job.py QUEUE CHECKPOINT OUT [--available-now] [--max-batches N] [--option k=v ...]
[--hold-at-sequence S] [--conf k=v ...] [--s3] [--stop-file F]` (`--conf`: a session setting; `--s3`:
configure_spark_with_osqueue(s3=True), for an s3a:// checkpoint; `--stop-file F`: once F exists and
holds a sequence S, the job stops the query with `query.stop()` as soon as the micro-batch that
delivered S is in the local checkpoint's commit log, so the source's `stop()` acknowledges it, then
exits 0)

Each micro-batch's rows go to OUT/batch-<id>.json, written atomically (temp + rename), so a
replayed batch id overwrites the same file: the sink is idempotent per batch id, as Spark's
exactly-once contract requires of sinks. With `--hold-at-sequence S`, the micro-batch that holds
sequence S writes its file and then never returns: its sink wrote, but Spark never writes its
commit log (a test kills the job there).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from support import spark_builder  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("queue")
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--available-now", action="store_true")
    ap.add_argument("--max-batches", type=int)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--option", action="append", default=[])
    ap.add_argument("--hold-at-sequence", type=int)
    ap.add_argument("--conf", action="append", default=[])
    ap.add_argument("--s3", action="store_true")
    ap.add_argument("--stop-file", help="stop the query once it committed the sequence this file names")
    ap.add_argument("--python-source", action="store_true", help="read with osqueue.spark_source (osqueue_python)")
    ap.add_argument("--stores", action="append", default=[], help="configure_spark_with_osqueue(stores=...)")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    builder = spark_builder("osqueue-stream-job", args.master)
    for kv in args.conf:
        k, v = kv.split("=", 1)
        builder = builder.config(k, v)
    if args.s3:
        from osqueue.spark import configure_spark_with_osqueue

        builder = configure_spark_with_osqueue(builder, s3=True)
    if args.stores:  # the store artifacts (e.g. gcs), through spark.jars.packages
        from osqueue.spark import configure_spark_with_osqueue

        builder = configure_spark_with_osqueue(builder, stores=args.stores)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if args.python_source:
        from osqueue.spark_source import register

        reader = spark.readStream.format(register(spark)).option("checkpointLocation", args.checkpoint)
    else:
        reader = spark.readStream.format("osqueue").option("gc", "false")
    if args.max_batches:
        reader = reader.option("maxBatchesPerTrigger", str(args.max_batches))
    for kv in args.option:
        k, v = kv.split("=", 1)
        reader = reader.option(k, v)
    df = reader.load(args.queue)

    delivered = {"sequence": -1, "batch": -1}  # the highest sequence written and its micro-batch

    def write_batch(batch_df, batch_id: int) -> None:
        rows = [
            {
                "sequence": r.sequence,
                "index": r["index"],
                "value": bytes(r.value).decode(),
                "metadata": bytes(r.metadata).decode() if r.metadata is not None else None,
                "ingestion_ms": int(r.ingestionTime.timestamp() * 1000) if r.ingestionTime else None,
            }
            for r in batch_df.collect()
        ]
        tmp = out / f".batch-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out / f"batch-{batch_id}.json")
        if rows and max(r["sequence"] for r in rows) > delivered["sequence"]:
            delivered.update(sequence=max(r["sequence"] for r in rows), batch=batch_id)
        print(f"batch {batch_id}: {len(rows)} rows", flush=True)
        if args.hold_at_sequence is not None and any(r["sequence"] == args.hold_at_sequence for r in rows):
            print(f"holding batch {batch_id}", flush=True)
            while True:
                time.sleep(60)

    writer = df.writeStream.foreachBatch(write_batch).option("checkpointLocation", args.checkpoint)
    writer = (
        writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="200 milliseconds")
    )
    query = writer.start()
    if not args.stop_file:
        query.awaitTermination()
        return
    stop, commits = pathlib.Path(args.stop_file), pathlib.Path(args.checkpoint) / "commits"
    while not query.awaitTermination(0.1):
        if stop.exists() and stop.read_text().strip():
            until = int(stop.read_text())
            if delivered["sequence"] >= until and (commits / str(delivered["batch"])).exists():
                query.stop()  # the source's stop() dequeues through the last committed micro-batch
                print(f"stopped after sequence {until}", flush=True)
                break


if __name__ == "__main__":
    main()
