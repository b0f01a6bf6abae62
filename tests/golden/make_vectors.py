#!/usr/bin/env python3
"""Builds the golden vectors of docs/format.md: tests/golden/*.bin and vectors.json.

The bytes are assembled here by hand with ``struct`` (not with osqueue's codecs), so the
vectors are an independent check of both implementations. Only the zstd vectors use a
library (``zstandard``, level 3).

Usage: python3 tests/golden/make_vectors.py [OUTPUT_DIR]   (default: this file's directory)
"""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import struct
import sys
import zlib

import zstandard

VERSION = 1

# Three realistic batch locations (valid ULIDs, see docs/format.md §4).
LOC_A = "ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch"
LOC_B = "ingest/01J5T4R7NP39QWA8B2C3D4E5F6.batch"
LOC_C = "ingest/01J5T4RBYW52MK0G1H2J3K4M5N.batch"
LOC_D = "ingest/01J5T4RFQ8ZX6Y5W4V3T2S1R0P.batch"
LOC_E = "ingest/01J5T4RKA1B2C3D4E5F6G7H8J9.batch"
T0 = 1767225600000  # 2026-01-01T00:00:00Z in ms


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# -- manifest pieces ----------------------------------------------------------------------------


def footer(entry_count: int, next_sequence: int, epoch: int, version: int = VERSION) -> bytes:
    return struct.pack("<IQQH", entry_count, next_sequence, epoch, version)


def meta(start_index: int, time_ms: int, payload: bytes) -> bytes:
    return struct.pack("<IqI", start_index, time_ms, len(payload)) + payload


def entry(
    sequence: int, location: bytes | str, metas: list[bytes], extension: bytes = b"", entry_len: int | None = None
) -> bytes:
    loc = location.encode("utf-8") if isinstance(location, str) else location
    body = struct.pack("<QH", sequence, len(loc)) + loc + struct.pack("<I", len(metas)) + b"".join(metas) + extension
    return struct.pack("<I", len(body) if entry_len is None else entry_len) + body


def meta_json(start_index: int, time_ms: int, payload: bytes) -> dict:
    return {"start_index": start_index, "ingestion_time_ms": time_ms, "payload_b64": b64(payload)}


def entry_json(sequence: int, location: str, metas: list[dict], extension: bytes = b"") -> dict:
    return {"sequence": sequence, "location": location, "metadata": metas, "extension_b64": b64(extension)}


def sink_tag(writer_id: str, batch_id: int, attempt_id: str) -> bytes:
    """osqueue's entry extension (docs/format.md §2.1): "OSQ1", type 1, writer, batch, attempt."""
    w, a = writer_id.encode("utf-8"), attempt_id.encode("utf-8")
    return b"OSQ1" + struct.pack("<BH", 1, len(w)) + w + struct.pack("<qB", batch_id, len(a)) + a


def tag_json(writer_id: str, batch_id: int, attempt_id: str) -> dict:
    return {"writer_id": writer_id, "batch_id": batch_id, "attempt_id": attempt_id}


def integrity_record(batch: bytes) -> bytes:
    """The type-3 entry-integrity record (docs/format.md §2.1) of a batch, entry_crc32 left 0."""
    return b"OSQ1" + struct.pack("<BHIII", 3, 12, len(batch), zlib.crc32(batch), 0)


def sealed_entry(sequence: int, location: str, metas: list[bytes], extension: bytes) -> bytes:
    """entry() whose extension starts with a type-3 record, its entry_crc32 filled in: the CRC-32
    of the entry from `sequence` to its end with those 4 bytes left out."""
    e = entry(sequence, location, metas, extension)
    crc_at = len(e) - len(extension) + 7 + 8
    crc = zlib.crc32(e[4:crc_at] + e[crc_at + 4 :])
    return e[:crc_at] + struct.pack("<I", crc) + e[crc_at + 4 :]


def integrity_json(batch: bytes, batch_file: str, sealed: bytes, extension: bytes) -> dict:
    crc_at = len(sealed) - len(extension) + 7 + 8
    (entry_crc,) = struct.unpack_from("<I", sealed, crc_at)
    return {
        "byte_length": len(batch),
        "batch_crc32": zlib.crc32(batch),
        "entry_crc32": entry_crc,
        "batch_file": batch_file,
    }


# -- batch pieces -------------------------------------------------------------------------------


def records_block(records: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(r)) + r for r in records)


def batch_footer(compression: int, count: int, version: int = VERSION) -> bytes:
    return struct.pack("<BIH", compression, count, version)


