"""``delta``: many small Python producers, each its own OS process, into osqueue vs into a Delta
table with delta-rs (the ``deltalake`` package), each streamed by Spark (``format("osqueue")`` vs
Spark's Delta source, the ``delta-spark`` jar for the Spark line under test, fetched with Maven):
produce -> row seen in ``foreachBatch`` (p50 / p99) and rows/s delivered.

Each load runs on two stores: the local filesystem, and the S3 test server behind the latency proxy
(delta-rs with S3 conditional writes for its log commits; Spark's Delta source on ``s3a://`` with
``hadoop-aws`` for the installed pyspark's Hadoop, fetched with Maven like the Delta jars)."""

from __future__ import annotations

import json
import os
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


def hadoop_aws_jars(log: Callable[[str], None]) -> list[str]:
    """hadoop-aws for the installed pyspark's Hadoop and its AWS SDK bundle (Hadoop's own jars are
    pyspark's), so Spark's Delta source reads ``s3a://``."""
    from osqueue._jar import installed_hadoop_version

    hadoop = installed_hadoop_version()
    if hadoop is None:
        raise RuntimeError("cannot tell the installed pyspark's Hadoop version (no hadoop-client-api jar)")
    return _maven_fetch(f"hadoop-aws-{hadoop}", [("org.apache.hadoop", "hadoop-aws", hadoop)], True, log)


def delta_storage_options(env: Env) -> dict[str, str]:
    """delta-rs's options for the S3 test server: its log commits are S3 conditional writes."""
    return {
        "AWS_ENDPOINT_URL": env.endpoint,
        "AWS_ACCESS_KEY_ID": env.access_key,
        "AWS_SECRET_ACCESS_KEY": env.secret_key,
        "AWS_REGION": env.region,
        "AWS_ALLOW_HTTP": "true",
        "conditional_put": "etag",
    }


def _target(s: Settings, env: Env, store: str, kind: str) -> tuple[str, str, dict[str, str]]:
    """Where one run writes: the path Spark loads, the path the producers write, their store options."""
    name = f"{kind}-{uuid.uuid4().hex[:8]}"
    if store == "local":
        path = str(s.spark.tmp / name)
        return path, path, {}
    if kind == "osqueue":
        return env.uri(name), env.uri(name), env.options()
    return env.uri(name), f"s3://{env.bucket}/{name}", delta_storage_options(env)


def _run(s: Settings, env: Env, store: str, kind: str, producers: int, rate: float, duration: float) -> dict[str, Any]:
    """One run: the query up (it has seen a warm-up row), then `producers` processes at `rate` rows/s
    each for `duration` s; every row must be seen within 120 s of the last produce."""
    holder = s.spark
    spark = holder.spark
    load_path, target, options = _target(s, env, store, kind)
    if kind == "osqueue":
        from osqueue import Producer

        with Producer(target, flush_interval=LINGER_S, store_options=options or None) as p:
            p.produce([b"warm-0:0"]).wait_durable(60)
    else:
        import pyarrow as pa
        from deltalake import write_deltalake

        write_deltalake(
            target,
            pa.table({"value": pa.array([b"warm-0:0"], pa.binary())}),
            mode="append",
            storage_options=options or None,
        )
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

    reader = spark.readStream.format(kind)
    if kind == "osqueue":
        for k, v in options.items():
            reader = reader.option(k, v)
    q = (
        reader.load(load_path)
        .writeStream.foreachBatch(on_batch)
        .trigger(processingTime="0 seconds")
        .option("checkpointLocation", holder.checkpoint(f"delta-{store}-{kind}"))
        .start()
    )
    try:
        deadline = time.monotonic() + 600  # a loaded machine: Delta's first batch loads the log, many jobs
        while time.monotonic() < deadline and not batches and q.isActive:
            time.sleep(0.05)
        if not batches:
            raise RuntimeError(f"delta ({store}, {kind}): the query saw no warm-up row in 600 s: {q.exception()}")
        start_at = time.time() + 4.0  # every child imported and waiting before the first row is due
        child_env = {
            "PYTHONPATH": f"{REPO_ROOT / 'python'}:{REPO_ROOT}",
            "PATH": "/usr/bin:/bin",
            "OSQUEUE_BENCH_STORE_OPTIONS": json.dumps(options),
        }
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.harness.delta_producer", kind, target, str(i), str(rate), str(duration)]
                + [str(start_at), str(LINGER_S)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env,
                cwd=REPO_ROOT,
            )
            for i in range(producers)
        ]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=duration + 300)
            if p.returncode != 0:
                raise RuntimeError(f"delta ({store}, {kind}) producer exited {p.returncode}: {err.strip()[-1500:]}")
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
        raise RuntimeError(
            f"delta ({store}, {kind}): {len(seen)} of {written} rows seen within 120 s after the producers ended"
        )
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


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("p50_ms", "p99_ms", "rows_per_s_delivered", "producer_durable_p50_ms", "producer_durable_p99_ms")
    out: dict[str, Any] = {k: summarize([r[k] for r in runs]) for k in keys}
    out["producer_failed_appends"] = sum(r["producer_failed_appends"] for r in runs)
    out["runs"] = runs
    return out


