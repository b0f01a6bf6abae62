"""The chaos run's Spark driver (its own process group, killed with SIGKILL and restarted).

    python -m integration.chaos.spark_driver --queue s3a://b/chaos --checkpoint DIR --out DIR
        --options JSON [--max-batches N] [--trigger-ms MS] [--available-now]

A streaming query ``format("osqueue")`` -> ``foreachBatch``: each micro-batch's rows go to
``OUT/batch-<batchId>.jsonl``, one JSON array ``[sequence, index, value, location]`` per line,
written to a temp file and renamed, so a replayed batch id rewrites the same file (a sink keyed
by batch id, hence by (sequence, index)). Local checkpoint. Prints one line per micro-batch.
Exits non-zero when the query fails (the chaos harness counts and restarts it).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queue", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--options", default="{}", help="JSON object of source options (fs.s3a.* etc.)")
    ap.add_argument("--max-batches", type=int, default=0)
    ap.add_argument("--trigger-ms", type=int, default=500)
    ap.add_argument("--available-now", action="store_true")
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from pyspark.sql import SparkSession

    import osqueue.spark as osq

    builder = (
        SparkSession.builder.appName("osqueue-chaos")
        .master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "1g")
    )
    spark = osq.configure_spark_with_osqueue(builder).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    reader = spark.readStream.format("osqueue")
    for k, v in json.loads(args.options).items():
        reader = reader.option(k, str(v))
    if args.max_batches:
        reader = reader.option("maxBatchesPerTrigger", str(args.max_batches))
    df = reader.load(args.queue).selectExpr("sequence", "index", "cast(value as string) as v", "location")

    def write_batch(batch_df, batch_id: int) -> None:
        rows = batch_df.collect()
        tmp = out / f".batch-{batch_id}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps([r["sequence"], r["index"], r["v"], r["location"]]) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out / f"batch-{batch_id}.jsonl")
        seqs = [r["sequence"] for r in rows]
        span = f"sequences {min(seqs)}..{max(seqs)}" if seqs else "empty"
        print(f"{time.time():.3f} batch {batch_id}: {len(rows)} rows, {span}", flush=True)

    writer = df.writeStream.foreachBatch(write_batch).option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    query = writer.start()
    print(f"{time.time():.3f} started query {query.id} run {query.runId}", flush=True)
    try:
        query.awaitTermination()
    except Exception as e:  # noqa: BLE001 - the harness reads this line and restarts us
        print(f"{time.time():.3f} query failed: {type(e).__name__}: {str(e)[:2000]}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