def build() -> tuple[list[dict], dict[str, bytes], dict]:
    vectors: list[dict] = []
    files: dict[str, bytes] = {}

    def valid_manifest(name: str, data: bytes, next_sequence: int, epoch: int, entries: list[dict]) -> None:
        files[name + ".bin"] = data
        vectors.append(
            {
                "name": name,
                "file": name + ".bin",
                "kind": "manifest",
                "manifest": {"next_sequence": next_sequence, "epoch": epoch, "entries": entries},
                "reencode_identical": True,
            }
        )

    def valid_batch(name: str, data: bytes, compression: str, records: list[bytes], identical: bool) -> None:
        files[name + ".bin"] = data
        vectors.append(
            {
                "name": name,
                "file": name + ".bin",
                "kind": "batch",
                "batch": {"compression": compression, "records_b64": [b64(r) for r in records]},
                "reencode_identical": identical,
            }
        )

    def rejected(name: str, kind: str, data: bytes, error: str) -> None:
        files[name + ".bin"] = data
        vectors.append({"name": name, "file": name + ".bin", "kind": kind, "error": error})

    # ---- valid manifests ----
    valid_manifest("manifest_empty", footer(0, 0, 0), 0, 0, [])

    m0 = [meta(0, T0, b"\x01\x02\x00\x00"), meta(2, T0 + 5, b""), meta(3, T0 + 17, b"tenant=a")]
    m1 = [meta(0, T0 + 100, b"x")]
    valid_manifest(
        "manifest_two_entries",
        entry(0, LOC_A, m0) + entry(1, LOC_B, m1) + footer(2, 2, 1),
        2,
        1,
        [
            entry_json(
                0,
                LOC_A,
                [meta_json(0, T0, b"\x01\x02\x00\x00"), meta_json(2, T0 + 5, b""), meta_json(3, T0 + 17, b"tenant=a")],
            ),
            entry_json(1, LOC_B, [meta_json(0, T0 + 100, b"x")]),
        ],
    )

    valid_manifest(
        "manifest_after_dequeue",
        entry(5, LOC_A, [meta(0, -1, b"neg-time")])
        + entry(6, LOC_B, [meta(0, T0, b"")])
        + entry(7, LOC_C, [meta(0, T0, b"")])
        + footer(3, 8, 3),
        8,
        3,
        [
            entry_json(5, LOC_A, [meta_json(0, -1, b"neg-time")]),
            entry_json(6, LOC_B, [meta_json(0, T0, b"")]),
            entry_json(7, LOC_C, [meta_json(0, T0, b"")]),
        ],
    )

    ext = b"\x07future\x00\xff"
    valid_manifest(
        "manifest_extension",
        entry(0, LOC_A, [meta(0, T0, b"p")], extension=ext) + entry(1, LOC_B, [meta(0, T0, b"q")]) + footer(2, 2, 0),
        2,
        0,
        [entry_json(0, LOC_A, [meta_json(0, T0, b"p")], ext), entry_json(1, LOC_B, [meta_json(0, T0, b"q")])],
    )

    valid_manifest(
        "manifest_no_metadata",
        entry(41, LOC_C, []) + footer(1, 42, 7),
        42,
        7,
        [entry_json(41, LOC_C, [])],
    )

    # A sink epoch appended twice (docs/adr/0002): writer "wrïter-1" batch B attempt A1 (two
    # entries), an untagged entry, the replayed copy (attempt A2), then batch B + 1. A reader
    # delivers every entry but the A2 copy (sequence 13).
    writer, batch = "wrïter-1", 0x0102030405  # multi-byte UTF-8; a batch id over 2^32 (byte order)
    a1, a2, a3 = "01J5T4R3KXBMZ7QV9N2WG8YDH1", "01J5T4R3KXBMZ7QV9N2WG8YDH2", "01J5T4R3KXBMZ7QV9N2WG8YDH3"
    tagged = [(LOC_A, (writer, batch, a1)), (LOC_B, (writer, batch, a1)), (LOC_C, None),
              (LOC_D, (writer, batch, a2)), (LOC_E, (writer, batch + 1, a3))]  # fmt: skip
    sink_entries, sink_json = b"", []
    for i, (loc, tag) in enumerate(tagged):
        ext = sink_tag(*tag) if tag else b""
        sink_entries += entry(10 + i, loc, [meta(0, T0 + i, b"")], extension=ext)
        j = entry_json(10 + i, loc, [meta_json(0, T0 + i, b"")], ext)
        sink_json.append(j | {"tag": tag_json(*tag)} if tag else j)
    valid_manifest("manifest_sink_tags", sink_entries + footer(5, 15, 4), 15, 4, sink_json)

    utf8_loc = "ingest/données-é☃.batch"
    valid_manifest(
        "manifest_utf8_location",
        entry(0, utf8_loc, [meta(0, T0, b"")]) + footer(1, 1, 2),
        1,
        2,
        [entry_json(0, utf8_loc, [meta_json(0, T0, b"")])],
    )

    # ---- rejected manifests ----
    good = entry(0, LOC_A, [meta(0, T0, b"abc")])
    rejected("manifest_zero_bytes", "manifest", b"", "CorruptManifest")
    rejected("manifest_short", "manifest", footer(0, 0, 0)[1:], "CorruptManifest")
    rejected("manifest_bad_version", "manifest", footer(0, 0, 0, version=2), "UnsupportedFormatVersion")
    rejected("manifest_entries_past_end", "manifest", good + footer(2, 2, 0), "CorruptManifest")
    rejected("manifest_huge_entry_count", "manifest", footer(0xFFFFFFFF, 5, 0), "CorruptManifest")
    rejected(
        "manifest_entry_len_past_end",
        "manifest",
        entry(0, LOC_A, [meta(0, T0, b"abc")], entry_len=len(good) - 4 + 10) + footer(1, 1, 0),
        "CorruptManifest",
    )
    loc_bytes = LOC_A.encode()
    rejected(
        "manifest_entry_len_too_small",
        "manifest",
        # entry_len = 14 + location_len - 1: the location (and metadata_count) overrun the entry.
        entry(0, LOC_A, [], entry_len=14 + len(loc_bytes) - 1)[:-1] + footer(1, 1, 0),
        "CorruptManifest",
    )
    # Entry 0's metadata payload claims 40 bytes: it would run into entry 1 (still inside the
    # entries region), but an item must end inside its own entry.
    over = (
        struct.pack("<QH", 0, len(loc_bytes))
        + loc_bytes
        + struct.pack("<I", 1)
        + struct.pack("<IqI", 0, T0, 40)
        + b"abc"
    )
    rejected(
        "manifest_metadata_past_entry_end",
        "manifest",
        struct.pack("<I", len(over)) + over + entry(1, LOC_B, [meta(0, T0, b"x" * 40)]) + footer(2, 2, 0),
        "CorruptManifest",
    )
    rejected(
        "manifest_invalid_utf8_location",
        "manifest",
        entry(0, b"ingest/\xff\xfe.batch", []) + footer(1, 1, 0),
        "CorruptManifest",
    )
    rejected("manifest_trailing_bytes", "manifest", good + b"\x00\x00\x00" + footer(1, 1, 0), "CorruptManifest")
    rejected(
        "manifest_non_contiguous",
        "manifest",
        entry(0, LOC_A, []) + entry(2, LOC_B, []) + footer(2, 3, 0),
        "CorruptManifest",
    )
    rejected(
        "manifest_last_seq_not_below_next",
        "manifest",
        entry(0, LOC_A, []) + entry(1, LOC_B, []) + footer(2, 1, 0),
        "CorruptManifest",
    )
    rejected(
        "manifest_sequence_2pow63",
        "manifest",
        entry(1 << 63, LOC_A, []) + footer(1, (1 << 63) + 1, 0),
        "CorruptManifest",
    )

    # ---- valid batches ----
    recs = [b"hello", b"", b"world!", b"\x00\xff\x00"]
    valid_batch("batch_none", records_block(recs) + batch_footer(0, len(recs)), "none", recs, True)
    zrecs = [b"abcabcabcabcabcabcabcabcabc" * 4, b"", b"zstd"]
    zblock = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(records_block(zrecs))
    valid_batch("batch_zstd", zblock + batch_footer(1, len(zrecs)), "zstd", zrecs, False)
    # osqueue writes zstd frames with the content checksum (docs/adr/0006); a flipped checksum byte
    # (the content intact) is caught by every zstd decoder.
    zsum = zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=True).compress(
        records_block(zrecs)
    )
    batch_zstd_checksum = zsum + batch_footer(1, len(zrecs))
    valid_batch("batch_zstd_checksum", batch_zstd_checksum, "zstd", zrecs, False)
    flipped = zsum[:-1] + bytes([zsum[-1] ^ 0x01])
    rejected("batch_zstd_checksum_mismatch", "batch", flipped + batch_footer(1, len(zrecs)), "CorruptBatch")
    batch_none = records_block(recs) + batch_footer(0, len(recs))

    # Entry-integrity records (docs/format.md §2.1): a type-3 record alone, one before a sink tag,
    # one before an unknown length-prefixed record (type 9, skipped) and a sink tag, and a type-3
    # record of the wrong length (ignored: an unverified entry).
    tag = sink_tag("w", 7, "01J5T4R3KXBMZ7QV9N2WG8YDH9")
    rows = [
        (LOC_A, batch_none, "batch_none.bin", integrity_record(batch_none), None),
        (LOC_B, batch_zstd_checksum, "batch_zstd_checksum.bin", integrity_record(batch_zstd_checksum) + tag, ("w", 7)),
        (LOC_C, batch_none, "batch_none.bin", integrity_record(batch_none) + b"OSQ1\x09\x03\x00xyz" + tag, ("w", 7)),
    ]
    integrity_entries, integrity_entries_json = b"", []
    for i, (loc, batch, batch_file, ext, has_tag) in enumerate(rows):
        sealed = sealed_entry(20 + i, loc, [meta(0, T0 + i, b"m")], ext)
        integrity_entries += sealed
        j = entry_json(20 + i, loc, [meta_json(0, T0 + i, b"m")], sealed[len(sealed) - len(ext) :])
        j["integrity"] = integrity_json(batch, batch_file, sealed, ext)
        if has_tag:
            j["tag"] = tag_json("w", 7, "01J5T4R3KXBMZ7QV9N2WG8YDH9")
        integrity_entries_json.append(j)
    wrong_len = b"OSQ1" + struct.pack("<BH", 3, 8) + struct.pack("<II", len(batch_none), zlib.crc32(batch_none))
    integrity_entries += entry(23, LOC_D, [meta(0, T0, b"")], wrong_len)
    integrity_entries_json.append(entry_json(23, LOC_D, [meta_json(0, T0, b"")], wrong_len) | {"integrity": None})
    valid_manifest("manifest_integrity", integrity_entries + footer(4, 24, 5), 24, 5, integrity_entries_json)

    valid_batch("batch_single_empty_record", records_block([b""]) + batch_footer(0, 1), "none", [b""], True)
    # Readers accept several concatenated frames, and frames without a content size.
    part1, part2 = records_block(zrecs[:1]), records_block(zrecs[1:])
    c = zstandard.ZstdCompressor(level=3, write_content_size=True)
    valid_batch(
        "batch_zstd_two_frames",
        c.compress(part1) + c.compress(part2) + batch_footer(1, len(zrecs)),
        "zstd",
        zrecs,
        False,
    )
    nosize = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(records_block(zrecs))
    valid_batch("batch_zstd_no_content_size", nosize + batch_footer(1, len(zrecs)), "zstd", zrecs, False)

    # ---- rejected batches ----
    two = records_block([b"ab", b"c"])
    rejected("batch_short", "batch", batch_footer(0, 0)[:6], "CorruptBatch")
    rejected("batch_bad_version", "batch", two + batch_footer(0, 2, version=2), "UnsupportedFormatVersion")
    rejected("batch_unknown_compression_02", "batch", two + batch_footer(2, 2), "CorruptBatch")
    rejected("batch_unknown_compression_ff", "batch", two + batch_footer(0xFF, 2), "CorruptBatch")
    rejected("batch_record_past_end", "batch", struct.pack("<I", 10) + b"abc" + batch_footer(0, 1), "CorruptBatch")
    rejected("batch_fewer_records", "batch", two + batch_footer(0, 3), "CorruptBatch")
    rejected("batch_huge_count", "batch", batch_footer(0, 0xFFFFFFFF), "CorruptBatch")
    rejected("batch_trailing_bytes", "batch", two + b"\x01" + batch_footer(0, 2), "CorruptBatch")
    rejected("batch_corrupt_zstd", "batch", b"\x28\xb5\x2f\xfd garbage, not zstd" + batch_footer(1, 1), "CorruptBatch")
    rejected("batch_zstd_truncated", "batch", zblock[:-3] + batch_footer(1, len(zrecs)), "CorruptBatch")

    # Dequeue receipts (format.md §5.1), not a vector kind of their own: RECEIPTS below is the truth.
    files["receipts_v1.bin"] = (
        b"OSQR"
        + struct.pack("<BQI", 1, RECEIPTS["first"], len(RECEIPTS["locations"]))
        + b"".join(struct.pack("<H", len(loc.encode())) + loc.encode() for loc in RECEIPTS["locations"])
    )
    files["receipts_v2.bin"] = (
        b"OSQR"
        + struct.pack("<BQQI", 2, RECEIPTS_INCARNATION, RECEIPTS["first"], len(RECEIPTS["locations"]))
        + b"".join(struct.pack("<H", len(loc.encode())) + loc.encode() for loc in RECEIPTS["locations"])
    )
    heads = build_heads(valid_manifest, files)
    heads_v3 = build_heads_v3(files)
    return vectors, files, heads, heads_v3


