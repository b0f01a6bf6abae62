"""Issue 15's Spark depth benchmark (``spark_depth``): the Spark source draining a deep backlog on a
segmented manifest vs a shallow one, and the driver's peak heap.

Per depth D, bench/jvm/DeepQueue.java builds a queue of D batches on the local store (K = 2,048:
the shallow queue stays v1, the deep one is a head listing ~D/K segments); the batches cycle over
1,000 real batch files of 10 records each, so every depth reads the same bytes from the same files.
Then a separate driver process (``python -m bench.harness.spark_depth drain``: local[2], the
driver JVM started with ``spark.driver.memory`` = 512 MB, i.e. -Xmx512m), after an unmeasured
warm-up run on another 1,000-batch queue (a fresh JVM's first Spark job costs seconds), drains
the queue with one
AvailableNow query into the ``noop`` sink, without read limits (a micro-batch covers the whole
backlog: the case that must not load it on the driver), and reports rows/s over the micro-batches'
time (Spark's triggerExecution: planning, reading, commit; ``rows_per_s``) and over the wall
clock from the query's start (``rows_per_s_wall``: the query's fixed start-up cost dominates a
small backlog), and the driver JVM's
heap: its peak (the sum of the heap pools' peak usage, garbage included: with -Xmx512m it can only
show the run fit in 512 MB) and the most it held after a collection (sampled every second: the live
set). Both include the local executors' work, which runs in the driver JVM.

The local store, not the S3 test server: a million batch GETs at 20 ms on 2 cores would take hours;
the manifest work is what depth changes, and the local store shows it without the network.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from bench.harness.environment import REPO_ROOT, Env, Settings

DEEP_QUEUE_SOURCE = REPO_ROOT / "bench" / "jvm" / "DeepQueue.java"
K = 2048
DRIVER_HEAP_MB = 512
DISTINCT_BATCHES, RECORDS_PER_BATCH, RECORD_BYTES = 1000, 10, 100


def build_queue(cp: str, root: pathlib.Path, depth: int) -> dict[str, Any]:
    queue = root / f"depth-{depth}"
    queue.mkdir(parents=True)
    cmd = [
        shutil.which("java") or "java",
        "-Xmx1g",
        "-cp",
        cp,
        str(DEEP_QUEUE_SOURCE),
        str(queue),
        str(K),
        str(depth),
        str(DISTINCT_BATCHES),
        str(RECORDS_PER_BATCH),
        str(RECORD_BYTES),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or len(lines) != 1:
        raise RuntimeError(f"DeepQueue.java exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return {"queue": str(queue), **lines[0]}


def drain(queue: str, checkpoint: str, warmup: str | None = None) -> dict[str, Any]:
    """In the driver process: one AvailableNow query over the whole backlog into the noop sink,
    after the same query on `warmup` (unmeasured: a fresh JVM's first Spark job costs seconds)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from osqueue import jar_path

    spark = (
        SparkSession.builder.appName("osqueue-bench-spark-depth")
        .master("local[2]")
        .config("spark.jars", jar_path())
        .config("spark.driver.memory", f"{DRIVER_HEAP_MB}m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def run(path: str, ckpt: str) -> Any:
        q = (
            spark.readStream.format("osqueue")
            .option("gc", "false")
            .load(path)
            .writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        return q

    if warmup:
        run(warmup, checkpoint + "-warmup")
    jvm = spark.sparkContext._jvm
    mf = jvm.java.lang.management.ManagementFactory
    max_heap_mb = jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**20
    for pool in mf.getMemoryPoolMXBeans():
        pool.resetPeakUsage()
    heap_pools = [p for p in mf.getMemoryPoolMXBeans() if str(p.getType()) == "Heap memory"]
    live = [0]
    done = threading.Event()

    def sample() -> None:  # the heap in use right after the last collection: what the driver holds
        while not done.wait(1.0):
            after_gc = [p.getCollectionUsage() for p in heap_pools]
            live[0] = max(live[0], sum(u.getUsed() for u in after_gc if u is not None))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    query = run(queue, checkpoint)
    elapsed = time.monotonic() - t0
    done.set()
    sampler.join()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    in_batches_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    peak = sum(pool.getPeakUsage().getUsed() for pool in heap_pools)
    spark.stop()
    return {
        "rows": rows,
        "elapsed_s": round(elapsed, 2),
        "rows_per_s_wall": round(rows / elapsed, 1),
        "micro_batches": len(progress),
        "in_batches_s": round(in_batches_s, 2),
        "rows_per_s": round(rows / in_batches_s, 1),
        "driver_peak_heap_mb": round(peak / 2**20, 1),
        "driver_heap_after_gc_max_mb": round(live[0] / 2**20, 1),
        "driver_max_heap_mb": round(max_heap_mb),
    }


def bench_spark_depth(env: Env, s: Settings) -> dict[str, Any]:
    from bench.harness.jvm_benchmarks import jvm_classpath

    cp = os.environ.get("OSQUEUE_BENCH_JVM_CP") or jvm_classpath()
    if cp is None or not DEEP_QUEUE_SOURCE.is_file():
        s.log("spark_depth: skipped (needs java and the connector jar: the wheel's jars or OSQUEUE_BENCH_JVM_CP)")
        return {"skipped": "java or the core's class path not found"}
    depths = [1_000, 100_000] if s.quick else [1_000, 1_000_000]
    root = pathlib.Path(tempfile.mkdtemp(prefix="osq-bench-spark-depth-"))
    rows = []
    try:
        for depth in depths:
            s.log(f"spark_depth: building a queue of {depth} batches (K = {K}) ...")
            built = build_queue(cp, root, depth)
            warmup = build_queue(cp, root / "warmup", 1_000)
            s.log(f"spark_depth: draining it with a -Xmx{DRIVER_HEAP_MB}m driver ...")
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.harness.spark_depth",
                    "drain",
                    built["queue"],
                    str(root / f"ckpt-{depth}"),
                    warmup["queue"],
                ],
                capture_output=True,
                text=True,
                timeout=7200,
                cwd=REPO_ROOT,
            )
            out = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
            if p.returncode != 0 or len(out) != 1:
                raise RuntimeError(f"the spark_depth driver exited {p.returncode}: {p.stderr.strip()[-3000:]}")
            row = {k: v for k, v in built.items() if k != "queue"} | out[0]
            expected = depth * RECORDS_PER_BATCH
            if row["rows"] != expected:
                raise RuntimeError(f"spark_depth: drained {row['rows']} rows of a {expected}-row backlog")
            s.log(
                f"spark_depth {depth:>9}: {row['segments']} segments; {row['rows']} rows in {row['micro_batches']} "
                f"micro-batch(es) of {row['in_batches_s']} s = {row['rows_per_s']:.0f} rows/s ({row['elapsed_s']} s "
                f"from the query's start: {row['rows_per_s_wall']:.0f} rows/s); driver heap peak {row['driver_peak_heap_mb']} MB, "
                f"after GC at most {row['driver_heap_after_gc_max_mb']} MB"
            )
            rows.append(row)
            shutil.rmtree(built["queue"], ignore_errors=True)
            shutil.rmtree(root / "warmup", ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratio = rows[-1]["rows_per_s"] / rows[0]["rows_per_s"]
    peak = max(r["driver_peak_heap_mb"] for r in rows)
    return {
        "description": f"the Spark source (local[2], driver -Xmx{DRIVER_HEAP_MB}m) draining a queue of each depth in "
        f"one AvailableNow micro-batch (no read limit) into the noop sink; K = {K}; batches cycle over "
        f"{DISTINCT_BATCHES} real batch files of {RECORDS_PER_BATCH} x {RECORD_BYTES} B records; local store",
        "k": K,
        "rows": rows,
        "rows_per_s_ratio_deepest_to_1000": {"median": ratio, "min": ratio, "max": ratio, "n": 1},
        "driver_peak_heap_mb": peak,
        "goal": f"rows/s at the deepest >= 0.8 x at 1,000; driver peak heap < {DRIVER_HEAP_MB} MB",
        "goal_met": bool(ratio >= 0.8 and peak < DRIVER_HEAP_MB),
    }


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "drain":
        print(json.dumps(drain(*sys.argv[2:])))
    else:
        sys.exit("usage: python -m bench.harness.spark_depth drain QUEUE CHECKPOINT [WARM-UP QUEUE]")
