"""``delta``: many small Python producers, each its own OS process, into osqueue vs into a Delta
table with delta-rs (the ``deltalake`` package), each streamed by Spark (``format("osqueue")`` vs
Spark's Delta source, the ``delta-spark`` jar for the Spark line under test, fetched with Maven):
produce -> row seen in ``foreachBatch`` (p50 / p99) and rows/s delivered.

Both sides on the local filesystem: pyspark's jars have no ``hadoop-aws``, so Spark's Delta source
cannot read ``s3a://`` here (as for the text-file source of ``spark_file``)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.harness.environment import REPO_ROOT, Env, Settings
from bench.harness.kafka import _maven_fetch
from bench.harness.stats import percentile, summarize

DELTA_VERSION = "4.1.0"  # delta-spark for Spark 4.1 (the pinned pyspark); its delta-storage alike
# Spark's Delta source needs its session extension and catalog (set when the session starts).
DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
LINGER_S = 0.02  # the osqueue producers' flush_interval, as in the latency benchmark


def delta_jars(log: Callable[[str], None]) -> list[str]:
    """delta-spark and delta-storage (Spark provides the rest), with Maven's own client."""
    return _maven_fetch(
        f"delta-spark-{DELTA_VERSION}",
        [("io.delta", "delta-spark_2.13", DELTA_VERSION), ("io.delta", "delta-storage", DELTA_VERSION)],
        False,
        log,
    )


def _run(s: Settings, kind: str, producers: int, rate: float, duration: float) -> dict[str, Any]:
    """One run: the query up (it has seen a warm-up row), then `producers` processes at `rate` rows/s
    each for `duration` s; every row must be seen within 120 s of the last produce."""
    holder = s.spark
    spark = holder.spark
    target = str(holder.tmp / f"{kind}-{uuid.uuid4().hex[:8]}")
    if kind == "osqueue":
        from osqueue import Producer

        with Producer(target, flush_interval=LINGER_S) as p:
            p.produce([b"warm-0:0"]).wait_durable(60)
    else:
        import pyarrow as pa
        from deltalake import write_deltalake

        write_deltalake(target, pa.table({"value": pa.array([b"warm-0:0"], pa.binary())}), mode="append")
    seen: dict[str, float] = {}
    seen_at: list[float] = []
    lock = threading.Lock()
    batches: list[int] = []

    def on_batch(df: Any, batch_id: int) -> None:
        rows = df.select("value").collect()
        t = time.time()
        with lock:
            batches.append(len(rows))
            for row in rows:
                key, ts = bytes(row.value).decode().split(":")
                if not key.startswith("warm"):
                    seen[key] = t - int(ts) / 1e9
                    seen_at.append(t)

    q = (
        spark.readStream.format(kind)
        .load(target)
        .writeStream.foreachBatch(on_batch)
        .trigger(processingTime="0 seconds")
        .option("checkpointLocation", holder.checkpoint(f"delta-{kind}"))
        .start()
    )
    try:
        deadline = time.monotonic() + 600  # a loaded machine: Delta's first batch loads the log, many jobs
        while time.monotonic() < deadline and not batches and q.isActive:
            time.sleep(0.05)
        if not batches:
            raise RuntimeError(f"delta ({kind}): the query saw no warm-up row in 600 s: {q.exception()}")
        start_at = time.time() + 4.0  # every child imported and waiting before the first row is due
        env = {"PYTHONPATH": f"{REPO_ROOT / 'python'}:{REPO_ROOT}", "PATH": "/usr/bin:/bin"}
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.harness.delta_producer", kind, target, str(i), str(rate), str(duration)]
                + [str(start_at), str(LINGER_S)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=REPO_ROOT,
            )
            for i in range(producers)
        ]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=duration + 300)
            if p.returncode != 0:
                raise RuntimeError(f"delta ({kind}) producer exited {p.returncode}: {err.strip()[-1500:]}")
            outs.append(json.loads(out.strip().splitlines()[-1]))
        written = sum(o["rows"] for o in outs)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= written:
                    break
            time.sleep(0.05)
    finally:
        progress = [pr for pr in q.recentProgress if pr and int(pr.get("numInputRows", 0)) > 0]
        q.stop()
    with lock:
        lat = sorted(v * 1000 for v in seen.values())
        last = max(seen_at) if seen_at else start_at
    if len(seen) < written:
        raise RuntimeError(f"delta ({kind}): {len(seen)} of {written} rows seen within 120 s after the producers ended")
    phases: dict[str, list[float]] = {}
    for pr in progress:
        for k, v in (pr.get("durationMs") or {}).items():
            phases.setdefault(k, []).append(float(v))
    return {
        "rows": written,
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "rows_per_s_delivered": written / max(1e-9, last - start_at),
        "producer_appends": sum(o["appends"] for o in outs),
        "producer_failed_appends": sum(o["failed_appends"] for o in outs),
        "producer_durable_p50_ms": percentile(sorted(o["durable_p50_ms"] for o in outs), 50),
        "producer_durable_p99_ms": max(o["durable_p99_ms"] for o in outs),
        "producers_ended_s": max(o["ended_s_after_start"] for o in outs),
        "micro_batches": len(progress),
        "phase_p50_ms": {k: percentile(sorted(v), 50) for k, v in phases.items()},
    }