# -- segmented heads (format.md §2.2) -------------------------------------------------------------

HEAD_VERSION = 2
LOC_F = "ingest/01J5T4RTZ9Y8X7W6V5T4S3R2Q1.batch"
LOC_G = "ingest/01J5T4RXK2M3N4P5Q6R7S8T9VW.batch"
SEG_A_KEY = "ingest/manifest.segments/01J5T4S0000000000000000000.segment"
SEG_B_KEY = "ingest/manifest.segments/01J5T4S1000000000000000000.segment"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid_ms(location: str) -> int:
    """The time of a `<ULID>.batch` name: its first 10 Crockford characters, big-endian base 32."""
    name = location.rsplit("/", 1)[-1]
    ms = 0
    for c in name[:10]:
        ms = ms * 32 + CROCKFORD.index(c)
    return ms


def segment_ref(first: int, count: int, data: bytes, oldest_ms: int, key: str, level: int = 0) -> bytes:
    """A ref (format.md §2.2, 63 fixed bytes and the key): first u64 | entry_count u64 | level u8 |
    byte_length u32 | oldest_batch_ms i64 | sha256 | key_len u16 | key."""
    k = key.encode("utf-8")
    return (
        struct.pack("<QQBIq", first, count, level, len(data), oldest_ms)
        + hashlib.sha256(data).digest()
        + struct.pack("<H", len(k))
        + k
    )


def index_footer(ref_count: int, level: int, version: int = HEAD_VERSION) -> bytes:
    return struct.pack("<IBH", ref_count, level, version)


def head_tail_end(refs_len: int, count: int, low_water: int, tail_count: int, next_sequence: int, epoch: int) -> bytes:
    return struct.pack("<IIQ", refs_len, count, low_water) + footer(tail_count, next_sequence, epoch, HEAD_VERSION)


def batch_loc(i: int) -> str:
    """A valid ULID batch name, distinct per i (its time differs too)."""
    return f"ingest/01J5T4S{i:02d}ABCDEFGHJKMNPQRST.batch"


