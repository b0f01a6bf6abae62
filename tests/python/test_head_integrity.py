"""Flipped bytes in the manifest head and in index objects are never delivered (docs/adr/0006 items
1 and 3; issue 28): a segmented head is written as version 3 with ``head_crc32``, an index object is
checked against the SHA-256 in the ref that lists it (docs/format.md §2.2, §2.3)."""

from __future__ import annotations

import pytest

from osqueue.consumer import Consumer
from osqueue.errors import CorruptManifestError, UnsupportedFormatVersionError
from osqueue.format import decode_manifest
from osqueue.format.manifest_head import decode_head, parse_head
from osqueue.producer import Producer
from osqueue.queue import ManifestStore, SegmentTree
from osqueue.store import InMemoryStore

KEY = "ingest/manifest"


def _segmented_queue(batches: int = 12) -> tuple[InMemoryStore, list[bytes]]:
    """A queue of one-entry batches written with K = 2 (F = 2): its head lists a segment and index objects."""
    store = InMemoryStore()
    values = [f"value-{i}".encode() for i in range(batches)]
    with Producer(store=store, manifest_segment_entries=2, flush_interval=0.001) as p:
        for v in values:
            p.produce([v]).result(10)
    return store, values


def _drain(store: InMemoryStore) -> list[bytes]:
    out: list[bytes] = []
    with Consumer(store=store) as c:
        while (batch := c.next_batch()) is not None:
            out += batch.entries
            c.ack(batch.sequence)
    return out


def test_a_segmented_head_is_version_3_and_its_queue_reads_back() -> None:
    store, values = _segmented_queue()
    head = parse_head(store.get(KEY).data, KEY)  # type: ignore[union-attr]
    assert head.version == 3 and head.sections.is_empty and any(r.level > 0 for r in head.refs)
    assert _drain(store) == values
    assert decode_manifest(store.get(KEY).data, KEY).entries == []  # type: ignore[union-attr]  # all dequeued: v1


def test_every_flipped_byte_of_a_segmented_head_is_refused_by_the_decoder_and_the_consumer() -> None:
    store, _ = _segmented_queue()
    data = store.get(KEY).data  # type: ignore[union-attr]
    for at in range(len(data)):
        for mask in (0x01, 0x80):
            bad = bytearray(data)
            bad[at] ^= mask
            with pytest.raises((CorruptManifestError, UnsupportedFormatVersionError)):
                decode_head(bytes(bad), KEY)
    # The consumer, for one byte of each region: a ref, the tail, the trailer (low_water), the footer (epoch).
    head = parse_head(data, KEY)
    tail_at = sum(63 + len(r.key) for r in head.refs)
    for at in (21, tail_at + 20, len(data) - 22 - 28 + 16, len(data) - 10):
        bad = bytearray(data)
        bad[at] ^= 0x01
        store.put(KEY, bytes(bad))
        with pytest.raises(CorruptManifestError, match=f"'{KEY}'.*head_crc32"):
            _drain(store)


def test_a_flipped_byte_in_an_index_object_is_refused_naming_it_and_nothing_under_it_is_delivered() -> None:
    store, values = _segmented_queue()
    head = parse_head(store.get(KEY).data, KEY)  # type: ignore[union-attr]
    index = next(r for r in head.refs if r.level > 0)
    under = SegmentTree(ManifestStore(store, KEY)).leaves(head, index.first_sequence)
    assert index.entry_count >= 2 and under
    good = store.get(index.key).data  # type: ignore[union-attr]
    for at in range(0, len(good), 7):
        bad = bytearray(good)
        bad[at] ^= 0x01
        store.put(index.key, bytes(bad))
        delivered: list[bytes] = []
        with Consumer(store=store) as c, pytest.raises(CorruptManifestError, match=index.key):
            while (batch := c.next_batch()) is not None:
                delivered += batch.entries  # not acked: every pass starts from the head
        # What came before the index is delivered, nothing it lists.
        assert delivered == values[: index.first_sequence - head.first_sequence]
    store.put(index.key, good)
    assert _drain(store) == values
