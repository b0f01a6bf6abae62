"""A streaming query from text files into an osqueue queue, run as its own process.

`python sink_job.py INPUT_DIR QUEUE CHECKPOINT [--crash-at POINT] [--master URL] [--trigger-ms MS] [--option k=v]
[--conf k=v] [--stores gcs]`

Each line becomes an entry (`value`), with the file name as its `metadata`. One file per trigger,
Trigger.AvailableNow (or, with `--trigger-ms`, a processing-time trigger that runs until the
query fails or the process is killed). `--crash-at` sets the connector's test-only crash point: the driver JVM exits
there as if killed.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from support import spark_builder  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("queue")
    ap.add_argument("checkpoint")
    ap.add_argument("--crash-at")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--trigger-ms", type=int)
    ap.add_argument("--option", action="append", default=[])
    ap.add_argument("--stores", action="append", default=[], help="configure_spark_with_osqueue(stores=...)")
    ap.add_argument("--conf", action="append", default=[])
    args = ap.parse_args()

    builder = spark_builder("osqueue-sink-job", args.master)
    if args.crash_at:
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dosqueue.test.crashAt={args.crash_at}")
    for kv in args.conf:
        k, v = kv.split("=", 1)
        builder = builder.config(k, v)
    if args.stores:  # the store artifacts (e.g. gcs), through spark.jars.packages
        from osqueue.spark import configure_spark_with_osqueue

        builder = configure_spark_with_osqueue(builder, stores=args.stores)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from pyspark.sql import functions as F

    lines = (
        spark.readStream.option("maxFilesPerTrigger", 1)
        .text(args.input)
        .select(
            F.col("value").cast("binary").alias("value"),
            F.element_at(F.split(F.input_file_name(), "/"), -1).cast("binary").alias("metadata"),
        )
    )
    writer = lines.writeStream.format("osqueue").option("checkpointLocation", args.checkpoint)
    for kv in args.option:
        k, v = kv.split("=", 1)
        writer = writer.option(k, v)
    if args.trigger_ms:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.start(args.queue)
    print("query started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
