"""Benchmark: the Python data source (format "osqueue_python") vs the JVM connector on the same queue,
source and sink, on the local filesystem and on the S3 test server behind the latency proxy.

Source: the same queue (the manifest restored between runs) read by a streaming query with
trigger(availableNow=True) into the noop sink, alternating which side goes first; rows/s = records /
wall time from start() to the query's end. Sink: the same cached DataFrame written with df.write to a
fresh queue by each sink; rows/s = records / wall time of the write. Goal (issue 27): Python >= 0.5x
JVM, each."""

from __future__ import annotations

import os
import random
import shutil
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.harness.environment import MANIFEST, Env, Settings
from bench.harness.spark_benchmarks import SparkHolder, stream_to_noop
from bench.harness.stats import summarize
from osqueue.format.manifest_head import parse_head
from osqueue.producer import Producer
from osqueue.store import LocalFileSystemStore, ObjectStore
from osqueue.store.object_stores import open_store

GOAL = 0.5


def _build(uri: str, options: dict[str, str] | None, records: int, record_bytes: int, per_batch: int) -> None:
    filler = bytes(random.Random(7).choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(record_bytes))
    with Producer(uri, flush_interval=3600, flush_size_bytes=1 << 40, store_options=options) as p:
        for start in range(0, records, per_batch):
            p.produce([(b"%010d" % i + filler)[:record_bytes] for i in range(start, min(start + per_batch, records))])
            p.flush()


def _await_dequeue(store: ObjectStore, restored: bytes, timeout_s: float = 30.0) -> None:
    """Waits (polling, with a deadline) for the Python source's end-of-run dequeue: on pyspark 4.1 its
    driver-side worker runs it when Spark stops that worker, after awaitTermination() returns; landing
    after the next run restored the manifest, it dequeued that run's queue (the local store's ETag is
    its content's hash, so the CAS matched) and the next side read 0 rows. The wait is for the dequeue
    itself (nothing before the restored queue's end still queued): the source's takeover changed the
    manifest (its epoch) when the run started, so "the manifest changed" returned at once."""
    end = parse_head(restored, MANIFEST).next_sequence
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = store.get(MANIFEST)
        if current is None or parse_head(current.data, MANIFEST).first_sequence >= end:
            return
        time.sleep(0.02)
    raise RuntimeError(f"the Python source's end-of-run dequeue did not land within {timeout_s:g} s")


