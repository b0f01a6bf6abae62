"""Issue 28's rows (docs/adr/0006): the producer spool's cost and the readers' verification cost.

``spool``: a Python producer's MB/s to the S3 server (through the latency proxy) without a spool, with
a spool and ``durability="local"`` (each call fsync'd before it returns), and with a spool and
``durability="queue"`` (Quiver's streaming path: the call is written to the log, and the uploader's
fsync of the BATCH record, before the batch's PUT, covers it), in runs of three; and ``produce()`` to
locally durable p50/p99 in the ``local`` runs.

``jvm_spool``: the same three producers with the JVM core's Producer, in one warm JVM
(bench/jvm/SpoolProducers.java, Java's source launcher; the core's class path from
``OSQUEUE_BENCH_JVM_CP`` or the wheel's jars): MB/s, the ratios to unspooled and ``produce()`` p50/p99.

``verify_read``: a native Consumer reading the queue, rows/s, and the time its integrity checks
take (``verify_entry`` and the batch CRC over the same entries and batch bytes, timed on their own):
the cost is that time over the read's. No switch turns verification off in the library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
import zlib
from typing import Any

from bench.harness.environment import MANIFEST, REPO_ROOT, Env, Settings
from bench.harness.jvm_benchmarks import bench_classpath
from bench.harness.stats import percentile, summarize

SPOOL_CALLS = (200, 2_000)
"""produce() calls per spool run: --quick, full (``OSQUEUE_BENCH_SPOOL_CALLS`` overrides both, for the spool and
jvm_spool rows: a run of 2,000 calls lasts ~0.6 s, too short to resolve 5 % between its repeats)."""


def _spool_calls(s: Settings) -> int:
    override = os.environ.get("OSQUEUE_BENCH_SPOOL_CALLS")
    return int(override) if override else SPOOL_CALLS[0] if s.quick else SPOOL_CALLS[1]


VERIFY_BATCHES = (50, 200)
"""Batches of 500 records per verify_read run: --quick, full."""
CHECK_REPEATS = 5
"""The checks are timed alone this many times and the fastest kept: a preemption only lengthens a timing, and
one long pass on a loaded machine once made the checks alone look slower than the whole read."""


def _produce_run(env: Env, s: Settings, durability: str | None, calls: int, per_call: int) -> dict[str, Any]:
    """One run: no spool (``durability`` None) or a spool with that durability."""
    from osqueue.producer import Producer

    record = b"s" * s.record_bytes
    store = env.store(f"spool-{durability or 'off'}-{uuid.uuid4().hex[:8]}")
    returns: list[float] = []
    with tempfile.TemporaryDirectory(prefix="osq-bench-spool-") as spool:
        kwargs: dict[str, Any] = {} if durability is None else {"spool_dir": spool, "durability": durability}
        t0 = time.perf_counter()
        with Producer(store=store, flush_interval=0.05, **kwargs) as p:
            for _ in range(calls):
                c0 = time.perf_counter()
                p.produce([record] * per_call)
                returns.append(time.perf_counter() - c0)
            t1 = time.perf_counter()
        elapsed = time.perf_counter() - t0  # close() included: every call in the queue
    store.close()
    returns.sort()
    mb = calls * per_call * len(record) / 1e6
    return {
        "mb_s": mb / elapsed,
        # Where the time went: the caller's loop of produce() calls, then close() waiting for the uploads.
        "calls_s": t1 - t0,
        "close_s": elapsed - (t1 - t0),
        "produce_p50_ms": percentile(returns, 50) * 1000,
        "produce_p99_ms": percentile(returns, 99) * 1000,
    }


def bench_spool(env: Env, s: Settings) -> dict[str, Any]:
    calls = _spool_calls(s)
    per_call = 16
    pairs = []
    streaming = []
    for _ in range(s.ratio_repeats):
        off = _produce_run(env, s, None, calls, per_call)
        on = _produce_run(env, s, "local", calls, per_call)
        streaming.append(_produce_run(env, s, "queue", calls, per_call))
        pairs.append((off, on))
    out: dict[str, Any] = {
        "description": f"{calls} produce() calls of {per_call} × {s.record_bytes} B as fast as they return, "
        "flush_interval 0.05 s, then close() (every call in the queue); MB/s over the whole run, unspooled, "
        "spooled with durability local and spooled with durability queue (the streaming path: no fsync per "
        "call) in runs of three, spool in the temp directory; produce() latency in the durability-local runs "
        "is the time to locally durable (fsync'd)",
        "unspooled_mb_s": summarize([a["mb_s"] for a, _ in pairs]),
        "spooled_mb_s": summarize([b["mb_s"] for _, b in pairs]),
        "ratio": summarize([b["mb_s"] / a["mb_s"] for a, b in pairs]),
        "durable_p50_ms": summarize([b["produce_p50_ms"] for _, b in pairs]),
        "durable_p99_ms": summarize([b["produce_p99_ms"] for _, b in pairs]),
        "unspooled_produce_p99_ms": summarize([a["produce_p99_ms"] for a, _ in pairs]),
        "unspooled_calls_s": summarize([a["calls_s"] for a, _ in pairs]),
        "unspooled_close_s": summarize([a["close_s"] for a, _ in pairs]),
        "spooled_calls_s": summarize([b["calls_s"] for _, b in pairs]),
        "spooled_close_s": summarize([b["close_s"] for _, b in pairs]),
        "streaming_mb_s": summarize([q["mb_s"] for q in streaming]),
        "streaming_ratio": summarize([q["mb_s"] / a["mb_s"] for (a, _), q in zip(pairs, streaming)]),
        "streaming_produce_p99_ms": summarize([q["produce_p99_ms"] for q in streaming]),
        "streaming_calls_s": summarize([q["calls_s"] for q in streaming]),
        "streaming_close_s": summarize([q["close_s"] for q in streaming]),
    }
    s.log(
        f"spool: {out['spooled_mb_s']['median']:.1f} vs {out['unspooled_mb_s']['median']:.1f} MB/s "
        f"(ratio {out['ratio']['median']:.3f}); produce() to locally durable p99 "
        f"{out['durable_p99_ms']['median']:.2f} ms; calls + close(): unspooled "
        f"{out['unspooled_calls_s']['median']:.2f} + {out['unspooled_close_s']['median']:.2f} s, spooled "
        f"{out['spooled_calls_s']['median']:.2f} + {out['spooled_close_s']['median']:.2f} s; streaming path "
        f"(durability queue) {out['streaming_mb_s']['median']:.1f} MB/s, ratio {out['streaming_ratio']['median']:.3f}, "
        f"calls + close() {out['streaming_calls_s']['median']:.2f} + {out['streaming_close_s']['median']:.2f} s"
    )
    return out


JVM_SPOOL_SOURCE = REPO_ROOT / "bench" / "jvm" / "SpoolProducers.java"
JVM_SPOOL_WARMUP_CALLS = 500
"""produce() calls of each mode first, for the JIT (not reported)."""


def bench_jvm_spool(env: Env, s: Settings) -> dict[str, Any]:
    cp = bench_classpath(s, "jvm_spool", JVM_SPOOL_SOURCE)
    if cp is None:
        return {"skipped": "java or the core's class path not found"}
    calls = _spool_calls(s)
    per_call, flush_ms = 16, 50
    warmup = min(calls, JVM_SPOOL_WARMUP_CALLS)
    opts = [f"{k}={v}" for k, v in env.options().items()]
    with tempfile.TemporaryDirectory(prefix="osq-bench-jvm-spool-") as spool_parent:
        cmd = [
            shutil.which("java") or "java",
            "-cp",
            cp,
            str(JVM_SPOOL_SOURCE),
            env.uri(f"jvm-spool-{uuid.uuid4().hex[:8]}"),
            str(s.record_bytes),
            str(per_call),
            str(calls),
            str(flush_ms),
            str(s.ratio_repeats),
            str(warmup),
            spool_parent,
            *opts,
        ]
        s.log(f"jvm_spool: one JVM, {s.ratio_repeats} repeats of off / local / queue, {calls} calls each ...")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    runs = [r for r in runs if r["repeat"] >= 0]
    if proc.returncode != 0 or len(runs) != 3 * s.ratio_repeats:
        raise RuntimeError(f"SpoolProducers.java exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    by = {(r["repeat"], r["mode"]): r for r in runs}
    for r in runs:
        r["mb_s"] = r["payload_bytes"] / r["elapsed_s"] / 1e6
        if r["entries_decoded"] != r["entries"]:
            raise RuntimeError(
                f"jvm_spool: {r['mode']} run {r['repeat']} decoded {r['entries_decoded']} of {r['entries']}"
            )
    reps = range(s.ratio_repeats)

    def col(mode: str, key: str) -> dict[str, float]:
        return summarize([by[(i, mode)][key] for i in reps])

    out: dict[str, Any] = {
        "description": f"the spool row's workload with the JVM core's Producer in one warm JVM "
        f"(bench/jvm/SpoolProducers.java, after {warmup} calls of each mode): {calls} produce() calls of "
        f"{per_call} × {s.record_bytes} B as fast as they return, flush every {flush_ms} ms, then every handle "
        "durable and close(); MB/s over the whole run, unspooled, spooled durability local and spooled "
        "durability queue (the streaming path) in runs of three, spool in the temp directory",
        "unspooled_mb_s": col("off", "mb_s"),
        "spooled_mb_s": col("local", "mb_s"),
        "streaming_mb_s": col("queue", "mb_s"),
        "ratio": summarize([by[(i, "local")]["mb_s"] / by[(i, "off")]["mb_s"] for i in reps]),
        "streaming_ratio": summarize([by[(i, "queue")]["mb_s"] / by[(i, "off")]["mb_s"] for i in reps]),
        "durable_p50_ms": col("local", "produce_p50_ms"),
        "durable_p99_ms": col("local", "produce_p99_ms"),
        "streaming_produce_p99_ms": col("queue", "produce_p99_ms"),
        "unspooled_calls_s": col("off", "calls_s"),
        "unspooled_close_s": col("off", "close_s"),
        "spooled_calls_s": col("local", "calls_s"),
        "spooled_close_s": col("local", "close_s"),
        "streaming_calls_s": col("queue", "calls_s"),
        "streaming_close_s": col("queue", "close_s"),
        "raw_runs": runs,
    }
    s.log(
        f"jvm_spool: unspooled {out['unspooled_mb_s']['median']:.1f} MB/s; local {out['spooled_mb_s']['median']:.1f} "
        f"MB/s (ratio {out['ratio']['median']:.3f}, produce() to locally durable p99 "
        f"{out['durable_p99_ms']['median']:.2f} ms); streaming path (durability queue) "
        f"{out['streaming_mb_s']['median']:.1f} MB/s, ratio {out['streaming_ratio']['median']:.3f}"
    )
    return out


def _time_checks(data: list[tuple[Any, bytes]]) -> float:
    from osqueue.format.batch_integrity import verify_entry

    c0 = time.perf_counter()
    for e, d in data:
        rec = verify_entry(e, MANIFEST)
        if rec is None or (len(d), zlib.crc32(d)) != (rec.byte_length, rec.batch_crc32):
            raise RuntimeError(f"verify_read: {e.location} does not check")
    return time.perf_counter() - c0


def bench_verify_read(env: Env, s: Settings) -> dict[str, Any]:
    from osqueue.consumer import Consumer
    from osqueue.format.manifest_head import decode_head
    from osqueue.producer import Producer

    batches = VERIFY_BATCHES[0] if s.quick else VERIFY_BATCHES[1]
    per_batch = 500
    record = b"v" * s.record_bytes
    runs = []
    for _ in range(s.repeats):
        store = env.store(f"verify-{uuid.uuid4().hex[:8]}")
        with Producer(store=store, flush_interval=3600) as p:
            for _b in range(batches):
                p.produce([record] * per_batch)
                p.flush()
        t0 = time.perf_counter()
        rows = 0
        with Consumer(store=store, run_gc=False) as c:
            while (batch := c.next_batch()) is not None:
                rows += len(batch.entries)
        read_s = time.perf_counter() - t0
        # The same checks on their own, over the same entries and bytes (held in memory: no I/O).
        head = decode_head(store.get(MANIFEST).data, MANIFEST)  # type: ignore[union-attr]
        data = [(e, store.get(e.location).data) for e in head.tail]  # type: ignore[union-attr]
        verify_s = min(_time_checks(data) for _ in range(CHECK_REPEATS))
        store.close()
        if rows != batches * per_batch:
            raise RuntimeError(f"verify_read: read {rows} of {batches * per_batch} rows")
        runs.append(
            {"rows_s": rows / read_s, "verify_share": verify_s / read_s, "rows_s_without": rows / (read_s - verify_s)}
        )
    out: dict[str, Any] = {
        "description": f"{batches} batches of {per_batch} × {s.record_bytes} B (uncompressed), read by a native "
        "Consumer (no ack); the entry and batch CRC checks it makes, timed alone over the same entries and "
        "bytes, as a share of the read's time; rows/s without them = rows / (read time - check time)",
        "rows_s": summarize([r["rows_s"] for r in runs]),
        "rows_s_without_checks": summarize([r["rows_s_without"] for r in runs]),
        "verification_share": summarize([r["verify_share"] for r in runs]),
    }
    s.log(
        f"verify_read: {out['rows_s']['median']:.0f} rows/s, checks {100 * out['verification_share']['median']:.2f} % "
        "of the read"
    )
    return out