def object_key(i: int, suffix: str) -> str:
    return f"ingest/manifest.segments/01J5T4S{i}000000000000000000.{suffix}"


def build_heads(valid_manifest, files: dict[str, bytes]) -> dict:
    """Segmented heads: one listing two segments (the first partially dequeued: low_water 11), one
    listing an index object of level 2 (two of level 1 below it, four segments below those) between
    two segments; every segment (plain v1 manifests, also in vectors.json) and index object; heads
    and index objects that break one invariant each."""
    tag = sink_tag("w", 3, "01J5T4R3KXBMZ7QV9N2WG8YDH1")
    seg_a_entries = [
        (10, LOC_A, [meta(0, T0, b"a")], b""),
        (11, LOC_B, [meta(0, T0 + 1, b"")], tag),
        (12, LOC_C, [], b""),
    ]
    seg_b_entries = [(13, LOC_D, [meta(0, T0 + 3, b"d")], b""), (14, LOC_E, [meta(0, T0 + 4, b"e")], b"")]
    tail_entries = [(15, LOC_F, [meta(0, T0 + 5, b"f")], b""), (16, LOC_G, [meta(0, T0 + 6, b"g")], b"")]

    def body(es):
        return b"".join(entry(q, loc, m, ext) for q, loc, m, ext in es)

    def js(es):
        out = []
        for q, loc, m, ext in es:
            e = entry_json(q, loc, [meta_json(*struct.unpack_from("<Iq", mm), mm[16:]) for mm in m], ext)
            if ext == tag:
                e["tag"] = tag_json("w", 3, "01J5T4R3KXBMZ7QV9N2WG8YDH1")
            out.append(e)
        return out

    def oldest(es):
        return min(ulid_ms(loc) for _, loc, _, _ in es)

    seg_a = body(seg_a_entries) + footer(3, 13, 0)
    seg_b = body(seg_b_entries) + footer(2, 15, 0)
    valid_manifest("segment_a", seg_a, 13, 0, js(seg_a_entries))
    valid_manifest("segment_b", seg_b, 15, 0, js(seg_b_entries))
    oldest_a, oldest_b = oldest(seg_a_entries), oldest(seg_b_entries)
    ref_a = segment_ref(10, 3, seg_a, oldest_a, SEG_A_KEY)
    ref_b = segment_ref(13, 2, seg_b, oldest_b, SEG_B_KEY)
    tail = body(tail_entries)
    refs = ref_a + ref_b
    files["head_v2.bin"] = refs + tail + head_tail_end(len(refs), 2, 11, 2, 17, 5)

    def ref_json(first, count, data, oldest, key, file, level=0):
        return {
            "first_sequence": first,
            "entry_count": count,
            "level": level,
            "byte_length": len(data),
            "oldest_batch_ms": oldest,
            "sha256_hex": hashlib.sha256(data).hexdigest(),
            "key": key,
            "file": file,
        }

    # -- the tree: segments c..f (15..22), indexes bc, de (level 1) and top (level 2) --------------
    # The shape a producer folding with F = 2 leaves: seal c -> fold b, c; seal d, e -> fold d, e,
    # then the two level-1 refs into level 2; seal f -> [a, top, f] (f and top differ in level).
    more = {
        name: [(q, batch_loc(q), [meta(0, T0 + q, name.encode())], b"") for q in range(first, first + 2)]
        for name, first in (("c", 15), ("d", 17), ("e", 19), ("f", 21))
    }
    segs = {"a": (seg_a_entries, seg_a), "b": (seg_b_entries, seg_b)}
    for name, es in more.items():
        data = body(es) + footer(2, es[-1][0] + 1, 0)
        valid_manifest(f"segment_{name}", data, es[-1][0] + 1, 0, js(es))
        segs[name] = (es, data)
    keys = {"a": SEG_A_KEY, "b": SEG_B_KEY, "c": object_key(2, "segment"), "d": object_key(3, "segment"),
            "e": object_key(4, "segment"), "f": object_key(5, "segment")}  # fmt: skip
    leaf = {}  # name -> (first, count, data, oldest, key, file, level)
    for name, (es, data) in segs.items():
        leaf[name] = (es[0][0], len(es), data, oldest(es), keys[name], f"segment_{name}.bin", 0)

    def ref_bytes(r):
        first, count, data, old, key, _, level = r
        return segment_ref(first, count, data, old, key, level)

    def index_of(name, children, key, level):
        data = b"".join(ref_bytes(c) for c in children) + index_footer(len(children), level)
        files[f"{name}.bin"] = data
        first, count = children[0][0], sum(c[1] for c in children)
        return (first, count, data, min(c[3] for c in children), key, f"{name}.bin", level)

    idx_bc = index_of("index_bc", [leaf["b"], leaf["c"]], object_key(6, "index"), 1)
    idx_de = index_of("index_de", [leaf["d"], leaf["e"]], object_key(7, "index"), 1)
    idx_top = index_of("index_top", [idx_bc, idx_de], object_key(8, "index"), 2)
    tree_refs = [leaf["a"], idx_top, leaf["f"]]
    tree_tail_entries = [(23, LOC_F, [meta(0, T0 + 23, b"t")], b""), (24, LOC_G, [], b"")]
    refs_region = b"".join(ref_bytes(r) for r in tree_refs)
    files["head_v2_tree.bin"] = refs_region + body(tree_tail_entries) + head_tail_end(len(refs_region), 3, 11, 2, 25, 6)
    objects = {r[4]: r[5] for r in [*leaf.values(), idx_bc, idx_de, idx_top]}
    indexes = [
        {"name": name, "file": r[5], "ref": ref_json(*r), "refs": [ref_json(*c) for c in children]}
        for name, r, children in (
            ("index_bc", idx_bc, [leaf["b"], leaf["c"]]),
            ("index_de", idx_de, [leaf["d"], leaf["e"]]),
            ("index_top", idx_top, [idx_bc, idx_de]),
        )
    ]

    rejected = {
        # no segment listed: a head without segments is version 1
        "head_no_segments": tail + head_tail_end(0, 0, 15, 2, 17, 5),
        # low_water past the first segment
        "head_low_water_outside_first_segment": refs + tail + head_tail_end(len(refs), 2, 13, 2, 17, 5),
        # the tail does not start where the last segment ends (segment b missing)
        "head_tail_not_after_segments": ref_a + tail + head_tail_end(len(ref_a), 1, 11, 2, 17, 5),
        # segment b listed from 14: not contiguous
        "head_segments_not_contiguous": ref_a
        + segment_ref(14, 2, seg_b, oldest_b, SEG_B_KEY)
        + tail
        + head_tail_end(len(refs), 2, 11, 2, 17, 5),
        # segments_len past the head
        "head_segments_len_past_end": refs + tail + head_tail_end(0xFFFFFF, 2, 11, 2, 17, 5),
        # a version 2 footer with no room for the trailer
        "head_short": b"\x00" * 4 + footer(0, 0, 0, HEAD_VERSION),
        # the first ref is an index object (13..16), not a segment
        "head_first_ref_is_index": ref_bytes(idx_bc)
        + body(more["d"])
        + head_tail_end(len(ref_bytes(idx_bc)), 1, 13, 2, 19, 5),
        # segment b listed with level 33
        "head_level_above_32": ref_a
        + segment_ref(13, 2, seg_b, oldest_b, SEG_B_KEY, 33)
        + tail
        + head_tail_end(len(refs), 2, 11, 2, 17, 5),
    }
    for name, data in rejected.items():
        files[name + ".bin"] = data

    # Index objects that break one rule each, with the ref a reader would hold (only the broken rule
    # differs from it: length and SHA-256 match, except in index_sha_mismatch).
    bc = files["index_bc.bin"]
    first_bc, count_bc, _, oldest_bc, key_bc, _, _ = idx_bc
    refs_bc = ref_bytes(leaf["b"]) + ref_bytes(leaf["c"])
    flipped = bytearray(bc)
    flipped[0] ^= 1  # segment b's first_sequence: the bytes no longer match the ref's SHA-256
    bad_indexes = {
        # level 2 listing level-0 refs
        "index_child_level_wrong": (refs_bc + index_footer(2, 2), first_bc, count_bc, oldest_bc, 2),
        # the ref says 5 entries, the children cover 4
        "index_counts_not_summing": (bc, first_bc, 5, oldest_bc, 1),
        # one flipped byte: length right, SHA-256 wrong (the ref is index_bc's)
        "index_sha_mismatch": (bytes(flipped), first_bc, count_bc, oldest_bc, 1, bc),
        # a single ref
        "index_one_ref": (ref_bytes(leaf["b"]) + index_footer(1, 1), 13, 2, leaf["b"][3], 1),
        # segments b (13..14) and d (17..18): not contiguous
        "index_children_not_contiguous": (
            ref_bytes(leaf["b"]) + ref_bytes(leaf["d"]) + index_footer(2, 1),
            13,
            4,
            min(leaf["b"][3], leaf["d"][3]),
            1,
        ),
        # the children start at 13, the ref at 12
        "index_not_from_ref_first": (bc, 12, count_bc, oldest_bc, 1),
        # the ref's oldest batch time is not the children's smallest
        "index_oldest_mismatch": (bc, first_bc, count_bc, oldest_bc - 1, 1),
        # a level-1 index read for a level-2 ref
        "index_footer_level_not_refs": (bc, first_bc, count_bc, oldest_bc, 2),
        # footer version 3
        "index_bad_version": (refs_bc + index_footer(2, 1, version=3), first_bc, count_bc, oldest_bc, 1),
        # 3 bytes: shorter than the footer
        "index_short": (b"\x02\x00\x00", first_bc, count_bc, oldest_bc, 1),
    }
    rejected_indexes = []
    for name, (data, first, count, old, level, *hashed) in bad_indexes.items():
        files[name + ".bin"] = data
        ref = ref_json(first, count, hashed[0] if hashed else data, old, key_bc, name + ".bin", level)
        rejected_indexes.append({"name": name, "file": name + ".bin", "ref": ref, "error": "CorruptManifest"})

    return {
        "heads": [
            {
                "name": "head_v2",
                "file": "head_v2.bin",
                "v1_error": "UnsupportedFormatVersion",
                "head": {
                    "next_sequence": 17,
                    "epoch": 5,
                    "low_water": 11,
                    "refs": [
                        ref_json(10, 3, seg_a, oldest_a, SEG_A_KEY, "segment_a.bin"),
                        ref_json(13, 2, seg_b, oldest_b, SEG_B_KEY, "segment_b.bin"),
                    ],
                    "tail": js(tail_entries),
                    # every queued entry in order: segment a from low_water, segment b, the tail
                    "queued_sequences": list(range(11, 17)),
                },
                "objects": {SEG_A_KEY: "segment_a.bin", SEG_B_KEY: "segment_b.bin"},
            },
            {
                "name": "head_v2_tree",
                "file": "head_v2_tree.bin",
                "v1_error": "UnsupportedFormatVersion",
                "head": {
                    "next_sequence": 25,
                    "epoch": 6,
                    "low_water": 11,
                    "refs": [ref_json(*r) for r in tree_refs],
                    "tail": js(tree_tail_entries),
                    # segment a from low_water, then b, c, d, e through the indexes, f, the tail
                    "queued_sequences": list(range(11, 25)),
                },
                "objects": objects,
            },
        ],
        "indexes": indexes,
        "rejected": [{"name": n, "file": n + ".bin", "error": "CorruptManifest"} for n in rejected],
        "rejected_indexes": rejected_indexes,
    }


