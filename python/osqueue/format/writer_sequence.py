"""Writer sequences: the type-4 entry record ``(writer_id, batch_no)`` and the v3 head's writers
section (docs/format.md §2.1 and §2.3, docs/adr/0006 part 2, docs/adr/0007 part 1).

A batch ``n`` of writer ``w`` is in the queue (queued, sealed or dequeued) iff ``n <= last_batch[w]``:
every CAS that appends ``(w, n)`` requires ``n == last_batch[w] + 1`` (or a contiguous run from it)
on the head it is conditioned on and sets ``last_batch[w]`` in the same write, so no batch is ever
appended twice. JVM: `osqueue.format.WriterSequence`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from osqueue.errors import CorruptManifestError
from osqueue.format.batch_integrity import MAGIC, walk
from osqueue.format.head_sections import WRITERS_SECTION, HeadSections, OpaqueSection

WRITER_SEQUENCE_TYPE = 4
WRITER_SEQUENCE_BODY_LEN = 24
WRITER_ID_LEN = 16
DEFAULT_WRITER_TTL_MS = 7 * 24 * 3600 * 1000
"""``writerTtl``: a head writer drops writer records whose last append is older than this (ADR 0006)."""

_RECORD = struct.Struct("<4sBH16sQ")
_WRITER = struct.Struct("<16sQq")
_U64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class WriterRecord:
    """One writer's record in the writers section: the highest batch number of it that landed."""

    writer_id: bytes
    last_batch: int
    last_append_ms: int


def sequence_record(writer_id: bytes, batch_no: int) -> bytes:
    """The type-4 extension record of batch ``batch_no`` of ``writer_id`` (after the integrity record)."""
    if len(writer_id) != WRITER_ID_LEN or not 0 <= batch_no <= _U64_MAX:
        raise ValueError(f"writer id of {len(writer_id)} bytes or batch_no {batch_no} does not fit")
    return _RECORD.pack(MAGIC, WRITER_SEQUENCE_TYPE, WRITER_SEQUENCE_BODY_LEN, writer_id, batch_no)


def sequence_of(extension: bytes) -> tuple[bytes, int] | None:
    """The ``(writer_id, batch_no)`` of an entry's extension, if it has a type-4 record of the right length."""
    for r in walk(extension)[0]:
        if r.tag_type == WRITER_SEQUENCE_TYPE and r.body_len == WRITER_SEQUENCE_BODY_LEN:
            wid, n = struct.unpack_from("<16sQ", extension, r.body_at)
            return bytes(wid), int(n)
    return None


def encode_writers(records: Iterable[WriterRecord]) -> bytes:
    """The writers section's body: ``count u32`` then the records sorted by writer id."""
    rows = sorted(records, key=lambda r: r.writer_id)
    return struct.pack("<I", len(rows)) + b"".join(
        _WRITER.pack(r.writer_id, r.last_batch, r.last_append_ms) for r in rows
    )


def decode_writers(body: bytes, key: str) -> dict[bytes, WriterRecord]:
    """The records of a writers section's body, checked (count, length, ids strictly increasing).

    Raises:
        CorruptManifestError: The body is malformed (naming the manifest ``key``).
    """
    if len(body) < 4:
        raise CorruptManifestError(key, "writers section: shorter than its count")
    (count,) = struct.unpack_from("<I", body, 0)
    if len(body) != 4 + count * _WRITER.size:
        raise CorruptManifestError(key, f"writers section: {count} records cannot fill {len(body)} bytes")
    out: dict[bytes, WriterRecord] = {}
    previous = b""
    for i in range(count):
        wid, last_batch, last_ms = _WRITER.unpack_from(body, 4 + i * _WRITER.size)
        if i and wid <= previous:
            raise CorruptManifestError(key, f"writers section: record {i}: writer ids must increase")
        previous = wid
        out[bytes(wid)] = WriterRecord(bytes(wid), last_batch, last_ms)
    return out


def writers_of(sections: HeadSections, key: str) -> dict[bytes, WriterRecord]:
    """The writers section of a head's sections ({} without one)."""
    for o in sections.opaque:
        if o.section_type == WRITERS_SECTION:
            return decode_writers(o.body, key)
    return {}


def with_writers(
    sections: HeadSections, writers: Mapping[bytes, WriterRecord], now_ms: int, ttl_ms: int = DEFAULT_WRITER_TTL_MS
) -> HeadSections:
    """``sections`` with the writers section replaced by ``writers``, minus records whose last append is
    ``ttl_ms`` older than ``now_ms`` (no section when none is left)."""
    kept = [r for r in writers.values() if now_ms - r.last_append_ms < ttl_ms]
    others = tuple(o for o in sections.opaque if o.section_type != WRITERS_SECTION)
    if kept:
        others = tuple(
            sorted([*others, OpaqueSection(WRITERS_SECTION, encode_writers(kept))], key=lambda o: o.section_type)
        )
    return replace(sections, opaque=others)
