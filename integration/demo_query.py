"""The demo's Spark job: count events per action from an osqueue queue, one result file per micro-batch.

`python demo_query.py QUEUE CHECKPOINT OUT [--available-now]`. A replayed micro-batch rewrites its
own file (keyed by batch id), so results stay exact across crashes.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import osqueue.spark as osq


def main() -> None:
    queue, checkpoint, out = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    available_now = "--available-now" in sys.argv
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.appName("osqueue-demo")
        .master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    spark = osq.configure_spark_with_osqueue(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    events = osq.read_stream(spark, queue, max_batches_per_trigger=100).select(
        F.get_json_object(F.col("value").cast("string"), "$.action").alias("action"),
        F.col("metadata").cast("string").alias("source"),
    )

    def write_counts(df, batch_id: int) -> None:
        counts = {f"{r.source}/{r.action}": r["count"] for r in df.groupBy("source", "action").count().collect()}
        tmp = out / f".batch-{batch_id}.tmp"
        tmp.write_text(json.dumps(counts))
        os.replace(tmp, out / f"batch-{batch_id}.json")
        print(f"  spark: micro-batch {batch_id} counted {sum(counts.values())} events", flush=True)

    writer = events.writeStream.foreachBatch(write_counts).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="300 milliseconds")
    writer.start().awaitTermination()


if __name__ == "__main__":
    main()
