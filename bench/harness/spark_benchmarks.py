"""The Spark benchmarks' session and data set, ``spark_file`` (the osqueue source vs Spark's text
file source, same records) and ``latency`` (produce() -> row visible in ``foreachBatch``)."""

from __future__ import annotations

import os
import pathlib
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.harness.environment import MANIFEST, PREFIX, Env, Settings
from bench.harness.stats import percentile, summarize


class SparkHolder:
    """A local[2] SparkSession with the connector jar (and the Kafka connector's jars when the
    Kafka benchmark runs), created on first use, stopped at the end if this created it."""

    def __init__(self, s: Settings, extra_jars: Sequence[str] = ()) -> None:
        self.s = s
        self.extra_jars = list(extra_jars)
        self._spark: Any = None
        self._created = False
        self.dataset: SparkDataset | None = None  # built once, shared by spark_file and kafka
        self.tmp = pathlib.Path(__import__("tempfile").mkdtemp(prefix="osq-bench-spark-"))

    @property
    def spark(self) -> Any:
        if self._spark is None:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            from pyspark.sql import SparkSession

            from osqueue import jar_path

            existing = SparkSession.getActiveSession()
            if existing is not None:
                self._spark = existing
            else:
                self.s.log("starting a local[2] SparkSession ...")
                self._spark = (
                    SparkSession.builder.appName("osqueue-bench")
                    .master("local[2]")
                    .config("spark.jars", ",".join([jar_path(), *self.extra_jars]))
                    .config("spark.driver.memory", "4g")
                    .config("spark.ui.enabled", "false")
                    .config("spark.ui.showConsoleProgress", "false")
                    .config("spark.sql.shuffle.partitions", "2")
                    .config("spark.driver.bindAddress", "127.0.0.1")
                    .config("spark.driver.host", "127.0.0.1")
                    .config("spark.sql.streaming.stopTimeout", "30s")
                    .getOrCreate()
                )
                self._created = True
                self._spark.sparkContext.setLogLevel("ERROR")
        return self._spark

    def checkpoint(self, name: str) -> str:
        return str(self.tmp / "ckpt" / f"{name}-{uuid.uuid4().hex[:8]}")

    def close(self) -> None:
        if self._spark is not None and self._created:
            self._spark.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def stream_to_noop(spark: Any, df: Any, checkpoint: str) -> dict[str, Any]:
    """Runs df (a streaming DataFrame) into the noop sink with Trigger.AvailableNow; wall time
    from start() to the end of the query, the rows Spark counted and its own phase durations."""
    # Level the ground: collect the previous query's garbage before the clock starts (without
    # this, whichever side ran first in a pair paid for the last query's garbage).
    spark.sparkContext._jvm.java.lang.System.gc()
    t0 = time.monotonic()
    q = df.writeStream.format("noop").trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
    q.awaitTermination()
    wall = time.monotonic() - t0
    progress = [p for p in q.recentProgress if p]
    if q.exception() is not None:
        raise RuntimeError(f"streaming query failed: {q.exception()}")
    durations: dict[str, float] = {}
    for p in progress:
        for k, v in (p.get("durationMs") or {}).items():
            durations[k] = durations.get(k, 0) + v
    return {
        "wall_s": wall,
        "rows": sum(int(p.get("numInputRows", 0)) for p in progress),
        "micro_batches": sum(1 for p in progress if int(p.get("numInputRows", 0)) > 0),
        "duration_ms": durations,
    }


@dataclass
class SparkDataset:
    """The same records as an osqueue queue on the local filesystem (one batch file per
    `batch_bytes`) and as text files (one file per osqueue batch, the same records as lines)."""

    queue_dir: pathlib.Path
    text_dir: pathlib.Path
    manifest: bytes
    records: int
    record_bytes: int
    batches: int
    payload_bytes: int
    queue_bytes: int
    text_bytes: int
    write_s: float

    def restore_queue(self) -> None:
        """Puts the manifest back as written: every batch queued again (a consumer dequeues)."""
        (self.queue_dir / MANIFEST).write_bytes(self.manifest)


