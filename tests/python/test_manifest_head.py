"""The raw head writers and lazy readers use (osqueue.format.manifest_head, the JVM's ManifestHead): golden
vectors both ways, byte-exact, and the edits (append with sealing, dequeue, epoch) against a model."""

from __future__ import annotations

import json
import pathlib
import random
import struct

import pytest

from osqueue.errors import CorruptManifestError, UnsupportedFormatVersionError
from osqueue.format import (
    HEAD_VERSION,
    ManifestEntry,
    MetadataItem,
    SegmentRef,
    decode_head,
    decode_manifest,
    decode_segment,
    empty_manifest,
    encode_manifest,
)
from osqueue.format.manifest_head import NO_BATCH_TIME, SealedTail, encode_head, parse_head
from osqueue.format.segment_names import new_key, prefix, ulid_time_ms

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
HEADS = json.loads((GOLDEN / "heads.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("vector", HEADS["heads"], ids=[v["name"] for v in HEADS["heads"]])
def test_golden_head_and_segments_re_encode_byte_exact(vector: dict) -> None:
    data = (GOLDEN / vector["file"]).read_bytes()
    head = decode_head(data, "k")
    assert encode_head(head.segments, head.low_water, head.tail, head.next_sequence, head.epoch) == data
    raw = parse_head(data, "k")
    assert (raw.version, raw.first_sequence, raw.depth, raw.segments) == (
        HEAD_VERSION,
        head.low_water,
        len(vector["head"]["queued_sequences"]),
        head.segments,
    )
    assert raw.tail_entries() == head.tail
    assert raw.tail_locations() == [(e.sequence, e.location) for e in head.tail]
    for ref, s in zip(head.segments, vector["head"]["segments"]):
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


def test_a_v1_manifest_parses_without_segments_and_a_v3_is_refused() -> None:
    data = (GOLDEN / "manifest_after_dequeue.bin").read_bytes()
    raw = parse_head(data, "m")
    assert raw.version == 1 and not raw.segments and raw.tail_entries() == decode_manifest(data, "m").entries
    bad = bytearray(data)
    bad[-2] = 3
    with pytest.raises(UnsupportedFormatVersionError):
        parse_head(bytes(bad), "m")


def _loc(i: int) -> str:
    # ULID batch names whose time is i (so oldest_batch_ms is checkable).
    from osqueue.format import encode_ulid

    return f"ingest/{encode_ulid(1_000 + i, i)}.batch"


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_appends_and_dequeues_match_a_model(k: int) -> None:
    """Random appends (groups of 1..3) and dequeues; the head plus its segments always hold exactly the
    model's queue, the tail stays bounded by K (+ one group), and v1 is written whenever no segment is left."""
    rnd = random.Random(k)
    segments: dict[str, bytes] = {}
    raw = empty_manifest(7)
    model: list[tuple[int, str]] = []
    next_seq = 0

    def seal(t: SealedTail) -> SegmentRef:
        key = f"m.segments/{len(segments):026d}.segment"
        segments[key] = t.data
        return t.ref(key)

    for _ in range(300):
        head = parse_head(raw, "m")
        if rnd.random() < 0.6:
            group = [_loc(next_seq + i) for i in range(rnd.randint(1, 3))]
            raw, base = head.appended([(loc, [MetadataItem(0, 5, b"x")]) for loc in group], k, seal)
            assert base == next_seq
            model += [(next_seq + i, loc) for i, loc in enumerate(group)]
            next_seq += len(group)
        elif model:
            through = rnd.choice(model)[0]
            edited = head.dequeued_through(through)
            assert edited is not None
            raw, removed = edited
            assert removed == sum(1 for s, _ in model if s <= through)
            model = [(s, loc) for s, loc in model if s > through]
        else:
            assert head.dequeued_through(next_seq - 1) is None
        decoded = decode_head(raw, "m")
        assert decoded.epoch == 7 and decoded.next_sequence == next_seq
        assert decoded.version == (HEAD_VERSION if decoded.segments else 1)
        assert len(decoded.tail) <= k + 3
        queued = []
        for ref in decoded.segments:
            queued += [
                (e.sequence, e.location)
                for e in decode_segment(segments[ref.key], ref)
                if e.sequence >= decoded.low_water
            ]
            times = [1_000 + e.sequence for e in decode_segment(segments[ref.key], ref)]
            assert ref.oldest_batch_ms == min(times)
        queued += [(e.sequence, e.location) for e in decoded.tail]
        assert queued == model and parse_head(raw, "m").depth == len(model)
        if decoded.segments:
            oldest = parse_head(raw, "m").oldest_referenced_batch_ms()
            assert oldest == 1_000 + decoded.segments[0].first_sequence


def test_with_epoch_keeps_segments_and_dequeues_in_one_edit() -> None:
    data = (GOLDEN / "head_v2.bin").read_bytes()
    raw, removed = parse_head(data, "k").with_epoch(9, through=13)
    head = decode_head(raw, "k")
    assert (head.epoch, removed, head.low_water, len(head.segments)) == (9, 3, 14, 1)
    raw, removed = parse_head(data, "k").with_epoch(10)
    assert removed == 0 and decode_head(raw, "k").epoch == 10 and raw[:-22] == data[:-22]


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
    ref = SegmentRef(0, 1, 10, NO_BATCH_TIME, bytes(32), bad_key)
    data = encode_head([ref], 0, [], 1, 0)
    with pytest.raises(CorruptManifestError, match="segment ref 0") as info:
        parse_head(data, "some/manifest")
    assert "some/manifest" in str(info.value)
    with pytest.raises(CorruptManifestError):
        decode_head(data, "some/manifest")
