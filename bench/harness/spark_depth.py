"""Issue 15's Spark depth benchmarks: the Spark source draining a deep backlog on a segmented manifest
vs a shallow one, and the driver's heap.

``spark_depth`` (the local store). Per depth D, bench/jvm/DeepQueue.java builds a queue of D batches
on the local store (K = 2,048: the shallow queue stays v1, the deep one is a head listing ~D/K
segments); the batches cycle over 1,000 real batch files of 10 records each, so every depth reads the
same bytes from the same files. Then a separate driver process (``python -m bench.harness.spark_depth
drain``: local[2], the driver JVM started with ``spark.driver.memory`` = 512 MB, i.e. -Xmx512m), after
an unmeasured warm-up run on another 1,000-batch queue (a fresh JVM's first Spark job costs seconds),
drains the queue with one AvailableNow query into the ``noop`` sink, without read limits (a
micro-batch covers the whole backlog: the case that must not load it on the driver), and reports
rows/s over the micro-batches' time (Spark's triggerExecution: planning, reading, commit;
``rows_per_s``) and over the wall clock from the query's start (``rows_per_s_wall``: the query's
fixed start-up cost dominates a small backlog), and the driver JVM's heap: its peak (the sum of the
heap pools' peak usage, garbage included: with -Xmx512m it can only show the run fit in 512 MB) and
the most it held after a collection (sampled every second: the live set). Both include the local
executors' work, which runs in the driver JVM.

``spark_depth_s3`` (the S3 test server, through the harness's latency proxy: 20 ms per request by
default). The same queues, built by DeepQueue.java on the S3 server directly (not through the proxy:
building is not what is measured), read through the proxy. A million batch GETs at 20 ms is hours on
2 cores, so the 1,000,000-batch backlog is read over its first ``S3_DEEP_BATCHES`` batches: one
AvailableNow micro-batch with ``maxBatchesPerTrigger`` = that many (the query is stopped once it is
reported), against the 1,000-batch backlog drained whole in one micro-batch (no read limit). Then,
in the same driver, a batch read of the whole 1M queue is planned without being run (the planner
walks all 488 segments over S3): its planning time, partitions and the driver heap it takes.
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
import uuid
from typing import Any

from bench.harness.environment import REPO_ROOT, Env, Settings

DEEP_QUEUE_SOURCE = REPO_ROOT / "bench" / "jvm" / "DeepQueue.java"
K = 2048
DRIVER_HEAP_MB = 512
DISTINCT_BATCHES, RECORDS_PER_BATCH, RECORD_BYTES = 1000, 10, 100
S3_DEEP_BATCHES = int(os.environ.get("OSQUEUE_BENCH_SPARK_DEPTH_S3_BATCHES", "20000"))
"""Batches of the 1M backlog read on S3 (one micro-batch with maxBatchesPerTrigger = this)."""


def build_queue(cp: str, uri: str, depth: int, store_options: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [
        shutil.which("java") or "java",
        "-Xmx1g",
        "-cp",
        cp,
        str(DEEP_QUEUE_SOURCE),
        uri,
        str(K),
        str(depth),
        str(DISTINCT_BATCHES),
        str(RECORDS_PER_BATCH),
        str(RECORD_BYTES),
        *(f"{k}={v}" for k, v in (store_options or {}).items()),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or len(lines) != 1:
        raise RuntimeError(f"DeepQueue.java exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return {"queue": uri, **lines[0]}


def build_local_queue(cp: str, root: pathlib.Path, depth: int) -> dict[str, Any]:
    queue = root / f"depth-{depth}"
    queue.mkdir(parents=True)
    return build_queue(cp, str(queue), depth)


class HeapWatch:
    """The driver JVM's heap from a point on: the pools' peak (garbage included) and the most held
    right after a collection (sampled every second: the live set)."""

    def __init__(self, spark: Any) -> None:
        jvm = spark.sparkContext._jvm
        mf = jvm.java.lang.management.ManagementFactory
        self.max_heap_mb = jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**20
        for pool in mf.getMemoryPoolMXBeans():
            pool.resetPeakUsage()
        self.pools = [p for p in mf.getMemoryPoolMXBeans() if str(p.getType()) == "Heap memory"]
        self.live = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.done.wait(1.0):
            self._after_gc()

    def _after_gc(self) -> None:
        after_gc = [p.getCollectionUsage() for p in self.pools]
        self.live = max(self.live, sum(u.getUsed() for u in after_gc if u is not None))

    def stop(self) -> dict[str, float]:
        self.done.set()
        self.thread.join()
        self._after_gc()
        peak = sum(pool.getPeakUsage().getUsed() for pool in self.pools)
        return {
            "driver_peak_heap_mb": round(peak / 2**20, 1),
            "driver_heap_after_gc_max_mb": round(self.live / 2**20, 1),
            "driver_max_heap_mb": round(self.max_heap_mb),
        }


def _session() -> Any:
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
    return spark


def drain(
    queue: str,
    checkpoint: str,
    warmup: str | None = None,
    store_options: dict[str, str] | None = None,
    max_batches: int | None = None,
    plan: bool = False,
) -> dict[str, Any]:
    """In the driver process: one AvailableNow query over the backlog into the noop sink, after the
    same query on `warmup` (unmeasured: a fresh JVM's first Spark job costs seconds). With
    `max_batches`, the first micro-batch of at most that many batches only (the query is stopped
    once it is reported). With `plan`, then a batch read of the whole queue is planned, not run."""
    spark = _session()
    opts = dict(store_options or {})

    def run(path: str, ckpt: str, limit: int | None) -> tuple[Any, list[Any]]:
        reader = spark.readStream.format("osqueue").option("gc", "false").options(**opts)
        if limit:
            reader = reader.option("maxBatchesPerTrigger", str(limit))
        q = (
            reader.load(path)
            .writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        if not limit:
            q.awaitTermination()
            return q, [p for p in q.recentProgress if p["numInputRows"] > 0]
        while True:  # the first micro-batch with rows, then stop (the next one may have started)
            progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
            if progress or not q.isActive:
                q.stop()
                if q.exception() is not None:
                    raise RuntimeError(f"the query failed: {q.exception()}")
                return q, progress[:1]
            time.sleep(0.1)

    if warmup:
        run(warmup, checkpoint + "-warmup", None)
    heap = HeapWatch(spark)
    t0 = time.monotonic()
    _, progress = run(queue, checkpoint, max_batches)
    elapsed = time.monotonic() - t0
    heap_stats = heap.stop()
    rows = sum(p["numInputRows"] for p in progress)
    in_batches_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    out: dict[str, Any] = {
        "rows": rows,
        "elapsed_s": round(elapsed, 2),
        "rows_per_s_wall": round(rows / elapsed, 1),
        "micro_batches": len(progress),
        "in_batches_s": round(in_batches_s, 2),
        "rows_per_s": round(rows / in_batches_s, 1),
        "duration_ms": progress[0]["durationMs"] if len(progress) == 1 else None,
        **heap_stats,
    }
    if plan:
        jvm = spark.sparkContext._jvm
        jvm.java.lang.System.gc()
        heap = HeapWatch(spark)
        t0 = time.monotonic()
        df = spark.read.format("osqueue").options(**opts).load(queue)
        planned = df._jdf.queryExecution().toRdd()  # plans the input partitions; runs no task
        partitions = planned.getNumPartitions()
        plan_s = time.monotonic() - t0
        jvm.java.lang.System.gc()  # the plan still held: the heap after this collection includes it
        held = jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed()
        out["plan_whole_queue"] = {
            "partitions": partitions,
            "plan_s": round(plan_s, 2),
            "driver_heap_held_with_plan_mb": round(held / 2**20, 1),
            **heap.stop(),
        }
        del planned
    spark.stop()
    return out


def _run_driver(args: list[str], what: str) -> dict[str, Any]:
    p = subprocess.run(
        [sys.executable, "-m", "bench.harness.spark_depth", "drain", *args],
        capture_output=True,
        text=True,
        timeout=7200,
        cwd=REPO_ROOT,
    )
    out = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or len(out) != 1:
        raise RuntimeError(f"the {what} driver exited {p.returncode}: {p.stderr.strip()[-3000:]}")
    return dict(out[0])


def _classpath(s: Settings, name: str) -> str | None:
    from bench.harness.jvm_benchmarks import bench_classpath

    return bench_classpath(s, name, DEEP_QUEUE_SOURCE)


def bench_spark_depth(env: Env, s: Settings) -> dict[str, Any]:
    cp = _classpath(s, "spark_depth")
    if cp is None:
        return {"skipped": "java or the core's class path not found"}
    depths = [1_000, 100_000] if s.quick else [1_000, 1_000_000]
    root = pathlib.Path(tempfile.mkdtemp(prefix="osq-bench-spark-depth-"))
    rows = []
    try:
        for depth in depths:
            s.log(f"spark_depth: building a queue of {depth} batches (K = {K}) ...")
            built = build_local_queue(cp, root, depth)
            warmup = build_local_queue(cp, root / "warmup", 1_000)
            s.log(f"spark_depth: draining it with a -Xmx{DRIVER_HEAP_MB}m driver ...")
            out = _run_driver([built["queue"], str(root / f"ckpt-{depth}"), warmup["queue"]], "spark_depth")
            row = {k: v for k, v in built.items() if k != "queue"} | out
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


def bench_spark_depth_s3(env: Env, s: Settings) -> dict[str, Any]:
    cp = _classpath(s, "spark_depth_s3")
    if cp is None:
        return {"skipped": "java or the core's class path not found"}
    deep = 100_000 if s.quick else 1_000_000
    deep_batches = min(S3_DEEP_BATCHES, deep)
    # Built on the S3 server directly; read through the proxy (env.options()).
    direct = {**env.options(), "fs.s3a.endpoint": env.server_endpoint}
    run_id = uuid.uuid4().hex[:8]
    ckpt = pathlib.Path(tempfile.mkdtemp(prefix="osq-bench-spark-depth-s3-"))
    rows = []
    try:
        for depth, limit in ((1_000, None), (deep, deep_batches)):
            s.log(f"spark_depth_s3: building a queue of {depth} batches (K = {K}) on the S3 server ...")
            built = build_queue(cp, env.uri(f"sparkdepth-{run_id}/d{depth}"), depth, direct)
            warmup = build_queue(cp, env.uri(f"sparkdepth-{run_id}/warmup{depth}"), 1_000, direct)
            what = "whole" if limit is None else f"first {limit} batches"
            s.log(f"spark_depth_s3: reading it ({what}) through the proxy with a -Xmx{DRIVER_HEAP_MB}m driver ...")
            args = [
                built["queue"],
                str(ckpt / f"ckpt-{depth}"),
                warmup["queue"],
                "--options",
                json.dumps(env.options()),
            ]
            if limit is not None:
                args += ["--max-batches", str(limit), "--plan"]
            out = _run_driver(args, "spark_depth_s3")
            row = {k: v for k, v in built.items() if k != "queue"} | {"batches_read": limit or depth} | out
            expected = (limit or depth) * RECORDS_PER_BATCH
            if row["rows"] != expected:
                raise RuntimeError(f"spark_depth_s3: read {row['rows']} rows, expected {expected}")
            s.log(
                f"spark_depth_s3 {depth:>9}: {row['segments']} segments; {row['rows']} rows in "
                f"{row['in_batches_s']} s = {row['rows_per_s']:.0f} rows/s ({row['elapsed_s']} s from the query's "
                f"start); driver heap peak {row['driver_peak_heap_mb']} MB, after GC at most "
                f"{row['driver_heap_after_gc_max_mb']} MB"
                + (f"; planning the whole queue: {row['plan_whole_queue']}" if "plan_whole_queue" in row else "")
            )
            rows.append(row)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    ratio = rows[-1]["rows_per_s"] / rows[0]["rows_per_s"]
    peak = max(
        [r["driver_peak_heap_mb"] for r in rows]
        + [r["plan_whole_queue"]["driver_peak_heap_mb"] for r in rows if "plan_whole_queue" in r]
    )
    return {
        "description": f"the Spark source (local[2], driver -Xmx{DRIVER_HEAP_MB}m) reading queues built on the S3 "
        f"server (K = {K}; batches cycle over {DISTINCT_BATCHES} real batch files of {RECORDS_PER_BATCH} x "
        f"{RECORD_BYTES} B records) through the latency proxy (+{env.latency_ms:g} ms per request) into the noop sink: "
        f"the 1,000-batch queue drained whole in one AvailableNow micro-batch; the {deep}-batch queue over its first "
        f"{deep_batches} batches (one micro-batch, maxBatchesPerTrigger); then a batch read of the whole deep queue "
        "planned, not run",
        "k": K,
        "latency_ms": env.latency_ms,
        "rows": rows,
        "rows_per_s_ratio_deep_to_1000": {"median": ratio, "min": ratio, "max": ratio, "n": 1},
        "driver_peak_heap_mb": peak,
        "goal": f"rows/s at the deep queue >= 0.8 x at 1,000; driver peak heap < {DRIVER_HEAP_MB} MB",
        "goal_met": bool(ratio >= 0.8 and peak < DRIVER_HEAP_MB),
    }


def main(argv: list[str]) -> None:
    usage = (
        "usage: python -m bench.harness.spark_depth drain QUEUE CHECKPOINT [WARM-UP QUEUE] "
        "[--options JSON] [--max-batches N] [--plan]"
    )
    if len(argv) < 3 or argv[0] != "drain":
        sys.exit(usage)
    positional: list[str] = []
    options: dict[str, str] = {}
    max_batches: int | None = None
    plan = False
    rest = iter(argv[1:])
    for a in rest:
        if a == "--options":
            options = json.loads(next(rest))
        elif a == "--max-batches":
            max_batches = int(next(rest))
        elif a == "--plan":
            plan = True
        else:
            positional.append(a)
    if len(positional) not in (2, 3):
        sys.exit(usage)
    print(json.dumps(drain(*positional, store_options=options, max_batches=max_batches, plan=plan)))


if __name__ == "__main__":
    main(sys.argv[1:])
