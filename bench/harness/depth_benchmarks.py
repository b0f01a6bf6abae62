"""Issue 15's depth benchmark, Python client (``py_depth``), beside the JVM's ``jvm_depth``
(bench/jvm/SegmentedDepth.java): what an append and a delivered batch cost with D batches queued on
a segmented manifest (docs/format.md §2.2).

Per depth D the queue is built through the producers' own edit (``RawHead.appended``, which seals
the tail into segment objects and folds refs into index objects) in groups of K entries, then one group of K/2 (so the tail sits at
its average K/2 entries, not just after a seal); only the final head is PUT (the JVM bench PUTs
every intermediate one; the queue is the same). Then:

- single-entry appends through a ``QueueProducer`` (GET the head, append, seal when the tail passes
  K, fold, conditional PUT), round-robin over the depths after 10 unmeasured ones each: latency of each
  and the bytes each one wrote (the head, plus the segment and index objects when it sealed);
- a ``Consumer`` (no GC) initializes and hands out descriptors one at a time (``next_descriptors(1)``,
  ``ack_through`` every 1,000): time per delivered descriptor (the manifest work, not the batch GET:
  the batches do not exist); before it, another consumer over the same queue gives the peak of
  Python allocations (tracemalloc, which slows a run, hence not the timed one) while it hands out
  3 K descriptors (three segments' worth).

Locations are ULID batch names; no batch objects are written.
"""

from __future__ import annotations

import random
import resource
import time
import tracemalloc
import uuid
from dataclasses import dataclass, field
from typing import Any

from bench.harness.environment import MANIFEST, Env, Settings
from bench.harness.stats import percentile
from osqueue import metrics as m
from osqueue.consumer import Consumer
from osqueue.format import FoldedIndex, MetadataItem, SegmentRef, empty_manifest, encode_ulid, fanout
from osqueue.format.manifest_head import RawHead, SealedTail, parse_head
from osqueue.queue import ManifestStore, QueueProducer, SegmentTree
from osqueue.store import ObjectStore

K = 2048
WARMUP = 10
META = [MetadataItem(0, 1_767_225_600_000, b"m")]


def _location(rng: random.Random, now_ms: int) -> str:
    return f"ingest/{encode_ulid(now_ms, rng.getrandbits(80))}.batch"


@dataclass
class _Queue:
    depth: int
    store: ObjectStore
    producer: QueueProducer
    build_s: float
    latencies_ms: list[float] = field(default_factory=list)
    written: list[int] = field(default_factory=list)
    seals: int = 0
    folds: int = 0


