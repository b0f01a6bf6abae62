"""A streaming query from one osqueue queue on Azure into another (the osqueue sink), run as its own
process: `python azure_stream_job.py SOURCE SINK CHECKPOINT [--available-now] [--conf k=v ...]`.

The session gets the Azure store the way a Python user adds it, configure_spark_with_osqueue(...,
stores=["azure"]) (the artifact through spark.jars.packages; the tests pass the build's Maven
repository and a fresh Ivy cache as --conf), and its fs.azure.* keys as spark.hadoop.* settings.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "spark"))
from support import spark_builder  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("sink")
    ap.add_argument("checkpoint")
    ap.add_argument("--available-now", action="store_true")
    ap.add_argument("--conf", action="append", default=[])
    args = ap.parse_args()

    from osqueue.spark import configure_spark_with_osqueue

    builder = spark_builder("osqueue-azure-job")
    for kv in args.conf:
        builder = builder.config(*kv.split("=", 1))
    spark = configure_spark_with_osqueue(builder, stores=["azure"]).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    df = (
        spark.readStream.format("osqueue")
        .option("maxBatchesPerTrigger", "2")
        .option("gc", "false")
        .load(args.source)
        .select("value", "metadata")
    )
    writer = df.writeStream.format("osqueue").option("checkpointLocation", args.checkpoint)
    writer = (
        writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="200 milliseconds")
    )
    query = writer.start(args.sink)
    print("query started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
