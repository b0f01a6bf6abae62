"""Sealing a deep RFC v1 manifest into K-entry segments, and splitting oversized segments (docs/format.md
§2.2 "Append", ADR 0007 part 2): chunks aligned on the tail's first sequence, the head K-at-a-time sealing
builds, readers see every entry in order, a conflict during the seal reuses the chunks, ``osqueue seal``."""

from __future__ import annotations

import random

import pytest
from click.testing import CliRunner
from helpers import ManualClock, WrappedStore
from segmented_queue_helpers import FAST, KEY
from segmented_queue_helpers import head as _head
from segmented_queue_helpers import leaves as _leaves
from segmented_queue_helpers import producer as _producer

from osqueue.cli import cli
from osqueue.consumer import Consumer
from osqueue.format import empty_manifest, new_batch_key, parse_head
from osqueue.format.manifest_head import MAX_SEGMENT_ENTRIES, SealedTail
from osqueue.format.segment_chunks import chunk_bounds
from osqueue.format.segment_ref import SegmentRef
from osqueue.metrics import SEGMENTS_RESPLIT, MetricsRegistry
from osqueue.queue import ManifestAppender, ManifestStore, QueueConsumer
from osqueue.store import InMemoryStore, LocalFileSystemStore, ObjectStore

T0 = 1_767_225_600_000


def _locations(n: int, seed: int = 7) -> list[str]:
    rng, clock = random.Random(seed), ManualClock(T0)
    return [new_batch_key("ingest", clock, rng) for _ in range(n)]


def _write_v1(store: ObjectStore, locations: list[str], first: int = 0) -> None:
    """A v1 manifest of ``locations`` (as the RFC reference writes it), its first sequence ``first``."""
    raw = empty_manifest(0)
    if first:
        raw = parse_head(raw, KEY).appended([("x", [])] * first, MAX_SEGMENT_ENTRIES, _no, _no)[0]
        raw = parse_head(raw, KEY).dequeued_through(first - 1, _no)[0]  # type: ignore[index]
    raw, _ = parse_head(raw, KEY).appended([(loc, []) for loc in locations], MAX_SEGMENT_ENTRIES, _no, _no)
    store.put(KEY, raw)


def _no(*_: object) -> SegmentRef:
    raise AssertionError("no seal here")


def _dequeue(store: ObjectStore, through: int) -> None:
    c = QueueConsumer(store, KEY, retry=FAST)
    c.initialize()
    c.dequeue_through(through)


def _drain(store: ObjectStore) -> list[str]:
    c = Consumer(store=store, run_gc=False, retry=FAST)
    out: list[str] = []
    ds = c.next_descriptors(1000)
    while ds:
        out += [d.location for d in ds]
        c.ack_through(ds[-1].sequence)
        ds = c.next_descriptors(1000)
    c.close()
    return out


def test_chunk_bounds_are_aligned_on_the_first_sequence() -> None:
    assert chunk_bounds(10, 9, 4, 10) == [(10, 4), (14, 4), (18, 1)]
    assert chunk_bounds(12, 7, 4, 10) == [(12, 2), (14, 4), (18, 1)]  # a retry after a dequeue keeps them
    with pytest.raises(ValueError):
        chunk_bounds(9, 1, 4, 10)


def test_a_10k_entry_v1_queue_with_k_64_becomes_segments_of_at_most_64_read_in_order() -> None:
    store = InMemoryStore("deep")
    locations = _locations(10_000)
    _write_v1(store, locations, first=5)
    with _producer(store, 64) as p:
        new = _locations(1, seed=8)[0]
        assert p.enqueue(new).sequence == 10_005
    h = _head(store)
    leaves = _leaves(store)
    assert h.version == 3 and h.low_water == 5 and h.tail_size == 1
    assert all(r.entry_count <= 64 for r in leaves)
    assert [r.first_sequence for r in leaves] == list(range(5, 10_005, 64))  # aligned on s0 = 5
    assert sum(r.entry_count for r in leaves) == 10_000
    assert len(h.refs) <= 2 * 63  # the head stays bounded: the chunks were folded into index objects
    assert _drain(store) == [*locations, new]


@pytest.mark.parametrize(("k", "chunks"), [(4, 3), (4, 8), (64, 5), (5, 13)])
def test_chunked_seal_builds_the_head_k_at_a_time_sealing_builds(k: int, chunks: int) -> None:
    locations = _locations(k * chunks + 1)
    deep, stepwise = InMemoryStore("deep"), InMemoryStore("stepwise")
    _write_v1(deep, locations[:-1])
    with _producer(deep, k) as p:
        p.enqueue(locations[-1])
    with _producer(stepwise, k) as p:
        for loc in locations:
            p.enqueue(loc)

    def shape(store: ObjectStore) -> tuple[list[tuple[int, int, int]], list[bytes], int]:
        h = _head(store)
        return (
            [(r.first_sequence, r.entry_count, r.level) for r in h.refs],
            [r.sha256 for r in _leaves(store)],
            h.tail_size,
        )

    assert shape(deep) == shape(stepwise)


