"""Issue 29 item 2 / ADR 0007 part 2, Python client (``deep_v1``): a deep RFC v1 manifest appended to by
osqueue, then read. Three queues on the benchmark's store:

- ``v1_100``: a v1 manifest of 100 entries (the baseline a consumer starts on);
- ``chunked``: a v1 manifest of D entries (as the RFC reference writes it), then one append by a producer
  with K = 2,048: it seals the tail in chunks of K (docs/format.md §2.2);
- ``one_segment``: the same, appended by a producer with K = D, which seals it as ONE segment: the head
  osqueue built before chunked sealing (the 73 MB segment of issue 29).

Per queue: the first append's time and the objects it wrote; a Consumer (no GC) opening and handing out
its first 3 batches (``next_descriptors(1)`` three times: the manifest work, not the batch GETs, the
batches do not exist), best of 3 fresh consumers (1 for ``one_segment``); and the peak of Python
allocations (tracemalloc, in a separate untimed consumer; not for ``one_segment``) over the same work. Locations are ULID batch names.
"""

from __future__ import annotations

import random
import resource
import time
import tracemalloc
import uuid
from typing import Any

from bench.harness.environment import MANIFEST, Env, Settings
from osqueue import metrics as m
from osqueue.consumer import Consumer
from osqueue.format import MetadataItem, empty_manifest, encode_ulid
from osqueue.format.manifest_head import MAX_SEGMENT_ENTRIES, parse_head
from osqueue.format.segment_ref import SegmentRef
from osqueue.queue import ManifestStore, QueueProducer, SegmentTree
from osqueue.store import ObjectStore

K = 2048
QUICK_DEPTH = 20_000
META = [MetadataItem(0, 1_767_225_600_000, b"m")]


def _no_seal(*_: object) -> SegmentRef:
    raise AssertionError("a v1 manifest is written without sealing")


def _v1(depth: int, rng: random.Random) -> bytes:
    """A v1 manifest of ``depth`` entries."""
    now = int(time.time() * 1000)
    entries = [(f"ingest/{encode_ulid(now, rng.getrandbits(80))}.batch", META) for _ in range(depth)]
    return parse_head(empty_manifest(), MANIFEST).appended(entries, MAX_SEGMENT_ENTRIES, _no_seal, _no_seal)[0]


def _first_three(store: ObjectStore) -> float:
    """Seconds for a fresh consumer to open and hand out its first 3 batches."""
    t = time.perf_counter()
    c = Consumer(store=store, manifest_path=MANIFEST, run_gc=False, metrics=m.MetricsRegistry())
    for _ in range(3):
        if not c.next_descriptors(1):
            raise RuntimeError("deep_v1: the queue ran dry")
    spent = time.perf_counter() - t
    c.close()
    return spent


def _peak_mb(store: ObjectStore) -> float:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        _first_three(store)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 1048576


def _row(env: Env, name: str, v1: bytes, depth: int, k: int, rng: random.Random, s: Settings) -> dict[str, Any]:
    """One queue; the one-segment head is timed once and its memory not traced (tracemalloc over decoding
    a 73 MB segment takes many minutes on a loaded machine)."""
    store = env.store(f"deepv1-{name}-{uuid.uuid4().hex[:8]}")
    store.put(MANIFEST, v1)
    v1_bytes = len(v1)
    metrics = m.MetricsRegistry()
    producer = QueueProducer(store, MANIFEST, manifest_segment_entries=k, metrics=metrics)
    t = time.perf_counter()
    producer.enqueue(f"ingest/{encode_ulid(int(time.time() * 1000), rng.getrandbits(80))}.batch", META)
    append_s = time.perf_counter() - t
    producer.close()
    ms = ManifestStore(store, MANIFEST)
    head = ms.head(ms.read_raw()[0])
    leaves = list(SegmentTree(ms).leaves(head, head.refs[0].first_sequence)) if head.refs else []
    big = name == "one_segment"
    peak = float("nan") if big else _peak_mb(store)
    open3 = min(_first_three(store) for _ in range(1 if big else 3))
    row = {
        "queue": name,
        "depth": depth,
        "producer_k": k,
        "v1_manifest_bytes": v1_bytes,
        "first_append_s": round(append_s, 2),
        "segments": len(leaves),
        "largest_segment_entries": max((r.entry_count for r in leaves), default=0),
        "largest_segment_bytes": max((r.byte_length for r in leaves), default=0),
        "head_refs": len(head.refs),
        "head_bytes": len(head.raw),
        "consumer_open_first_3_batches_s": round(open3, 3),
        "consumer_peak_traced_mb": round(peak, 1),
    }
    s.log(
        f"deep_v1 {name:>11} D={depth}: first append {append_s:.2f} s, {len(leaves)} segments (largest "
        f"{row['largest_segment_entries']} entries), head {len(head.raw)} B; open + 3 batches {open3:.3f} s, "
        f"peak {peak:.1f} MB traced"
    )
    store.close()
    return row


def bench_deep_v1(env: Env, s: Settings) -> dict[str, Any]:
    depth = QUICK_DEPTH if s.quick else 1_000_000
    rng = random.Random(29)
    deep = _v1(depth, rng)
    rows = [
        _row(env, "v1_100", _v1(100, rng), 100, K, rng, s),
        _row(env, "chunked", deep, depth, K, rng, s),
        _row(env, "one_segment", deep, depth, depth, rng, s),
    ]
    base = rows[0]["consumer_open_first_3_batches_s"]
    extra = {r["queue"]: round(r["consumer_open_first_3_batches_s"] - base, 3) for r in rows[1:]}
    return {
        "description": f"bench/harness/deep_v1.py: a v1 manifest of {depth} entries appended to once by a producer "
        f"with K = {K} (chunked sealing) and with K = {depth} (one segment, as before ADR 0007 part 2), against "
        "100 queued; a Consumer (no GC) opening and handing out 3 batches (best of 3), its peak traced in a separate run",
        "rows": rows,
        "open_first_3_extra_s_vs_100": extra,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "goal": "open + first 3 batches at most 0.5 s slower than at 100 queued; consumer memory < 256 MB",
        "goal_met": bool(extra["chunked"] <= 0.5 and rows[1]["consumer_peak_traced_mb"] < 256),
    }