# -- version 3 heads: sections (format.md §2.3, ADR 0005) -----------------------------------------

V3 = 3
SUBSCRIPTIONS, UNNAMED_READER, RETENTION, WRITERS, IGNORABLE = 1, 2, 3, 4, 0x8000


def section(section_type: int, body: bytes) -> bytes:
    """A section: type u16 | body_len u32 | body."""
    return struct.pack("<HI", section_type, len(body)) + body


def subscription_record(name: str | bytes, epoch: int, next_: int, created_ms: int, last_ack_ms: int) -> bytes:
    """name_len u8 | name | epoch u64 | next u64 | created_ms i64 | last_ack_ms i64 (33 fixed bytes)."""
    n = name.encode("utf-8") if isinstance(name, str) else name
    return struct.pack("<B", len(n)) + n + struct.pack("<QQqq", epoch, next_, created_ms, last_ack_ms)


def subscriptions_body(records: list[bytes]) -> bytes:
    return struct.pack("<I", len(records)) + b"".join(records)


def retention_body(max_age_ms: int, max_bytes: int, max_entries: int, policy: int, queued_bytes: int) -> bytes:
    """max_age_ms i64 | max_bytes u64 | max_entries u64 | policy u8 | queued_bytes u64 (33 bytes)."""
    return struct.pack("<qQQBQ", max_age_ms, max_bytes, max_entries, policy, queued_bytes)


def head_v3(
    sections: list[bytes],
    refs: bytes,
    ref_count: int,
    tail: bytes,
    tail_count: int,
    low_water: int,
    next_sequence: int,
    epoch: int,
    crc_xor: int = 0,
) -> bytes:
    """sections | refs | tail | trailer (sections_len u32, section_count u32, segments_len u32,
    segment_count u32, low_water u64, head_crc32 u32) | footer (version 3). The CRC (zlib's CRC-32)
    covers every byte of the head but its own 4."""
    secs = b"".join(sections)
    before = secs + refs + tail + struct.pack("<IIIIQ", len(secs), len(sections), len(refs), ref_count, low_water)
    foot = footer(tail_count, next_sequence, epoch, V3)
    crc = zlib.crc32(before + foot) ^ crc_xor
    return before + struct.pack("<I", crc) + foot


