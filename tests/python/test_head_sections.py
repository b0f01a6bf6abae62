"""The version 3 head (docs/format.md §2.3, osqueue.format.head_sections; JVM: HeadSections): the golden
vectors of tests/golden/heads_v3.json both ways, byte-exact; every rejection; v1/v2 heads kept byte for
byte when no section is added; sections carried by appends and dequeues."""

from __future__ import annotations

import base64
import json
import pathlib

import pytest
from helpers import v2_as_v3

from osqueue.errors import CorruptManifestError, UnsupportedFormatVersionError
from osqueue.format import decode_manifest
from osqueue.format.head_sections import (
    HEAD_SECTIONS_VERSION,
    NO_SECTIONS,
    HeadSections,
    OpaqueSection,
    Retention,
    Subscription,
    UnnamedReader,
)
from osqueue.format.manifest import MetadataItem
from osqueue.format.manifest_head import decode_head, encode_head, parse_head

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
HEADS = json.loads((GOLDEN / "heads_v3.json").read_text(encoding="utf-8"))
ERRORS = {"CorruptManifest": CorruptManifestError, "UnsupportedFormatVersion": UnsupportedFormatVersionError}


def _sections(js: dict) -> HeadSections:
    unnamed, retention = js["unnamed_reader"], js["retention"]
    return HeadSections(
        tuple(Subscription(**s) for s in js["subscriptions"]),
        UnnamedReader(**unnamed) if unnamed else None,
        Retention(**retention) if retention else None,
        tuple(OpaqueSection(o["section_type"], bytes.fromhex(o["body_hex"])) for o in js["opaque"]),
    )


def _children(ref: object) -> list:
    raise AssertionError(f"no index object to expand: {ref}")


@pytest.mark.parametrize("vector", HEADS["heads"], ids=[v["name"] for v in HEADS["heads"]])
def test_golden_v3_heads_decode_and_re_encode_byte_exact(vector: dict) -> None:
    data = (GOLDEN / vector["file"]).read_bytes()
    want = vector["head"]
    head = decode_head(data, "k")
    assert (head.version, head.next_sequence, head.epoch, head.low_water) == (
        HEAD_SECTIONS_VERSION,
        want["next_sequence"],
        want["epoch"],
        want["low_water"],
    )
    assert head.sections == _sections(want["sections"])
    assert [r.key for r in head.refs] == [r["key"] for r in want["refs"]]
    assert [r.sha256.hex() for r in head.refs] == [r["sha256_hex"] for r in want["refs"]]
    assert [(e.sequence, e.location) for e in head.tail] == [(e["sequence"], e["location"]) for e in want["tail"]]
    assert [m.payload for e in head.tail for m in e.metadata] == [
        base64.b64decode(m["payload_b64"]) for e in want["tail"] for m in e["metadata"]
    ]
    assert head.first_sequence == want["queued_sequences"][0]
    assert encode_head(head.refs, head.low_water, head.tail, head.next_sequence, head.epoch, head.sections) == data
    raw = parse_head(data, "k")
    assert (raw.version, raw.sections, raw.first_sequence, raw.depth) == (
        HEAD_SECTIONS_VERSION,
        head.sections,
        want["low_water"],
        len(want["queued_sequences"]),
    )
    assert raw.tail_entries() == head.tail
    # An edit that changes nothing writes the same bytes (ignorable sections carried byte for byte).
    assert raw.with_sections(raw.sections, _children) == (data, 0)
    # An RFC v1 reader refuses it (footer version 3) rather than misread it.
    with pytest.raises(UnsupportedFormatVersionError):
        decode_manifest(data, "k")


@pytest.mark.parametrize("vector", HEADS["rejected"], ids=[v["name"] for v in HEADS["rejected"]])
def test_rejected_v3_heads_are_refused_with_their_error(vector: dict) -> None:
    data = (GOLDEN / vector["file"]).read_bytes()
    for parse in (decode_head, parse_head):
        with pytest.raises(ERRORS[vector["error"]]) as info:
            parse(data, "some/key")
        assert type(info.value) is ERRORS[vector["error"]] and "some/key" in str(info.value)
    if vector["name"] == "head_v3_unknown_section":
        assert "unknown head section 0x0005" in str(info.value)


def test_every_flipped_byte_of_a_v3_head_is_refused() -> None:
    # The CRC covers the footer and the trailer too: a flipped epoch or low_water is never read as valid.
    data = (GOLDEN / "head_v3_subscriptions.bin").read_bytes()
    for i in range(len(data)):
        for bit in (0x01, 0x80):
            bad = bytearray(data)
            bad[i] ^= bit
            with pytest.raises((CorruptManifestError, UnsupportedFormatVersionError)):
                parse_head(bytes(bad), "k").tail_entries()


@pytest.mark.parametrize(
    "name", ["manifest_two_entries.bin", "manifest_sink_tags.bin", "head_v2.bin", "head_v2_tree.bin"]
)
def test_a_head_without_sections_stays_v1_or_v2_byte_for_byte(name: str) -> None:
    data = (GOLDEN / name).read_bytes()
    raw = parse_head(data, "k")
    assert raw.sections == NO_SECTIONS
    # v1 stays RFC bytes; a v2 head is written as v3 without sections (docs/adr/0006 item 3).
    written = v2_as_v3(data) if data[-2:] == b"\x02\x00" else data
    assert raw.with_sections(NO_SECTIONS, _children) == (written, 0)
    # Adding a subscription makes it v3 with the same entries, refs and footer; dropping it gives the bytes back.
    sub = Subscription("s", 5 << 32, raw.first_sequence, 1, 1)
    v3, removed = raw.with_sections(HeadSections((sub,)), _children)
    assert removed == 0 and v3[-2:] == b"\x03\x00" and v3[-22:-2] == data[-22:-2]
    back = parse_head(v3, "k")
    assert back.version == HEAD_SECTIONS_VERSION and back.sections.subscriptions == (sub,)
    assert back.tail_entries() == raw.tail_entries() and back.refs == raw.refs
    assert back.with_sections(NO_SECTIONS, _children) == (written, 0)


def test_appends_and_reader_moves_carry_the_sections() -> None:
    data = (GOLDEN / "head_v3_ignorable_section.bin").read_bytes()
    raw = parse_head(data, "k")
    meta = [MetadataItem(0, 1, b"x")]
    appended, first = raw.appended([("ingest/x.batch", meta)], 2048, _children, _children)  # type: ignore[arg-type]
    after = parse_head(appended, "k")
    assert first == 17 and after.next_sequence == 18 and after.sections == raw.sections
    assert after.first_sequence == 15 and [q for q, _ in after.tail_locations()] == [15, 16, 17]
    # Both subscriptions past 15 and 16: low_water follows the slowest one, entries below it are removed.
    subs = tuple(Subscription(s.name, s.epoch, 17, s.created_ms, s.last_ack_ms) for s in raw.sections.subscriptions)
    moved, removed = after.with_sections(HeadSections(subs, opaque=raw.sections.opaque), _children)
    cut = decode_head(moved, "k")
    assert removed == 2 and cut.low_water == 17 and [e.sequence for e in cut.tail] == [17]
    assert cut.sections.opaque == raw.sections.opaque