def spark_dataset(holder: SparkHolder, s: Settings) -> SparkDataset:
    if holder.dataset is not None:
        return holder.dataset
    import random

    from osqueue.producer import Producer

    total = s.spark_mb << 20
    record_bytes = s.record_bytes
    batch_bytes = (1 if s.quick else 8) << 20
    per_batch = max(1, batch_bytes // record_bytes)
    records = max(per_batch, total // record_bytes)
    rng = random.Random(7)
    filler = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(record_bytes))
    qdir, tdir = holder.tmp / "queue", holder.tmp / "text"
    tdir.mkdir(parents=True)
    s.log(f"spark data: {records} records of {record_bytes} B ({records * record_bytes / 1e6:.0f} MB) in batches of "
          f"{per_batch} -> {qdir} and {tdir}")
    t0 = time.monotonic()
    batches = 0
    with Producer(str(qdir), flush_interval=3600, flush_size_bytes=1 << 40) as p:
        for start in range(0, records, per_batch):
            batch = [(b"%010d" % i + filler)[:record_bytes] for i in range(start, min(start + per_batch, records))]
            for c in range(0, len(batch), 1000):
                p.produce(batch[c:c + 1000], b"bench")
            p.flush()
            (tdir / f"part-{batches:05d}.txt").write_bytes(b"\n".join(batch) + b"\n")
            batches += 1
    write_s = time.monotonic() - t0
    queue_bytes = sum(f.stat().st_size for f in (qdir / PREFIX).glob("*.batch"))
    text_bytes = sum(f.stat().st_size for f in tdir.iterdir())
    ds = SparkDataset(qdir, tdir, (qdir / MANIFEST).read_bytes(), records, record_bytes, batches,
                      records * record_bytes, queue_bytes, text_bytes, write_s)
    holder.dataset = ds
    return ds


def osqueue_read(holder: SparkHolder, ds: SparkDataset) -> dict[str, Any]:
    ds.restore_queue()
    spark = holder.spark
    df = spark.readStream.format("osqueue").option("gc", "false").load(str(ds.queue_dir)).select("value")
    return stream_to_noop(spark, df, holder.checkpoint("osqueue"))


def compare_sources(
    holder: SparkHolder, s: Settings, ds: SparkDataset, name: str, other: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """A warm-up of each side, then repeats alternating which goes first; rows/s per repeat."""
    if not s.quick:  # --quick: no warm-up (kept short; its figures are not goals)
        s.log(f"{name}: warm-up (one run of each, not counted) ...")
        osqueue_read(holder, ds)
        other()
    runs = []
    for r in range(s.ratio_repeats):
        pair = {}
        order = ("osqueue", name) if r % 2 == 0 else (name, "osqueue")
        for side in order:
            pair[side] = osqueue_read(holder, ds) if side == "osqueue" else other()
        for side in pair:
            if pair[side]["rows"] != ds.records:
                raise RuntimeError(f"{name}: {side} read {pair[side]['rows']} rows, expected {ds.records}")
        ratio = pair[name]["wall_s"] / pair["osqueue"]["wall_s"]  # = osqueue rows/s / other rows/s
        runs.append({"osqueue": pair["osqueue"], name: pair[name], "ratio": ratio, "order": list(order)})
        s.log(
            f"{name} run {r + 1}: osqueue {ds.records / pair['osqueue']['wall_s']:,.0f} rows/s "
            f"({pair['osqueue']['wall_s']:.2f} s), {name} {ds.records / pair[name]['wall_s']:,.0f} rows/s "
            f"({pair[name]['wall_s']:.2f} s), ratio {ratio:.2f}"
        )
    return {
        "records": ds.records,
        "record_bytes": ds.record_bytes,
        "payload_bytes": ds.payload_bytes,
        "osqueue_rows_per_s": summarize([ds.records / r["osqueue"]["wall_s"] for r in runs]),
        f"{name}_rows_per_s": summarize([ds.records / r[name]["wall_s"] for r in runs]),
        "osqueue_mb_per_s": summarize([ds.payload_bytes / r["osqueue"]["wall_s"] / 1e6 for r in runs]),
        f"{name}_mb_per_s": summarize([ds.payload_bytes / r[name]["wall_s"] / 1e6 for r in runs]),
        "ratio_osqueue_to_" + name: summarize([r["ratio"] for r in runs]),
        "raw_runs": runs,
    }


# ---------------------------------------------------------------------------------------------
# benchmark 3: Spark source vs Spark's file source


def bench_spark_file(env: Env, s: Settings) -> dict[str, Any]:
    holder = s.spark
    ds = spark_dataset(holder, s)
    spark = holder.spark

    def text() -> dict[str, Any]:
        df = spark.readStream.format("text").load(str(ds.text_dir)).select("value")
        return stream_to_noop(spark, df, holder.checkpoint("text"))

    out = compare_sources(holder, s, ds, "text", text)
    ratio = out["ratio_osqueue_to_text"]
    return {
        "description": f"the same {ds.records} records of {ds.record_bytes} B ({ds.payload_bytes / 1e6:.0f} MB) on the local "
        f"filesystem: an osqueue queue of {ds.batches} batch files vs {ds.batches} text files (one per batch, one "
        "record per line); each read by a streaming query select(value) -> format('noop') with "
        "trigger(availableNow=True), fresh checkpoint per run (the queue's manifest is restored between runs); "
        "rows/s = records / wall time from start() to the end of the query; local[2]",
        "store": "local filesystem (no hadoop-aws in pyspark's jars, so no s3a for the file source)",
        "batches": ds.batches,
        "queue_bytes": ds.queue_bytes,
        "text_bytes": ds.text_bytes,
        "data_write_s": ds.write_s,
        **out,
        "goal": "osqueue rows/s / file source rows/s >= 1.0",
        "goal_met": bool(ratio["median"] >= 1.0),
    }


# ---------------------------------------------------------------------------------------------
# benchmark 5: end-to-end latency, produce() -> row visible in foreachBatch


def _latency_run(env: Env, s: Settings, holder: SparkHolder, duration: float, rate: float) -> dict[str, Any]:
    from osqueue.producer import Producer

    spark = holder.spark
    prefix = f"latency-{uuid.uuid4().hex[:8]}"
    # The queue exists (empty manifest) before the query starts.
    with Producer(env.uri(prefix), flush_interval=0.1, store_options=env.options()) as p:
        p.produce([b"warm-0:0"]).wait_durable(60)
    seen: dict[int, tuple[float, float]] = {}
    lock = threading.Lock()
    batches: list[dict[str, Any]] = []

    def on_batch(df: Any, batch_id: int) -> None:
        t_call = time.time()
        rows = df.select("value").collect()
        t_rows = time.time()
        with lock:
            batches.append({"batch": batch_id, "rows": len(rows), "collect_s": t_rows - t_call})
            for row in rows:
                key, ts = bytes(row.value).decode().split(":")
                if key.startswith("warm"):
                    continue
                seen[int(key)] = (t_call - int(ts) / 1e9, t_rows - int(ts) / 1e9)

    reader = spark.readStream.format("osqueue")
    for k, v in env.options().items():
        reader = reader.option(k, v)
    q = (reader.load(env.uri(prefix)).writeStream.foreachBatch(on_batch).trigger(processingTime="0 seconds")
         .option("checkpointLocation", holder.checkpoint("latency")).start())
    try:
        deadline = time.monotonic() + 60
        while not batches and time.monotonic() < deadline:  # the query is up: it has seen the warm-up entry
            time.sleep(0.05)
        durable: list[float] = []
        n = int(duration * rate)
        with Producer(env.uri(prefix), flush_interval=0.1, store_options=env.options()) as p:
            start = time.monotonic()
            for i in range(n):
                target = start + i / rate
                delay = target - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                t0 = time.time()
                h = p.produce([f"{i}:{time.time_ns()}".encode()])
                h.add_done_callback(lambda f, t0=t0: durable.append(time.time() - t0))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= n:
                    break
            time.sleep(0.05)
    finally:
        progress = [pr for pr in q.recentProgress if pr and int(pr.get("numInputRows", 0)) > 0]
        q.stop()
    # Where a micro-batch's time goes, by Spark's own phases (median over the batches with rows).
    phases: dict[str, list[float]] = {}
    for pr in progress:
        for k, v in (pr.get("durationMs") or {}).items():
            phases.setdefault(k, []).append(float(v))
    with lock:
        visible = sorted(v[1] * 1000 for v in seen.values())
        handed = sorted(v[0] * 1000 for v in seen.values())
        nb = len(batches)
        collect_ms = sorted(b["collect_s"] * 1000 for b in batches)
    if len(seen) < n:
        raise RuntimeError(f"latency: {len(seen)} of {n} records seen within 60 s after the last produce()")
    dur = sorted(d * 1000 for d in durable)
    return {
        "samples": len(visible),
        "p50_ms": percentile(visible, 50),
        "p90_ms": percentile(visible, 90),
        "p99_ms": percentile(visible, 99),
        "max_ms": visible[-1],
        "handed_p50_ms": percentile(handed, 50),
        "handed_p99_ms": percentile(handed, 99),
        "durable_p50_ms": percentile(dur, 50),
        "durable_p99_ms": percentile(dur, 99),
        "micro_batches": nb,
        "collect_p50_ms": percentile(collect_ms, 50),
        "phase_p50_ms": {k: percentile(sorted(v), 50) for k, v in phases.items()},
        "visible_ms": [round(v, 1) for v in visible],
    }


def bench_latency(env: Env, s: Settings) -> dict[str, Any]:
    holder = s.spark
    duration = 3.0 if s.quick else 30.0
    rate = 20.0
    runs = []
    for r in range(1 if s.quick else s.repeats):  # --quick: one run (each is a query start + 3 s)
        run = _latency_run(env, s, holder, duration, rate)
        runs.append(run)
        s.log(
            f"latency run {r + 1}: {run['samples']} samples, produce -> visible p50 {run['p50_ms']:.0f} ms, "
            f"p99 {run['p99_ms']:.0f} ms (produce -> durable p50 {run['durable_p50_ms']:.0f} ms; "
            f"{run['micro_batches']} micro-batches)"
        )
    p50 = summarize([r["p50_ms"] for r in runs])
    p99 = summarize([r["p99_ms"] for r in runs])
    return {
        "description": f"one record produced every {1000 / rate:.0f} ms for {duration:g} s per run by a Python Producer "
        "(flush_interval 0.1 s) into a queue on the S3 server (through the latency proxy if any); the value carries "
        "time.time_ns() at produce(); a streaming query format('osqueue') -> foreachBatch with "
        "trigger(processingTime='0 seconds') (micro-batch: the source has no continuous mode) collects each "
        "micro-batch on the driver; latency = time after collect() - produce time (same process, same clock)",
        "trigger": "processingTime 0 (micro-batch; continuous mode needs a ContinuousStream, which the source does not implement)",
        "samples_per_run": summarize([r["samples"] for r in runs]),
        "p50_ms": p50,
        "p90_ms": summarize([r["p90_ms"] for r in runs]),
        "p99_ms": p99,
        "max_ms": summarize([r["max_ms"] for r in runs]),
        "handed_to_foreach_batch_p50_ms": summarize([r["handed_p50_ms"] for r in runs]),
        "produce_to_durable_p50_ms": summarize([r["durable_p50_ms"] for r in runs]),
        "produce_to_durable_p99_ms": summarize([r["durable_p99_ms"] for r in runs]),
        "collect_p50_ms": summarize([r["collect_p50_ms"] for r in runs]),
        "micro_batches": summarize([r["micro_batches"] for r in runs]),
        "micro_batch_phase_p50_ms": {
            k: summarize([r["phase_p50_ms"][k] for r in runs if k in r["phase_p50_ms"]])
            for k in sorted({k for r in runs for k in r["phase_p50_ms"]})
        },
        "samples_ms": [v for r in runs for v in r["visible_ms"]],
        "goal": "p50 <= 400 ms and p99 <= 1000 ms",
        "goal_met": bool(p50["median"] <= 400 and p99["median"] <= 1000),
    }