def flip(data: bytes, at: int) -> bytes:
    """``data`` with the lowest bit of the byte at ``at`` flipped."""
    out = bytearray(data)
    out[at] ^= 1
    return bytes(out)


def build_heads_v3(files: dict[str, bytes]) -> dict:
    """Version 3 heads (docs/format.md §2.3): valid ones with their decoded sections, and heads that
    break one rule each (every one with a correct CRC but head_v3_bad_crc, so the rule is what fails)."""
    tail_entries = [(15, LOC_F, [meta(0, T0 + 5, b"f")]), (16, LOC_G, [meta(0, T0 + 6, b"g")])]
    tail = b"".join(entry(q, loc, m) for q, loc, m in tail_entries)
    tail_js = [
        entry_json(q, loc, [meta_json(*struct.unpack_from("<Iq", mm), mm[16:]) for mm in m])
        for q, loc, m in tail_entries
    ]
    seg_a, seg_b = files["segment_a.bin"], files["segment_b.bin"]
    oldest_a = min(ulid_ms(x) for x in (LOC_A, LOC_B, LOC_C))
    oldest_b = min(ulid_ms(x) for x in (LOC_D, LOC_E))
    refs = segment_ref(10, 3, seg_a, oldest_a, SEG_A_KEY) + segment_ref(13, 2, seg_b, oldest_b, SEG_B_KEY)

    def ref_json(first, count, data, oldest, key, file):
        return {
            "first_sequence": first,
            "entry_count": count,
            "level": 0,
            "byte_length": len(data),
            "oldest_batch_ms": oldest,
            "sha256_hex": hashlib.sha256(data).hexdigest(),
            "key": key,
            "file": file,
        }

    refs_js = [
        ref_json(10, 3, seg_a, oldest_a, SEG_A_KEY, "segment_a.bin"),
        ref_json(13, 2, seg_b, oldest_b, SEG_B_KEY, "segment_b.bin"),
    ]

    def sub(name, incarnation, takeovers, next_, created, last_ack):
        epoch = (incarnation << 32) | takeovers
        js = {"name": name, "epoch": epoch, "next": next_, "created_ms": created, "last_ack_ms": last_ack}
        return subscription_record(name, epoch, next_, created, last_ack), js

    analytics = sub("analytics", 7, 2, 16, T0, T0 + 500)
    billing = sub("billing", 0x7FFFFFFF, 0, 15, T0 + 1, T0 + 1)
    subs = section(SUBSCRIPTIONS, subscriptions_body([analytics[0], billing[0]]))
    subs_js = [analytics[1], billing[1]]
    unnamed = section(UNNAMED_READER, struct.pack("<Qq", 15, T0 + 1000))
    unnamed_js = {"next": 15, "last_ack_ms": T0 + 1000}
    retention = section(RETENTION, retention_body(7 * 86_400_000, 50 << 30, 1_000_000, 0, 4096))
    retention_js = {
        "max_age_ms": 7 * 86_400_000,
        "max_bytes": 50 << 30,
        "max_entries": 1_000_000,
        "policy": 0,
        "queued_bytes": 4096,
    }
    drop_retention = section(RETENTION, retention_body(0, 0, 500, 1, 0))
    drop_retention_js = {"max_age_ms": 0, "max_bytes": 0, "max_entries": 500, "policy": 1, "queued_bytes": 0}
    # the segmented head's readers: one at low_water inside segment a, one in segment b
    seg_sub = sub("orders-v2.eu_west", 3, 1, 11, T0 + 2, T0 + 3)
    seg_sub2 = sub("z", 4, 0, 14, T0 + 4, T0 + 4)
    seg_subs = section(SUBSCRIPTIONS, subscriptions_body([seg_sub[0], seg_sub2[0]]))
    ignorable_body = b"carried byte for byte\x00\xff"

    def sections_js(subscriptions=(), unnamed_reader=None, retention_=None, opaque=()):
        return {
            "subscriptions": list(subscriptions),
            "unnamed_reader": unnamed_reader,
            "retention": retention_,
            "opaque": [{"section_type": t, "body_hex": b.hex()} for t, b in opaque],
        }

    valid = {
        # two subscriptions, the unnamed reader and retention; no segment: low_water is the tail's start
        "head_v3_subscriptions": (
            head_v3([subs, unnamed, retention], b"", 0, tail, 2, 15, 17, 5),
            sections_js(subs_js, unnamed_js, retention_js),
            [],
            15,
            5,
        ),
        # subscriptions and retention over segments a, b (low_water 11, as head_v2) and the tail
        "head_v3_segmented": (
            head_v3([seg_subs, drop_retention], refs, 2, tail, 2, 11, 17, 5),
            sections_js([seg_sub[1], seg_sub2[1]], None, drop_retention_js),
            refs_js,
            11,
            5,
        ),
        # retention only: no reader record, so only retention moves low_water
        "head_v3_retention_only": (
            head_v3([retention], b"", 0, tail, 2, 15, 17, 1 << 32),
            sections_js((), None, retention_js),
            [],
            15,
            1 << 32,
        ),
        # an ignorable section a reader does not know (0x8001): read past, carried by writers
        "head_v3_ignorable_section": (
            head_v3([subs, section(IGNORABLE | 1, ignorable_body)], b"", 0, tail, 2, 15, 17, 5),
            sections_js(subs_js, None, None, [(IGNORABLE | 1, ignorable_body)]),
            [],
            15,
            5,
        ),
        # head_v2 as writers write it since docs/adr/0006 item 3: version 3, no section, head_crc32
        "head_v3_from_v2": (head_v3([], refs, 2, tail, 2, 11, 17, 5), sections_js(), refs_js, 11, 5),
    }
    heads = []
    for name, (data, secs, refs_list, low_water, epoch) in valid.items():
        files[name + ".bin"] = data
        heads.append(
            {
                "name": name,
                "file": name + ".bin",
                "v1_error": "UnsupportedFormatVersion",
                "head": {
                    "next_sequence": 17,
                    "epoch": epoch,
                    "low_water": low_water,
                    "refs": refs_list,
                    "tail": tail_js,
                    "sections": secs,
                    "queued_sequences": list(range(low_water, 17)),
                },
                "objects": {r["key"]: r["file"] for r in refs_list},
            }
        )

    bad_name = subscription_record("a/b", 1 << 32, 15, T0, T0)
    rejected = {
        # head_v3_subscriptions with the CRC's lowest bit flipped
        "head_v3_bad_crc": (
            head_v3([subs, unnamed, retention], b"", 0, tail, 2, 15, 17, 5, crc_xor=1),
            "CorruptManifest",
        ),
        # type 5: unknown and not ignorable
        "head_v3_unknown_section": (
            head_v3([subs, section(5, b"?")], b"", 0, tail, 2, 15, 17, 5),
            "UnsupportedFormatVersion",
        ),
        # retention (3) before subscriptions (1)
        "head_v3_sections_unsorted": (head_v3([retention, subs], b"", 0, tail, 2, 15, 17, 5), "CorruptManifest"),
        # two retention sections
        "head_v3_duplicate_section": (
            head_v3([subs, retention, retention], b"", 0, tail, 2, 15, 17, 5),
            "CorruptManifest",
        ),
        # a '/' in a name
        "head_v3_name_not_allowed": (
            head_v3([section(SUBSCRIPTIONS, subscriptions_body([bad_name]))], b"", 0, tail, 2, 15, 17, 5),
            "CorruptManifest",
        ),
        # billing before analytics
        "head_v3_names_unsorted": (
            head_v3(
                [section(SUBSCRIPTIONS, subscriptions_body([billing[0], analytics[0]]))], b"", 0, tail, 2, 15, 17, 5
            ),
            "CorruptManifest",
        ),
        # a subscription's next (18) past next_sequence (17)
        "head_v3_next_past_next_sequence": (
            head_v3(
                [section(SUBSCRIPTIONS, subscriptions_body([sub("late", 1, 0, 18, T0, T0)[0]]))],
                b"",
                0,
                tail,
                2,
                15,
                17,
                5,
            ),
            "CorruptManifest",
        ),
        # no section and no ref: such a head is written as version 1
        "head_v3_no_sections_no_refs": (head_v3([], b"", 0, tail, 2, 15, 17, 5), "CorruptManifest"),
        # no segment, but low_water 14 is not the tail's first sequence (15)
        "head_v3_low_water_not_tail_start": (head_v3([subs], b"", 0, tail, 2, 14, 17, 5), "CorruptManifest"),
        # head_v3_from_v2 with one byte flipped where no other invariant looks (ADR 0006 item 3): the
        # footer's epoch, and the first ref's oldest_batch_ms (GC's rule 3); only head_crc32 catches them
        "head_v3_from_v2_epoch_flipped": (flip(head_v3([], refs, 2, tail, 2, 11, 17, 5), -10), "CorruptManifest"),
        "head_v3_from_v2_oldest_flipped": (flip(head_v3([], refs, 2, tail, 2, 11, 17, 5), 21), "CorruptManifest"),
    }
    for name, (data, _) in rejected.items():
        files[name + ".bin"] = data
    return {
        "heads": heads,
        "rejected": [{"name": n, "file": n + ".bin", "error": err} for n, (_, err) in rejected.items()],
    }