def bench_delta(env: Env, s: Settings) -> dict[str, Any]:
    """osqueue vs delta-rs -> Spark's Delta source, alternating run by run: a latency load (10 rows/s
    per producer) and a throughput load (as fast as each producer's appends go)."""
    if s.delta is None:
        return {"skipped": s.delta_error or "the delta-spark jars are not on the session's class path"}
    producers = 2 if s.quick else 8
    loads = {"latency": (10.0, 3.0 if s.quick else 20.0), "throughput": (1000.0, 3.0 if s.quick else 10.0)}
    results: dict[str, Any] = {}
    for load, (rate, duration) in loads.items():
        runs: dict[str, list[dict[str, Any]]] = {"osqueue": [], "delta": []}
        for r in range(1 if s.quick else s.repeats):
            for kind in ("osqueue", "delta") if r % 2 == 0 else ("delta", "osqueue"):
                run = _run(s, kind, producers, rate, duration)
                runs[kind].append(run)
                s.log(
                    f"delta {load} run {r + 1} ({kind}): {run['rows']} rows, p50 {run['p50_ms']:.0f} ms, "
                    f"p99 {run['p99_ms']:.0f} ms, {run['rows_per_s_delivered']:,.0f} rows/s delivered, "
                    f"{run['producer_appends']} appends ({run['producer_failed_appends']} failed)"
                )
        results[load] = {
            kind: {
                "p50_ms": summarize([r["p50_ms"] for r in rs]),
                "p99_ms": summarize([r["p99_ms"] for r in rs]),
                "rows_per_s_delivered": summarize([r["rows_per_s_delivered"] for r in rs]),
                "producer_durable_p50_ms": summarize([r["producer_durable_p50_ms"] for r in rs]),
                "producer_durable_p99_ms": summarize([r["producer_durable_p99_ms"] for r in rs]),
                "producer_failed_appends": sum(r["producer_failed_appends"] for r in rs),
                "runs": rs,
            }
            for kind, rs in runs.items()
        }
    lat, thr = results["latency"], results["throughput"]
    p50_ratio = lat["osqueue"]["p50_ms"]["median"] / lat["delta"]["p50_ms"]["median"]
    rows_ratio = thr["osqueue"]["rows_per_s_delivered"]["median"] / thr["delta"]["rows_per_s_delivered"]["median"]
    return {
        "description": f"{producers} Python producer processes; osqueue: osqueue.Producer (flush_interval "
        f"{LINGER_S:g} s) into a queue on the local filesystem; delta: deltalake.write_deltalake(mode='append') "
        "of the rows due so far into a Delta table on the local filesystem (delta-rs), one append at a time per "
        f"process. Each side streamed by Spark (local[2]): format('osqueue') / format('delta') (delta-spark "
        f"{DELTA_VERSION}) -> foreachBatch, trigger 0, collect(); latency = after collect() - the row's due time. "
        "latency load: 10 rows/s per producer; throughput load: 1,000 rows/s per producer offered, rows/s = rows "
        "÷ (last row seen - first row due). Alternating which side goes first.",
        "delta_spark": DELTA_VERSION,
        "loads": {k: {"rows_per_s_per_producer": v[0], "duration_s": v[1]} for k, v in loads.items()},
        "producers": producers,
        "results": results,
        "p50_ratio_osqueue_over_delta": p50_ratio,
        "rows_per_s_ratio_osqueue_over_delta": rows_ratio,
        "goal": "end-to-end p50 <= 0.5x Delta's; sustained rows/s >= 1x Delta's",
        "goal_met": bool(p50_ratio <= 0.5 and rows_ratio >= 1.0),
    }
