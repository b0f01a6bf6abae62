"""Benchmarks of the native Python client against the S3 server: ``contention``, ``depth`` and
``requests`` (with :class:`CountingStore`, a store that counts its requests)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.harness.environment import MANIFEST, PREFIX, Env, Settings
from bench.harness.stats import fmt, percentile, summarize
from osqueue import metrics as m
from osqueue.format import MetadataItem, append_entries, decode_manifest, empty_manifest, encode_entry
from osqueue.store import ObjectInfo, ObjectStore, ObjectVersion, VersionedObject


class CountingStore:
    """Wraps an :class:`ObjectStore` and counts its requests by kind (PUT, GET, LIST, DELETE).

    Conditional writes count as PUT. ``close()`` does not close the wrapped store.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.counts = {"PUT": 0, "GET": 0, "LIST": 0, "DELETE": 0}

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    @property
    def uri(self) -> str:
        return self.inner.uri

    def get(self, key: str) -> VersionedObject | None:
        self._count("GET")
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        self._count("PUT")
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> Any:
        self._count("PUT")
        return self.inner.put_if_absent(key, data)

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> Any:
        self._count("PUT")
        return self.inner.put_if_version_matches(key, data, expected_version)

    def list(self, prefix: str) -> list[ObjectInfo]:
        self._count("LIST")
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self._count("DELETE")
        self.inner.delete(key)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# benchmark 2: manifest contention