# The content of receipts_v1.bin; receipts_v2.bin is the same of incarnation RECEIPTS_INCARNATION.
RECEIPTS = {"first": 7, "locations": ["ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch", "ingest/ü.batch"]}
RECEIPTS_INCARNATION = 42


def spool_record(kind: int, body: bytes) -> bytes:
    """A producer spool log record (docs/format.md §9): "OSQS" | body_len u32 | type u8 | body | crc32 u32."""
    head = b"OSQS" + struct.pack(">IB", len(body), kind) + body
    return head + struct.pack(">I", zlib.crc32(head))


SPOOL_LOCATION = "ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch"


def build_spool() -> tuple[dict[str, bytes], dict]:
    """spool_log_v1.bin (one record of each type, described in spool.json), spool_torn_tail.bin (a
    last record cut short: read as the valid ones, the rest cut off), spool_bad_record_middle.bin
    (a flipped length in the first record, a valid one after it: CorruptSpool at offset 0) and
    spool_zero_tail.bin (the records, a last one cut short, then the zeros of a preallocated file:
    read as the valid ones, a clean end)."""
    loc = SPOOL_LOCATION.encode()
    described = [
        {"type": "entries", "call_no": 0, "ingestion_time_ms": 1700000000000, "metadata": b64(b"meta"),
         "entries": [b64(b"a"), b64(b""), b64(b"ccc")]},
        {"type": "batch", "batch_no": 0, "first_call": 0, "last_call": 0, "byte_length": 23,
         "batch_crc32": 3735928559, "location": SPOOL_LOCATION},
        {"type": "attempt", "base": 5, "batch_nos": [0], "locations": [SPOOL_LOCATION]},
        {"type": "landed", "first_sequence": 5, "batch_nos": [0]},
        {"type": "dropped", "first_call": 1, "last_call": 2},
    ]  # fmt: skip
    entries = struct.pack(">QqI", 0, 1700000000000, 4) + b"meta" + struct.pack(">I", 3)
    entries += b"".join(struct.pack(">I", len(e)) + e for e in (b"a", b"", b"ccc"))
    records = [
        spool_record(1, entries),
        spool_record(2, struct.pack(">QQQIIH", 0, 0, 0, 23, 3735928559, len(loc)) + loc),
        spool_record(3, struct.pack(">QHQH", 5, 1, 0, len(loc)) + loc),
        spool_record(4, struct.pack(">QHQ", 5, 1, 0)),
        spool_record(5, struct.pack(">QQ", 1, 2)),
    ]
    log = b"".join(records)
    bad = bytearray(log)
    bad[7] ^= 0x01  # body_len's low byte of the first record
    files = {
        "spool_log_v1.bin": log,
        "spool_torn_tail.bin": log + records[0][:-3],
        "spool_bad_record_middle.bin": bytes(bad),
        "spool_zero_tail.bin": log + records[0][:-3] + bytes(4096),
    }
    meta = {
        "spool_log_v1.bin": {"records": described},
        "spool_torn_tail.bin": {"records": described, "valid_length": len(log)},
        "spool_bad_record_middle.bin": {"error": "CorruptSpool", "offset": 0},
        "spool_zero_tail.bin": {"records": described, "valid_length": len(log)},
    }
    return files, meta


# -- cooperative commit (docs/format.md §2.1 type 4, §2.3 writers section, §2.4 intents) ---------

WRITER_A = bytes(range(16))
WRITER_B = bytes(range(0xA0, 0xB0))


def writer_record(writer_id: bytes, batch_no: int) -> bytes:
    """The type-4 writer-sequence record: "OSQ1" | 4 | body_len 24 | writer_id 16 | batch_no u64."""
    return b"OSQ1" + struct.pack("<BH", 4, 24) + writer_id + struct.pack("<Q", batch_no)


