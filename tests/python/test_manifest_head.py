"""The raw head writers and lazy readers use (osqueue.format.manifest_head, the JVM's ManifestHead): golden
vectors both ways, byte-exact, and the epoch edit (appends, dequeues, folding and expansion against a
model: test_segment_tree.py)."""

from __future__ import annotations

import json
import pathlib
import random
import struct

import pytest
from helpers import v2_as_v3

from osqueue.errors import CorruptManifestError, UnsupportedFormatVersionError
from osqueue.format import (
    HEAD_VERSION,
    ManifestEntry,
    SegmentRef,
    decode_head,
    decode_manifest,
    decode_segment,
    encode_manifest,
)
from osqueue.format.manifest_head import NO_BATCH_TIME, SealedTail, decode_head, encode_head, parse_head
from osqueue.format.segment_names import new_key, prefix, ulid_time_ms

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
HEADS = json.loads((GOLDEN / "heads.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("vector", HEADS["heads"], ids=[v["name"] for v in HEADS["heads"]])
def test_golden_head_and_segments_re_encode_byte_exact(vector: dict) -> None:
    data = (GOLDEN / vector["file"]).read_bytes()
    head = decode_head(data, "k")
    # A v2 head is read; writers write it again as version 3 without sections (docs/adr/0006 item 3).
    assert encode_head(head.refs, head.low_water, head.tail, head.next_sequence, head.epoch) == v2_as_v3(data)
    raw = parse_head(data, "k")
    assert (raw.version, raw.first_sequence, raw.depth, raw.refs) == (
        HEAD_VERSION,
        head.low_water,
        len(vector["head"]["queued_sequences"]),
        head.refs,
    )
    assert raw.tail_entries() == head.tail
    assert raw.tail_locations() == [(e.sequence, e.location) for e in head.tail]
    for ref, s in zip(head.refs, vector["head"]["refs"]):
        if ref.level > 0:
            continue  # index objects: test_segment_tree.py
        seg = (GOLDEN / s["file"]).read_bytes()
        entries = decode_segment(seg, ref)
        # A segment is an RFC v1 manifest with epoch 0: re-encoded byte for byte, and its ref is what sealing gives.
        assert encode_manifest(decode_manifest(seg, ref.key)) == seg
        oldest = min(ref.oldest_batch_ms for ref in [ref])
        assert SealedTail(seg, entries[0].sequence, len(entries), oldest).ref(ref.key) == ref


@pytest.mark.parametrize("vector", HEADS["rejected"], ids=[v["name"] for v in HEADS["rejected"]])
def test_rejected_heads_are_refused_by_the_raw_parser_too(vector: dict) -> None:
    data = (GOLDEN / vector["file"]).read_bytes()
    with pytest.raises(CorruptManifestError) as info:
        parse_head(data, "some/key").tail_locations()
    assert type(info.value) is CorruptManifestError and "some/key" in str(info.value)


def test_a_v1_manifest_parses_without_segments_and_a_v4_is_refused() -> None:
    data = (GOLDEN / "manifest_after_dequeue.bin").read_bytes()
    raw = parse_head(data, "m")
    assert raw.version == 1 and not raw.refs and raw.tail_entries() == decode_manifest(data, "m").entries
    bad = bytearray(data)
    bad[-2] = 4
    with pytest.raises(UnsupportedFormatVersionError, match=r"reads versions 1, 2 and 3 only \(upgrade osqueue\)"):
        parse_head(bytes(bad), "m")
    with pytest.raises(UnsupportedFormatVersionError, match=r"reads versions 1, 2 and 3 only \(upgrade osqueue\)"):
        decode_head(bytes(bad), "m")
    with pytest.raises(UnsupportedFormatVersionError, match=r"reads version 1 only \(upgrade osqueue\)"):
        decode_manifest(bytes(bad), "m")  # an RFC v1 reader


def _loc(i: int) -> str:
    # ULID batch names whose time is i (so oldest_batch_ms is checkable).
    from osqueue.format import encode_ulid

    return f"ingest/{encode_ulid(1_000 + i, i)}.batch"


def test_with_epoch_keeps_segments_and_dequeues_in_one_edit() -> None:
    data = (GOLDEN / "head_v2.bin").read_bytes()
    raw, removed = parse_head(data, "k").with_epoch(9, 13, lambda r: [])
    head = decode_head(raw, "k")
    assert (head.epoch, removed, head.low_water, len(head.refs)) == (9, 3, 14, 1)
    raw, removed = parse_head(data, "k").with_epoch(10, None, lambda r: [])
    assert removed == 0 and decode_head(raw, "k").epoch == 10 and raw[:-50] == data[:-38]  # refs and tail kept


def test_segment_names() -> None:
    key = new_key("ingest/manifest", 1_724_233_027_197, random.Random(1))
    assert key.startswith(prefix("ingest/manifest")) and key.endswith(".segment")
    assert ulid_time_ms("ingest/manifest", key) == 1_724_233_027_197
    assert ulid_time_ms("ingest/other", key) is None
    assert ulid_time_ms("ingest/manifest", key.replace(".segment", ".batch")) is None
    assert ulid_time_ms("ingest/manifest", prefix("ingest/manifest") + "x/" + key.rsplit("/", 1)[1]) is None
    assert NO_BATCH_TIME == (1 << 63) - 1


def test_a_tail_with_a_wrong_sequence_is_corrupt_when_walked() -> None:
    from osqueue.format import encode_entry

    good = encode_entry(5, "a", []) + encode_entry(6, "b", [])
    bad = encode_entry(5, "a", []) + encode_entry(7, "b", [])
    import struct

    footer = struct.pack("<IQQH", 2, 7, 0, 1)
    assert parse_head(good + footer, "m").tail_locations() == [(5, "a"), (6, "b")]
    with pytest.raises(CorruptManifestError, match="sequence 7"):
        parse_head(bad + footer, "m").tail_locations()
    assert ManifestEntry  # re-exported names stay importable


def test_tail_locations_from_and_through_walk_the_tail_but_keep_only_what_is_asked() -> None:
    from osqueue.format import encode_entry

    footer = struct.pack("<IQQH", 4, 9, 0, 1)
    raw = b"".join(encode_entry(q, f"l{q}", []) for q in range(5, 9)) + footer
    head = parse_head(raw, "m")
    assert head.tail_locations_from(7) == [(7, "l7"), (8, "l8")]
    assert head.tail_locations_from(0) == head.tail_locations() == [(q, f"l{q}") for q in range(5, 9)]
    assert head.tail_locations_from(9) == []
    assert head.tail_locations_through(6) == [(5, "l5"), (6, "l6")]
    assert head.tail_locations_through(4) == []
    # a corrupt entry before the kept ones is still found
    bad = encode_entry(5, "l5", []) + encode_entry(7, "l6", []) + encode_entry(7, "l7", []) + encode_entry(8, "l8", [])
    with pytest.raises(CorruptManifestError):
        parse_head(bad + footer, "m").tail_locations_from(8)


@pytest.mark.parametrize("bad_key", ["../outside.segment", "/abs.segment", "a//b.segment"])
def test_a_ref_whose_key_is_not_a_valid_object_key_is_corrupt(bad_key: str) -> None:
    ref = SegmentRef(0, 1, 0, 10, NO_BATCH_TIME, bytes(32), bad_key)
    data = encode_head([ref], 0, [], 1, 0)
    with pytest.raises(CorruptManifestError, match="ref 0") as info:
        parse_head(data, "some/manifest")
    assert "some/manifest" in str(info.value)
    with pytest.raises(CorruptManifestError):
        decode_head(data, "some/manifest")