def _pair(
    s: Settings, name: str, expected: int, jvm: Callable[[], dict[str, Any]], python: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Repeats alternating which side goes first; the ratio is Python rows/s over JVM rows/s."""
    runs = []
    for r in range(s.ratio_repeats):
        pair: dict[str, dict[str, Any]] = {}
        for side in ("jvm", "python") if r % 2 == 0 else ("python", "jvm"):
            pair[side] = jvm() if side == "jvm" else python()
            if pair[side]["rows"] != expected:
                raise RuntimeError(f"{name}: the {side} side handled {pair[side]['rows']} rows, expected {expected}")
        ratio = pair["jvm"]["wall_s"] / pair["python"]["wall_s"]
        runs.append({**pair, "ratio": ratio})
        s.log(
            f"{name} run {r + 1}: JVM {expected / pair['jvm']['wall_s']:,.0f} rows/s, Python "
            f"{expected / pair['python']['wall_s']:,.0f} rows/s, ratio {ratio:.2f}"
        )
    return {
        "jvm_rows_per_s": summarize([expected / r["jvm"]["wall_s"] for r in runs]),
        "python_rows_per_s": summarize([expected / r["python"]["wall_s"] for r in runs]),
        "ratio_python_to_jvm": summarize([r["ratio"] for r in runs]),
        "raw_runs": runs,
    }


def _sizes(s: Settings, store: str) -> dict[str, int]:
    """The queue sizes a store runs: ``fixed`` (one batch file: a query's fixed cost), ``whole`` (50,000
    records, the figures of earlier sessions) and ``large`` (start-up a small share: steady state).
    ``OSQUEUE_BENCH_PYTHON_SOURCE_RECORDS`` (default 500,000; 20,000 with ``--quick``) is the local
    store's large size, ``OSQUEUE_BENCH_PYTHON_SOURCE_S3_RECORDS`` (default 0: none) the S3 store's."""
    one_file = max(1, (1 << 20) // s.record_bytes)
    sizes = {"whole": 5_000 if s.quick else 50_000, "fixed": one_file}  # whole first: it takes the warm-up
    env = "OSQUEUE_BENCH_PYTHON_SOURCE_RECORDS" if store == "local" else "OSQUEUE_BENCH_PYTHON_SOURCE_S3_RECORDS"
    default = (20_000 if s.quick else 500_000) if store == "local" else 0
    large = int(os.environ.get(env, default))
    if large > sizes["whole"]:
        sizes["large"] = large
    return sizes


def _steady(fixed: dict[str, Any], big: dict[str, Any], rows: int, one_file: int) -> dict[str, Any]:
    """Steady-state rows/s of each side from a large run and the fixed-cost runs: the rows past the
    first file over the wall time past a one-file query's (per pair, against the side's median fixed
    cost), so the per-query start-up is out of it for both sides alike."""
    out: dict[str, Any] = {}

    def rate(run: dict[str, Any], side: str) -> float | None:
        past = run[side]["wall_s"] - fixed[f"{side}_wall_s"]["median"]
        return (rows - one_file) / past if past > 0 else None  # None: the noise exceeds the run (too small)

    rates = {side: [rate(r, side) for r in big["raw_runs"]] for side in ("jvm", "python")}
    for side in ("jvm", "python"):
        out[f"{side}_rows_per_s"] = summarize([x for x in rates[side] if x is not None])
    out["ratio_python_to_jvm"] = summarize(
        [p / j for p, j in zip(rates["python"], rates["jvm"], strict=True) if p is not None and j is not None]
    )
    if all("addBatch" in (r[side].get("duration_ms") or {}) for r in big["raw_runs"] for side in ("jvm", "python")):
        # The source's cross-check, by Spark's own clock: rows over its micro-batches' addBatch (the read
        # into the noop sink; the stream runner's start is in latestOffset, before it).
        for side in ("jvm", "python"):
            out[f"{side}_add_batch_rows_per_s"] = summarize(
                [rows / max(r[side]["duration_ms"]["addBatch"] / 1000, 1e-3) for r in big["raw_runs"]]
            )
    return out


def bench_python_source(env: Env, s: Settings) -> dict[str, Any]:
    holder: SparkHolder = s.spark
    spark = holder.spark
    from osqueue.spark_source import register

    fmt = register(spark)
    record_bytes = s.record_bytes
    per_batch = max(1, (1 << 20) // record_bytes)  # 1 MiB batch files
    stores: dict[str, tuple[Callable[[str], str], dict[str, str]]] = {
        "local": (lambda name: str(holder.tmp / name), {}),
        "s3": (lambda name: env.uri(f"pysource-{name}"), env.options()),
    }
    out: dict[str, Any] = {}
    for store_name, (uri_of, options) in stores.items():
        per_size: dict[str, dict[str, Any]] = {}
        sizes = _sizes(s, store_name)
        for size_name, records in sizes.items():
            per_size[size_name] = _run_size(
                s, holder, fmt, store_name, uri_of, options, env, records, record_bytes, per_batch
            )
        result: dict[str, Any] = {**per_size["whole"], "records": sizes}
        for side in ("source", "sink"):
            f = per_size["fixed"][side]
            result[side]["fixed_cost"] = {
                "records": sizes["fixed"],
                "jvm_wall_s": summarize([r["jvm"]["wall_s"] for r in f["raw_runs"]]),
                "python_wall_s": summarize([r["python"]["wall_s"] for r in f["raw_runs"]]),
                "python_minus_jvm_s": summarize([r["python"]["wall_s"] - r["jvm"]["wall_s"] for r in f["raw_runs"]]),
            }
            largest = "large" if "large" in per_size else "whole"
            big = per_size[largest][side]
            if largest == "large":
                result[side]["large"] = {k: v for k, v in big.items() if k != "raw_runs"} | {
                    "records": sizes["large"],
                    "raw_runs": big["raw_runs"],
                }
            result[side]["steady_state"] = {
                "from": largest,
                "records": sizes[largest],
                **_steady(result[side]["fixed_cost"], big, sizes[largest], sizes["fixed"]),
            }
        out[store_name] = result
    met = all(out[st][side]["ratio_python_to_jvm"]["median"] >= GOAL for st in out for side in ("source", "sink"))
    return {
        "description": f"records of {record_bytes} B in {per_batch}-record batch files; source: the same "
        "queue read by format('osqueue') (JVM) and format('osqueue_python') (the Python data source) into the noop "
        "sink with trigger(availableNow=True) (manifest restored between runs); sink: the same cached DataFrame "
        "(2 partitions) written by df.write to a fresh queue; local filesystem, and the S3 test server through the "
        f"latency proxy (+{env.latency_ms:g} ms per request); local[2]. Each store runs three sizes: one batch file "
        "(the per-query fixed cost: wall time of a whole query or write of it), 50,000 records (the row's figures "
        "since session 11) and a large queue (steady state: rows past the first file over the wall time past the "
        "one-file query's)",
        "records": {st: out[st]["records"] for st in out},
        "record_bytes": record_bytes,
        "stores": out,
        "goal": f"Python source and sink rows/s >= {GOAL}x the JVM's, on each store (50,000 records, whole query)",
        "goal_met": bool(met),
    }


def _run_size(
    s: Settings,
    holder: SparkHolder,
    fmt: str,
    store_name: str,
    uri_of: Callable[[str], str],
    options: dict[str, str],
    env: Env,
    records: int,
    record_bytes: int,
    per_batch: int,
) -> dict[str, Any]:
    """Source and sink pairs on a queue (and a DataFrame) of ``records`` records."""
    spark = holder.spark
    rows = spark.range(records).selectExpr(f"cast(lpad(cast(id as string), {record_bytes}, 'x') as binary) as value")
    rows = rows.repartition(2).cache()
    rows.count()
    queue = uri_of(f"source-{uuid.uuid4().hex[:8]}")
    s.log(f"python_source[{store_name}]: building a queue of {records} records of {record_bytes} B ...")
    direct = {**options, "fs.s3a.endpoint": env.server_endpoint} if options else None
    _build(queue, direct, records, record_bytes, per_batch)
    store: ObjectStore = LocalFileSystemStore(queue) if not options else open_store(queue, options)
    written = store.get(MANIFEST)
    assert written is not None
    manifest = written.data

    def read(source: str) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            store.put(MANIFEST, manifest)  # every batch queued again
            ckpt = holder.checkpoint(f"pysource-{source}")
            reader = spark.readStream.format(source).options(**options)
            reader = reader.option("gc", "false") if source == "osqueue" else reader.option("checkpointLocation", ckpt)
            result = stream_to_noop(spark, reader.load(queue).select("value"), ckpt)
            if source != "osqueue":
                _await_dequeue(store, manifest)
            return result

        return run

    def write(sink: str) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            target = uri_of(f"sink-{sink}-{uuid.uuid4().hex[:8]}")
            t0 = time.monotonic()
            rows.write.format(sink).options(**options).mode("append").save(target)
            wall = time.monotonic() - t0
            if not options:
                shutil.rmtree(target, ignore_errors=True)  # a large run's files: gigabytes over the pairs
            return {"wall_s": wall, "rows": records}

        return run

    label = f"{store_name}, {records:,} records"
    s.log(f"python_source[{label}]: source, JVM vs Python ...")
    source = _pair(s, f"source[{label}]", records, read("osqueue"), read(fmt))
    s.log(f"python_source[{label}]: sink, JVM vs Python ...")
    sink = _pair(s, f"sink[{label}]", records, write("osqueue"), write(fmt))
    rows.unpersist()
    if not options:
        shutil.rmtree(queue, ignore_errors=True)
    return {"source": source, "sink": sink}