def _build(env: Env, depth: int, rng: random.Random) -> _Queue:
    store = env.store(f"pydepth-{depth}-{uuid.uuid4().hex[:8]}")
    ms = ManifestStore(store, MANIFEST)
    now = int(time.time() * 1000)
    t0 = time.monotonic()

    def seal(t: SealedTail) -> SegmentRef:
        return ms.write_segment(t, now, rng)

    def fold(f: FoldedIndex) -> SegmentRef:
        return ms.write_index(f, now, rng)

    raw = empty_manifest()
    built = 0
    target = (depth - K // 2) // K * K if depth > K else depth
    groups = [min(K, target - b) for b in range(0, target, K)] + ([K // 2] if depth > K else [])
    for n in groups:
        raw, _ = parse_head(raw, MANIFEST).appended([(_location(rng, now), META) for _ in range(n)], K, seal, fold)
        built += n
    store.put(MANIFEST, raw)
    producer = QueueProducer(store, MANIFEST, manifest_segment_entries=K, metrics=m.MetricsRegistry())
    return _Queue(built, store, producer, time.monotonic() - t0)


def _append(q: _Queue, rng: random.Random, measured: bool) -> None:
    ms = ManifestStore(q.store, MANIFEST)
    before = {r.key for r in ms.head(ms.read_raw()[0]).refs}
    t = time.perf_counter()
    q.producer.enqueue(_location(rng, int(time.time() * 1000)), META)
    elapsed = (time.perf_counter() - t) * 1000
    if not measured:
        return
    after = ms.head(ms.read_raw()[0])
    q.latencies_ms.append(elapsed)
    tree = SegmentTree(ms)

    def new_bytes(r: SegmentRef) -> int:
        """The object's bytes and those of the new objects folded into it (read back, not timed)."""
        below = [c for c in tree.children(r) if c.key not in before] if r.level > 0 else []
        return r.byte_length + sum(new_bytes(c) for c in below)

    written = len(after.raw)
    new = [r for r in after.refs if r.key not in before]
    if new:
        q.seals += 1
        q.folds += any(r.level > 0 for r in new)
        written += sum(new_bytes(r) for r in new)
    q.written.append(written)


def _consume(q: _Queue, deliveries: int) -> tuple[float, float, int]:
    """(initialize ms, us per delivered descriptor, delivered)."""
    t = time.perf_counter()
    c = Consumer(store=q.store, manifest_path=MANIFEST, run_gc=False, metrics=m.MetricsRegistry())
    init_ms = (time.perf_counter() - t) * 1000
    delivered, last = 0, None
    t = time.perf_counter()
    while delivered < deliveries:
        ds = c.next_descriptors(1)
        if not ds:
            break
        last = ds[0].sequence
        delivered += 1
        if delivered % 1000 == 0:
            c.ack_through(last)
    spent = time.perf_counter() - t
    if last is None:
        raise RuntimeError(f"py_depth: nothing delivered at depth {q.depth}")
    if delivered % 1000:
        c.ack_through(last)
    c.close()
    return init_ms, spent * 1e6 / delivered, delivered


def _consumer_peak_mb(q: _Queue) -> float:
    """Peak Python allocations while a fresh consumer hands out three segments' worth (no acks: the
    queue is left as it was for the timed consumer, which fences this one)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        c = Consumer(store=q.store, manifest_path=MANIFEST, run_gc=False, metrics=m.MetricsRegistry())
        handed = 0
        while handed < 3 * K:
            ds = c.next_descriptors(1000)
            if not ds:
                break
            handed += len(ds)
        c.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 1048576


def bench_py_depth(env: Env, s: Settings) -> dict[str, Any]:
    depths = [100, 10_000] if s.quick else [100, 100_000, 1_000_000]
    appends, deliveries = (10, 2000) if s.quick else (50, 20_000)
    rng = random.Random(15)
    s.log(f"py_depth: K = {K}, depths {depths}, {appends} appends and {deliveries} deliveries each ...")
    queues = []
    for d in depths:
        queues.append(_build(env, d, rng))
        s.log(f"py_depth: built {queues[-1].depth} queued in {queues[-1].build_s:.1f} s")
    for i in range(-WARMUP, appends):  # round-robin: load drift hits every depth alike
        for q in queues:
            _append(q, rng, measured=i >= 0)
    rows = []
    for q in queues:
        q.producer.close()
        ms = ManifestStore(q.store, MANIFEST)
        head: RawHead = ms.head(ms.read_raw()[0])  # as the appends left it
        levels: dict[int, int] = {}
        for r in head.refs:
            levels[r.level] = levels.get(r.level, 0) + 1
        segments = sum(1 for _ in SegmentTree(ms).leaves(head, head.refs[0].first_sequence)) if head.refs else 0
        peak_mb = _consumer_peak_mb(q)
        init_ms, us_per, delivered = _consume(q, deliveries)
        lat = sorted(q.latencies_ms)
        row = {
            "depth": q.depth,
            "k": K,
            "segments": segments,
            "head_refs": len(head.refs),
            "head_refs_per_level": {str(level): n for level, n in sorted(levels.items())},
            "fanout": fanout(K),
            "tail": head.tail_size,
            "head_bytes": len(head.raw),
            "build_s": round(q.build_s, 1),
            "append_latency_ms_median": percentile(lat, 50),
            "append_latency_ms_p90": percentile(lat, 90),
            "append_latency_ms_max": lat[-1],
            "appends": appends,
            "seals": q.seals,
            "appends_that_folded": q.folds,
            "bytes_written_per_append_mean": sum(q.written) // len(q.written),
            "bytes_written_per_append_max": max(q.written),
            "consumer_initialize_ms": round(init_ms, 1),
            "delivered": delivered,
            "consumer_us_per_delivered": round(us_per, 2),
            "consumer_peak_traced_mb": round(peak_mb, 1),
        }
        rows.append(row)
        q.store.close()
        s.log(
            f"py_depth {row['depth']:>9}: {row['segments']} segments, {row['head_refs']} head refs "
            f"{row['head_refs_per_level']}, tail {row['tail']}, head {row['head_bytes']} B; "
            f"append {row['append_latency_ms_median']:.1f} ms median ({row['bytes_written_per_append_mean']} B "
            f"written); consumer {row['consumer_us_per_delivered']:.1f} us/descriptor, {peak_mb:.1f} MB peak traced"
        )
    ratio = rows[-1]["append_latency_ms_median"] / rows[0]["append_latency_ms_median"]
    return {
        "description": f"bench/harness/depth_benchmarks.py, K = {K}, F = {fanout(K)}: a queue of each depth built "
        "through the producers' sealing and folding edit (tail left at K/2), then single-entry appends through QueueProducer round-robin "
        "over the depths (after 10 unmeasured each), and a Consumer handing out descriptors one at a time (no batch "
        "GETs; ack_through every 1,000); the peak traced (tracemalloc) in a second consumer handing out 3 K",
        "k": K,
        "rows": rows,
        "append_latency_ratio_deepest_to_100": {"median": ratio, "min": ratio, "max": ratio, "n": 1},
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "goal": "append latency at the deepest ÷ at 100 queued <= 1.5; consumer memory < 256 MB at the deepest",
        "goal_met": bool(ratio <= 1.5 and rows[-1]["consumer_peak_traced_mb"] < 256),
    }