def bench_delta(env: Env, s: Settings) -> dict[str, Any]:
    """osqueue vs delta-rs -> Spark's Delta source, alternating run by run, on the local filesystem and
    on the S3 test server: a latency load (10 rows/s per producer) and a throughput load (as fast as
    each producer's appends go). ``OSQUEUE_BENCH_DELTA_STORES`` picks the stores (``local,s3``)."""
    if s.delta is None:
        return {"skipped": s.delta_error or "the delta-spark jars are not on the session's class path"}
    stores = [x.strip() for x in os.environ.get("OSQUEUE_BENCH_DELTA_STORES", "local,s3").split(",") if x.strip()]
    unknown = sorted(set(stores) - {"local", "s3"})
    if unknown:
        raise ValueError(f"OSQUEUE_BENCH_DELTA_STORES: unknown store(s) {unknown}; use local and/or s3")
    if "s3" in stores:
        # Spark's s3a:// client talks to the test server as the producers do (a fresh bucket per run).
        hadoop_conf = s.spark.spark.sparkContext._jsc.hadoopConfiguration()
        for k, v in env.options().items():
            hadoop_conf.set(k, v)
    producers = 2 if s.quick else 8
    loads = {"latency": (10.0, 3.0 if s.quick else 20.0), "throughput": (1000.0, 3.0 if s.quick else 10.0)}
    results: dict[str, Any] = {}
    ratios: dict[str, dict[str, float]] = {}
    for store in stores:
        results[store] = {}
        for load, (rate, duration) in loads.items():
            runs: dict[str, list[dict[str, Any]]] = {"osqueue": [], "delta": []}
            for r in range(1 if s.quick else s.repeats):
                for kind in ("osqueue", "delta") if r % 2 == 0 else ("delta", "osqueue"):
                    run = _run(s, env, store, kind, producers, rate, duration)
                    runs[kind].append(run)
                    s.log(
                        f"delta {store} {load} run {r + 1} ({kind}): {run['rows']} rows, p50 {run['p50_ms']:.0f} ms, "
                        f"p99 {run['p99_ms']:.0f} ms, {run['rows_per_s_delivered']:,.0f} rows/s delivered, "
                        f"{run['producer_appends']} appends ({run['producer_failed_appends']} failed)"
                    )
            results[store][load] = {kind: _summary(rs) for kind, rs in runs.items()}
        lat, thr = results[store]["latency"], results[store]["throughput"]
        ratios[store] = {
            "p50_ratio_osqueue_over_delta": lat["osqueue"]["p50_ms"]["median"] / lat["delta"]["p50_ms"]["median"],
            "rows_per_s_ratio_osqueue_over_delta": thr["osqueue"]["rows_per_s_delivered"]["median"]
            / thr["delta"]["rows_per_s_delivered"]["median"],
        }
    return {
        "description": f"{producers} Python producer processes; osqueue: osqueue.Producer (flush_interval "
        f"{LINGER_S:g} s); delta: deltalake.write_deltalake(mode='append') of the rows due so far (delta-rs; on S3 "
        "its log commits are S3 conditional writes), one append at a time per process. Each side streamed by "
        f"Spark (local[2]): format('osqueue') / format('delta') (delta-spark {DELTA_VERSION}; s3a:// with "
        "hadoop-aws on S3) -> foreachBatch, trigger 0, collect(); latency = after collect() - the row's due time. "
        "latency load: 10 rows/s per producer; throughput load: 1,000 rows/s per producer offered, rows/s = rows "
        "÷ (last row seen - first row due). Alternating which side goes first. Stores: the local filesystem; the "
        "S3 test server behind the latency proxy.",
        "delta_spark": DELTA_VERSION,
        "stores": stores,
        "loads": {k: {"rows_per_s_per_producer": v[0], "duration_s": v[1]} for k, v in loads.items()},
        "producers": producers,
        "results": results,
        "ratios": ratios,
        "goal": "end-to-end p50 <= 0.5x Delta's; sustained rows/s >= 1x Delta's",
        "goal_met": all(
            r["p50_ratio_osqueue_over_delta"] <= 0.5 and r["rows_per_s_ratio_osqueue_over_delta"] >= 1.0
            for r in ratios.values()
        ),
    }