def intent(
    writer_id: bytes, first_batch: int, bodies: list[bytes], magic: bytes = b"OSQI", count: int | None = None
) -> bytes:
    """magic | version u8 | writer_id 16 | first_batch u64 | count u16 | (body_len u32 | body)* | crc32 u32."""
    n = len(bodies) if count is None else count
    data = magic + struct.pack("<B", 1) + writer_id + struct.pack("<QH", first_batch, n)
    data += b"".join(struct.pack("<I", len(b)) + b for b in bodies)
    return data + struct.pack("<I", zlib.crc32(data))


def varint(v: int) -> bytes:
    """Unsigned LEB128, shortest form."""
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def in_key_name(ulid: str, writer_id: bytes, first_batch: int, batches: list[tuple[str, bytes, list]]) -> str:
    """docs/format.md §2.4 "In-key intents": per batch location_len varint | location | byte_length + 1 varint
    (0: no integrity record) | batch_crc32 u32 | item_count varint | items (tag varint = zigzag time delta x 4 + 1 if the start delta is not 1
    + 2 if the payload changed | start delta varint if 1 | payload_len varint | payload if 2), base64url without
    padding after the count."""
    payload = b""
    time, prev = 0, b""
    for loc, data, items in batches:
        lb = loc.encode()
        payload += varint(len(lb)) + lb + varint(len(data) + 1) + struct.pack("<I", zlib.crc32(data))
        payload += varint(len(items))
        start = -1
        for s, t, p in items:
            d = t - time
            own_start, own_payload = s - start != 1, p != prev
            payload += varint((d * 2 if d >= 0 else -d * 2 - 1) * 4 + own_start + 2 * own_payload)
            payload += (varint(s - start) if own_start else b"") + (varint(len(p)) + p if own_payload else b"")
            start, time, prev = s, t, p
    text = base64.urlsafe_b64encode(payload).rstrip(b"=").decode()
    return f"ingest/manifest.intents/{ulid}-{writer_id.hex()}-{first_batch}-{len(batches)}-{text}.intent"


def build_intents() -> tuple[dict[str, bytes], dict]:
    """intent_v1.bin (two batches of one writer, with integrity and writer records), four rejected
    intents, and head_v3_writers.bin (a v3 head whose only section is the writers section, its tail's
    entries carrying both records), described in intents.json. Checked by Python only until the JVM has
    a cooperative committer (tests/golden/parity.json)."""
    batches = [b"batch-one", b"batch-two!"]
    locs = [LOC_A, LOC_B]
    metas = [[meta(0, T0 + 1, b"m1")], [meta(0, T0 + 2, b"")]]
    exts = [integrity_record(b) + writer_record(WRITER_A, 7 + i) for i, b in enumerate(batches)]
    bodies = [entry(0, loc, m, ext)[12:] for loc, m, ext in zip(locs, metas, exts)]  # entry_crc32 0
    good = intent(WRITER_A, 7, bodies)
    ulid = "01J5T4RTZ9Y8X7W6V5T4S3R2Q1"
    name = f"ingest/manifest.intents/{ulid}-{WRITER_A.hex()}-7-2.intent"
    bad_crc = good[:-1] + bytes([good[-1] ^ 1])
    files = {
        "intent_v1.bin": good,
        "intent_bad_crc.bin": bad_crc,
        "intent_bad_magic.bin": intent(WRITER_A, 7, bodies, magic=b"OSQX"),
        "intent_count_zero.bin": intent(WRITER_A, 7, [], count=0),
        "intent_name_mismatch.bin": good,
    }
    entries = [
        {"location": loc, "metadata": [meta_json(0, T0 + 1 + i, p)], "extension_b64": b64(ext)}
        for i, (loc, ext, p) in enumerate(zip(locs, exts, [b"m1", b""]))
    ]
    # The head: the two batches appended at sequences 40 and 41; writers A (last 8) and B (last 3).
    tail = b"".join(sealed_entry(40 + i, loc, m, ext) for i, (loc, m, ext) in enumerate(zip(locs, metas, exts)))
    rows = sorted([(WRITER_A, 8, T0 + 5000), (WRITER_B, 3, T0 + 4000)])
    writers_body = struct.pack("<I", len(rows)) + b"".join(w + struct.pack("<Qq", n, ms) for w, n, ms in rows)
    files["head_v3_writers.bin"] = head_v3([section(4, writers_body)], b"", 0, tail, 2, 40, 42, 9)
    meta_out = {
        "intent_v1.bin": {
            "name": name,
            "writer_id": WRITER_A.hex(),
            "first_batch": 7,
            "entries": entries,
            # The same batches announced in the key (§2.4 "In-key intents"): a committer reads no body.
            "in_key_name": in_key_name(
                ulid,
                WRITER_A,
                7,
                [(loc, b, [(0, T0 + 1 + i, p)]) for i, (loc, b, p) in enumerate(zip(locs, batches, [b"m1", b""]))],
            ),
        },
        "intent_bad_crc.bin": {"name": name, "error": "CorruptManifest"},
        "intent_bad_magic.bin": {"name": name, "error": "CorruptManifest"},
        "intent_count_zero.bin": {
            "name": f"ingest/manifest.intents/{ulid}-{WRITER_A.hex()}-7-1.intent",
            "error": "CorruptManifest",
        },
        "intent_name_mismatch.bin": {
            "name": f"ingest/manifest.intents/{ulid}-{WRITER_B.hex()}-7-2.intent",
            "error": "CorruptManifest",
        },
        "head_v3_writers.bin": {
            "manifest": "ingest/manifest",
            "next_sequence": 42,
            "epoch": 9,
            "low_water": 40,
            "tail": [{"sequence": 40 + i, **e} for i, e in enumerate(entries)],
            "writers": [{"writer_id": w.hex(), "last_batch": n, "last_append_ms": ms} for w, n, ms in rows],
        },
    }
    return files, meta_out


def main(argv: list[str]) -> None:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else pathlib.Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    vectors, files, heads, heads_v3 = build()
    for name, data in files.items():
        (out / name).write_bytes(data)
    (out / "vectors.json").write_text(json.dumps({"vectors": vectors}, indent=2) + "\n", encoding="utf-8")
    (out / "heads.json").write_text(json.dumps(heads, indent=2) + "\n", encoding="utf-8")
    (out / "heads_v3.json").write_text(json.dumps(heads_v3, indent=2) + "\n", encoding="utf-8")
    spool_files, spool = build_spool()
    for name, data in spool_files.items():
        (out / name).write_bytes(data)
    (out / "spool.json").write_text(json.dumps(spool, indent=2) + "\n", encoding="utf-8")
    intent_files, intents = build_intents()
    for name, data in intent_files.items():
        (out / name).write_bytes(data)
    (out / "intents.json").write_text(json.dumps(intents, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {len(files)} vectors to {out}")


if __name__ == "__main__":
    main(sys.argv)