def test_a_conflict_during_the_seal_reuses_the_chunks_and_keeps_their_boundaries() -> None:
    inner = InMemoryStore("conflict")
    store = WrappedStore(inner)
    locations = _locations(1_000)
    _write_v1(inner, locations)
    segment_puts: list[str] = []
    store.on_put = lambda key, _data: segment_puts.append(key) if key.endswith(".segment") else None
    dequeued = [False]

    def consumer_dequeues_first(key, data, expected, apply):  # type: ignore[no-untyped-def]
        if key == KEY and not dequeued[0]:
            dequeued[0] = True  # a consumer dequeues 10 entries between the producer's read and its CAS
            _dequeue(inner, 9)
        return apply()

    store.on_conditional = consumer_dequeues_first
    with _producer(store, 64) as p:
        p.enqueue(_locations(1, seed=9)[0])
    h = _head(inner)
    leaves = _leaves(inner)
    assert dequeued[0] and store.conditional_calls >= 2
    assert len(segment_puts) == len(leaves) == 16  # the retry wrote nothing new: every chunk was reused
    assert leaves[0].first_sequence == 0 and h.low_water == 10  # low_water inside the reused first chunk
    assert [r.first_sequence for r in leaves] == list(range(0, 1_000, 64))
    assert _drain(inner)[:-1] == locations[10:]


def test_an_oversized_segment_is_split_by_the_next_append() -> None:
    store = InMemoryStore("oversized")
    locations = _locations(500)
    _write_v1(store, locations)
    with _producer(store, 500) as p:  # as osqueue before ADR 0007 sealed a deep tail: one 500-entry segment
        p.enqueue(_locations(1, seed=3)[0])
    assert [r.entry_count for r in _leaves(store)] == [500]
    _dequeue(store, 99)
    metrics = MetricsRegistry()
    with _producer(store, 32, metrics=metrics) as p:
        p.enqueue(_locations(1, seed=4)[0])
    leaves = _leaves(store)
    assert _head(store).low_water == 100
    assert [r.first_sequence for r in leaves] == list(range(96, 500, 32))  # chunks below low_water not written
    assert all(r.entry_count <= 32 for r in leaves)
    assert metrics.counter(SEGMENTS_RESPLIT).value == 1
    assert _drain(store)[:-2] == locations[100:]


def test_seal_only_seals_and_is_idempotent() -> None:
    store = InMemoryStore("seal")
    locations = _locations(300)
    _write_v1(store, locations)
    appender = ManifestAppender(
        ManifestStore(store, KEY), ManualClock(T0), random.Random(1), FAST, MetricsRegistry(), 64
    )
    assert appender.seal() == 300
    h = _head(store)
    assert h.tail_size == 0 and h.next_sequence == 300
    assert [r.entry_count for r in _leaves(store)] == [64, 64, 64, 64, 44]
    assert appender.seal() == 0
    assert _drain(store) == locations


def test_cli_seal_on_a_local_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = LocalFileSystemStore(str(tmp_path))
    locations = _locations(200)
    _write_v1(store, locations)
    result = CliRunner().invoke(cli, ["seal", str(tmp_path), "--segment-entries", "50"])
    assert result.exit_code == 0, result.output
    assert "sealed 200 entries into segments of at most 50" in result.output
    assert [r.entry_count for r in _leaves(store)] == [50] * 4
    again = CliRunner().invoke(cli, ["seal", str(tmp_path), "--segment-entries", "50"])
    assert "nothing to seal" in again.output
    assert _drain(store) == locations


def test_sealed_chunks_are_rfc_v1_manifests_byte_for_byte() -> None:
    store = InMemoryStore("bytes")
    locations = _locations(20)
    _write_v1(store, locations)
    v1 = store.get(KEY).data  # type: ignore[union-attr]
    written: list[SealedTail] = []
    new_raw, _ = parse_head(v1, KEY).appended(
        [("ingest/x", [])], 8, lambda t: (written.append(t), t.ref(f"s{len(written)}"))[1], lambda rs: rs[0]
    )
    entries_region = v1[:-22]
    assert b"".join(t.data[:-22] for t in written) == entries_region
    assert [(t.first_sequence, t.entry_count) for t in written] == [(0, 8), (8, 8), (16, 4)]
    assert all(parse_head(t.data, "s").version == 1 for t in written)