def _contention_run(env: Env, threads: int, mode: str, duration: float) -> dict[str, Any]:
    from osqueue.producer import Producer

    prefix = f"contention-{mode}-{threads}-{uuid.uuid4().hex[:8]}"
    base = env.store(prefix)
    registry = m.MetricsRegistry()
    shared = CountingStore(base)
    stores = [shared if mode == "shared" else CountingStore(base) for _ in range(threads)]
    entry = b"x" * 100
    latencies: list[float] = []
    lat_lock = threading.Lock()
    produced_calls = [0] * threads
    errors: list[BaseException] = []
    stop = threading.Event()
    producers = [Producer(store=s, flush_interval=0.1, metrics=registry) for s in stores]

    def record(t0: float) -> Callable[[Any], None]:
        def done(f: Any) -> None:
            now = time.monotonic()
            if f.exception() is not None:
                errors.append(f.exception())
                return
            with lat_lock:
                latencies.append(now - t0)

        return done

    def work(i: int) -> None:
        p = producers[i]
        n = 0
        while not stop.is_set():
            t0 = time.monotonic()
            h = p.produce([entry] * 10, b"bench")
            h.add_done_callback(record(t0))
            n += 1
            time.sleep(0.01)
        produced_calls[i] = n

    workers = [threading.Thread(target=work, args=(i,), name=f"bench-producer-{i}") for i in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    time.sleep(duration)
    stop.set()
    for w in workers:
        w.join()
    for p in producers:
        p.close()
    elapsed = time.monotonic() - started
    batches = registry.counter(m.BATCHES_FLUSHED).value
    writes = registry.counter(m.MANIFEST_WRITES, role="producer").value
    conflicts = registry.counter(m.MANIFEST_CONFLICTS, role="producer").value
    raw = base.get(MANIFEST)
    manifest = decode_manifest(raw.data, MANIFEST) if raw is not None else None
    locations = [e.location for e in manifest.entries] if manifest else []
    base.close()
    lat = sorted(latencies)
    return {
        "elapsed_s": elapsed,
        "batches": batches,
        "batches_per_s": batches / elapsed,
        "manifest_writes": writes,
        "manifest_conflicts": conflicts,
        "cas_attempts_per_write": (writes + conflicts) / writes if writes else float("nan"),
        "batches_per_write": batches / writes if writes else float("nan"),
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "produce_calls": sum(produced_calls),
        "durable_calls": len(lat),
        "manifest_entries": len(locations),
        "duplicates": len(locations) - len(set(locations)),
        "missing": int(batches) - len(set(locations)),
        "errors": len(errors),
    }


def bench_contention(env: Env, s: Settings) -> dict[str, Any]:
    duration = 1.0 if s.quick else 5.0
    counts = [1, 2, 4, 8]
    modes: dict[str, Any] = {}
    for mode in ("shared", "separate"):
        rows = []
        for n in counts:
            runs = [_contention_run(env, n, mode, duration) for _ in range(s.repeats)]
            row = {"producers": n, "runs": len(runs)}
            for k in ("batches_per_s", "cas_attempts_per_write", "batches_per_write", "p50_ms", "p99_ms"):
                row[k] = summarize([r[k] for r in runs])
            row["duplicates"] = sum(r["duplicates"] for r in runs)
            row["missing"] = sum(r["missing"] for r in runs)
            row["errors"] = sum(r["errors"] for r in runs)
            row["raw_runs"] = [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in runs]
            rows.append(row)
            s.log(
                f"contention[{mode}] {n} producer(s): {fmt(row['batches_per_s'], ' batches/s')}, "
                f"CAS attempts/write {fmt(row['cas_attempts_per_write'], '', 2)}, "
                f"p50 {fmt(row['p50_ms'], ' ms', 0)}, p99 {fmt(row['p99_ms'], ' ms', 0)}, "
                f"duplicates {row['duplicates']}"
            )
        one = rows[0]["batches_per_s"]["median"]
        eight = rows[-1]["batches_per_s"]["median"]
        # The 8:1 ratio per repeat (run i of 8 producers vs run i of 1), then its median.
        ratios = [a["batches_per_s"] / b["batches_per_s"] for a, b in zip(rows[-1]["raw_runs"], rows[0]["raw_runs"])]
        modes[mode] = {
            "rows": rows,
            "speedup_8_vs_1": summarize(ratios),
            "speedup_8_vs_1_of_medians": eight / one if one else None,
        }
    shared_speedup = modes["shared"]["speedup_8_vs_1"]["median"]
    return {
        "description": "N producer threads (each its own Producer, flush_interval 0.1 s, calls of 10 x 100 B "
        "entries every ~10 ms per thread) for a fixed time into one manifest; shared = one store object "
        "(one group committer, as Producer(path) in one process); separate = one store object per producer "
        "(racing CAS writers, like separate processes)",
        "duration_s": duration,
        "modes": modes,
        "duplicates": sum(r["duplicates"] for md in modes.values() for r in md["rows"]),
        "goal": "8 producers >= 6x one (batches enqueued/s)",
        "goal_met": bool(shared_speedup is not None and shared_speedup >= 6.0),
    }


# ---------------------------------------------------------------------------------------------
# benchmark 6: cost vs queue depth


def _build_manifest(depth: int) -> bytes:
    """A manifest of ``depth`` entries (sequences 0..depth-1), encoded with osqueue.format."""
    import struct

    meta = [MetadataItem(0, 1_700_000_000_000, b"bench")]
    body = b"".join(encode_entry(i, f"{PREFIX}/01J5T4R3KX{i:016d}.batch", meta) for i in range(depth))
    footer = empty_manifest()  # entry_count 0, next_sequence 0, epoch 0, version 1
    return body + struct.pack("<IQ", depth, depth) + footer[12:]


def bench_depth(env: Env, s: Settings) -> dict[str, Any]:
    from osqueue.format.manifest_head import MAX_SEGMENT_ENTRIES
    from osqueue.queue import QueueProducer

    depths = [100, 10_000, 100_000]
    appends = 4 if s.quick else 20
    rows = []
    for depth in depths:
        raw = _build_manifest(depth)
        decode_manifest(raw, MANIFEST)  # a valid manifest
        prefix = f"depth-{depth}-{uuid.uuid4().hex[:8]}"
        base = env.store(prefix)
        base.put(MANIFEST, raw)
        registry = m.MetricsRegistry()
        # The unsegmented (RFC v1) cost, the "before" of issue 15; py_depth measures the segmented head.
        producer = QueueProducer(base, MANIFEST, metrics=registry, manifest_segment_entries=MAX_SEGMENT_ENTRIES)
        latencies = []
        sizes = []
        meta = [MetadataItem(0, int(time.time() * 1000), b"bench")]
        for i in range(appends):
            t0 = time.monotonic()
            producer.enqueue(f"{PREFIX}/01J5T4R3KZ{i:016d}.batch", meta)
            latencies.append((time.monotonic() - t0) * 1000)
        producer.close()
        final = base.get(MANIFEST)
        assert final is not None
        sizes.append(len(final.data))
        decode_manifest(final.data, MANIFEST)
        base.close()
        # CPU-only cost of one append (no I/O): footer strip + encode + concatenate.
        cpu = []
        for _ in range(appends):
            t0 = time.perf_counter()
            append_entries(raw, [(f"{PREFIX}/01J5T4R3KZ0000000000000000.batch", meta)], MANIFEST)
            cpu.append((time.perf_counter() - t0) * 1000)
        row = {
            "queued_entries": depth,
            "manifest_bytes": len(raw),
            "bytes_rewritten_per_append": len(raw)
            + len(encode_entry(depth, f"{PREFIX}/01J5T4R3KZ0000000000000000.batch", meta)),
            "append_latency_ms": summarize(latencies),
            "append_cpu_ms": summarize(cpu),
            "appends": appends,
            "conflicts": registry.counter(m.MANIFEST_CONFLICTS, role="producer").value,
        }
        rows.append(row)
        s.log(
            f"depth {depth:>7} entries: manifest {len(raw):>9} B, append {fmt(row['append_latency_ms'], ' ms')}, "
            f"CPU {fmt(row['append_cpu_ms'], ' ms', 3)}, rewrites {row['bytes_rewritten_per_append']} B"
        )
    return {
        "description": "one appender (QueueProducer.enqueue: GET manifest, append, conditional PUT) on a manifest "
        "pre-built with osqueue.format at each depth; spread is over the appends",
        "rows": rows,
    }


# ---------------------------------------------------------------------------------------------
# object-store requests per 1,000 entries


def bench_requests(env: Env, s: Settings) -> dict[str, Any]:
    from osqueue.consumer import Consumer
    from osqueue.gc import GarbageCollector
    from osqueue.producer import Producer

    count = 2_000 if s.quick else 20_000
    per_call = 100
    runs = []
    for r in range(s.repeats):
        prefix = f"requests-{r}-{uuid.uuid4().hex[:8]}"
        base = env.store(prefix)
        produce_store = CountingStore(base)
        registry = m.MetricsRegistry()
        # The queue's grace period (recorded by its first producer) bounds GC from below: 1 s here.
        with Producer(store=produce_store, flush_interval=0.1, metrics=registry, gc_grace_period=1.0) as p:
            for _start in range(0, count, per_call):
                p.produce([b"y" * 100] * per_call, b"bench")
                time.sleep(0.02)
        consume_store = CountingStore(base)
        consumed = 0
        with Consumer(store=consume_store, run_gc=False, metrics=m.MetricsRegistry()) as c:
            while (batch := c.next_batch()) is not None:
                consumed += len(batch.entries)
                c.ack(batch.sequence)
        gc_store = CountingStore(base)
        time.sleep(1.0)  # every batch past the queue's 1 s grace period
        GarbageCollector(gc_store, MANIFEST, PREFIX, grace_period=0).run_once()
        base.close()
        if consumed != count:
            raise RuntimeError(f"requests: consumed {consumed} of {count} entries")
        per_k = 1000 / count
        runs.append(
            {
                "batches": registry.counter(m.BATCHES_FLUSHED).value,
                "produce": {k: v * per_k for k, v in produce_store.snapshot().items()},
                "consume": {k: v * per_k for k, v in consume_store.snapshot().items()},
                "gc": {k: v * per_k for k, v in gc_store.snapshot().items()},
            }
        )
    out: dict[str, Any] = {
        "description": f"{count} entries of 100 B in calls of {per_call} every ~20 ms, flush_interval 0.1 s (about 5 calls per batch); then a "
        "native Consumer reads and acks all (one dequeue write at close) and one GC cycle (grace 0) deletes "
        "the batch files; requests counted by a wrapping store, per 1,000 entries",
        "entries": count,
    }
    for phase in ("produce", "consume", "gc"):
        out[phase] = {k: summarize([run[phase][k] for run in runs]) for k in ("PUT", "GET", "LIST", "DELETE")}
    total = {
        k: summarize([sum(run[ph][k] for ph in ("produce", "consume", "gc")) for run in runs])
        for k in ("PUT", "GET", "LIST", "DELETE")
    }
    out["total"] = total
    out["batches"] = summarize([run["batches"] for run in runs])
    out["entries_per_batch"] = summarize([count / run["batches"] for run in runs])
    s.log(
        "requests per 1,000 entries: "
        + ", ".join(f"{k} {total[k]['median']:.1f}" for k in ("PUT", "GET", "LIST", "DELETE"))
        + " (produce + consume + GC)"
    )
    return out
