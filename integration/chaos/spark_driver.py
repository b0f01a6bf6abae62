"""The chaos run's Spark driver (its own process group, killed with SIGKILL and restarted).

    python -m integration.chaos.spark_driver --queue s3a://b/chaos --checkpoint DIR --out DIR
        --options JSON [--max-batches N] [--trigger-ms MS] [--available-now] [--stop-file FILE]

A streaming query ``format("osqueue")`` -> ``foreachBatch``: each micro-batch's rows go to
``OUT/batch-<batchId>.jsonl``, one JSON array ``[sequence, index, value, location]`` per line,
written to a temp file and renamed, so a replayed batch id rewrites the same file (a sink keyed
by batch id, hence by (sequence, index)). Local checkpoint. Prints one line per micro-batch.
Exits non-zero when the query fails (the chaos harness counts and restarts it). With
``--stop-file``: once FILE holds a sequence S, the driver calls ``query.stop()`` as soon as the
micro-batch that delivered S is in the (local) checkpoint's commit log, so the source's ``stop()``
acknowledges it (a subscription's last batch is acknowledged only then), and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time


def _committed_through(commits: pathlib.Path, until: int, out: str) -> bool:
    """A restarted driver with nothing left to deliver: an earlier incarnation's committed batch
    (in the commit log) wrote sequence ``until``."""
    for f in pathlib.Path(out).glob("batch-*.jsonl"):
        batch_id = f.stem.split("-")[1]
        if (commits / batch_id).exists():
            with open(f, encoding="utf-8") as fh:
                if any(json.loads(line)[0] >= until for line in fh if line.endswith("\n")):
                    return True
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queue", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--options", default="{}", help="JSON object of source options (fs.s3a.* etc.)")
    ap.add_argument("--max-batches", type=int, default=0)
    ap.add_argument("--trigger-ms", type=int, default=500)
    ap.add_argument("--available-now", action="store_true")
    ap.add_argument("--stop-file", help="stop the query once it committed the sequence this file names")
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

    delivered = {"sequence": -1, "batch": -1}  # the highest sequence written and its micro-batch

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
        if seqs and max(seqs) > delivered["sequence"]:
            delivered.update(sequence=max(seqs), batch=batch_id)
        span = f"sequences {min(seqs)}..{max(seqs)}" if seqs else "empty"
        print(f"{time.time():.3f} batch {batch_id}: {len(rows)} rows, {span}", flush=True)

    writer = df.writeStream.foreachBatch(write_batch).option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    query = writer.start()
    print(f"{time.time():.3f} started query {query.id} run {query.runId}", flush=True)
    stop, commits = (
        (pathlib.Path(args.stop_file) if args.stop_file else None),
        pathlib.Path(args.checkpoint) / "commits",
    )
    try:
        while not query.awaitTermination(0.2):
            if stop is not None and stop.exists() and stop.read_text().strip():
                until = int(stop.read_text())
                if delivered["sequence"] < until and not _committed_through(commits, until, args.out):
                    continue
                if delivered["sequence"] >= until and not (commits / str(delivered["batch"])).exists():
                    continue
                query.stop()  # the source's stop() dequeues through the last committed micro-batch
                print(f"{time.time():.3f} stopped after sequence {until}", flush=True)
                return 0
    except Exception as e:  # noqa: BLE001 - the harness reads this line and restarts us
        print(f"{time.time():.3f} query failed: {type(e).__name__}: {str(e)[:2000]}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
