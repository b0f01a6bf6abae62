"""The extension records of a manifest entry and the integrity checks on them (docs/format.md §2.1,
docs/adr/0006 part 1). JVM: ``BatchIntegrity``, ``EntryIntegrity``."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from osqueue.errors import CorruptBatchError, CorruptManifestError
from osqueue.format.manifest import ManifestEntry

MAGIC = b"OSQ1"
SINK_TAG_TYPE = 1
INTEGRITY_TYPE = 3
INTEGRITY_BODY_LEN = 12
RECORD_HEADER_SIZE = 4 + 1 + 2
"""magic, tag_type, body_len."""

_RECORD_HEAD = struct.Struct("<4sBH")
_INTEGRITY = struct.Struct("<III")


@dataclass(frozen=True)
class EntryIntegrity:
    """The type-3 entry-integrity record of an entry.

    Attributes:
        byte_length: The batch object's size.
        batch_crc32: CRC-32 (ISO-HDLC) of the whole batch object.
        entry_crc32: CRC-32 of the entry from ``sequence`` to its end, these 4 bytes left out.
    """

    byte_length: int
    batch_crc32: int
    entry_crc32: int


@dataclass(frozen=True)
class Record:
    """One length-prefixed record found by :func:`walk`: its type and where its body sits."""

    tag_type: int
    body_at: int
    body_len: int


def walk(ext: bytes) -> tuple[list[Record], int | None]:
    """The records (type >= 3) of an extension, in order, and where the sink tag starts if the walk
    ends at one. Never fails: bytes that are not a record end the walk."""
    out: list[Record] = []
    pos = 0
    n = len(ext)
    while n - pos >= 5 and ext[pos : pos + 4] == MAGIC:
        tag_type = ext[pos + 4]
        if tag_type == SINK_TAG_TYPE:
            return out, pos
        if tag_type < 3 or n - pos < RECORD_HEADER_SIZE:
            break
        (body_len,) = struct.unpack_from("<H", ext, pos + 5)
        if body_len > n - pos - RECORD_HEADER_SIZE:
            break
        out.append(Record(tag_type, pos + RECORD_HEADER_SIZE, body_len))
        pos += RECORD_HEADER_SIZE + body_len
    return out, None


def sink_tag_bytes(ext: bytes) -> bytes | None:
    """The sink tag's bytes (from its magic to the end), if the records walk ends at one."""
    at = walk(ext)[1]
    return None if at is None else bytes(ext[at:])


def _integrity_record(ext: bytes) -> Record | None:
    for r in walk(ext)[0]:
        if r.tag_type == INTEGRITY_TYPE and r.body_len == INTEGRITY_BODY_LEN:
            return r
    return None


def integrity_of(ext: bytes) -> EntryIntegrity | None:
    """The entry-integrity record of an extension, if it has one of the right length (JVM: ``of``)."""
    r = _integrity_record(ext)
    return None if r is None else EntryIntegrity(*_INTEGRITY.unpack_from(ext, r.body_at))


def crc32(data: bytes) -> int:
    """CRC-32 (ISO-HDLC, ``zlib.crc32``) as an unsigned value."""
    return zlib.crc32(data) & 0xFFFFFFFF


def record(batch: bytes) -> bytes:
    """The record for a batch of these bytes, its ``entry_crc32`` left 0 (the entry encoder fills it)."""
    return record_of(len(batch), crc32(batch))


def record_of(byte_length: int, batch_crc32: int) -> bytes:
    """The record for a batch of this length and CRC, its ``entry_crc32`` left 0."""
    return _RECORD_HEAD.pack(MAGIC, INTEGRITY_TYPE, INTEGRITY_BODY_LEN) + _INTEGRITY.pack(byte_length, batch_crc32, 0)


def _entry_crc(entry: bytes, crc_at: int) -> int:
    return zlib.crc32(entry[crc_at + 4 :], zlib.crc32(entry[4:crc_at])) & 0xFFFFFFFF


def seal(entry: bytes, ext_at: int) -> bytes:
    """An encoded entry (from ``entry_len`` on) whose extension starts at ``ext_at``, with the
    ``entry_crc32`` of its integrity record filled in (unchanged without one)."""
    r = _integrity_record(entry[ext_at:])
    if r is None:
        return entry
    at = ext_at + r.body_at + 8
    return entry[:at] + struct.pack("<I", _entry_crc(entry, at)) + entry[at + 4 :]


def verify_entry(entry: ManifestEntry, key: str) -> EntryIntegrity | None:
    """Checks an entry's own CRC when it has an integrity record, from its decoded fields (they
    give back its bytes exactly); ``key`` names the manifest it was read from. Returns the record
    (None: no record, delivered unverified).

    Raises:
        CorruptManifestError: ``entry_crc32`` does not match (naming the sequence).
    """
    ext = bytes(entry.extension)
    r = _integrity_record(ext)
    if r is None:
        return None
    loc = entry.location.encode("utf-8")
    parts = [b"\0\0\0\0", struct.pack("<QH", entry.sequence, len(loc)), loc, struct.pack("<I", len(entry.metadata))]
    for m in entry.metadata:
        parts.append(struct.pack("<IqI", m.start_index, m.ingestion_time_ms, len(m.payload)) + bytes(m.payload))
    parts.append(ext)
    entry_bytes = b"".join(parts)  # entry_len left 0: the CRC starts after it
    at = len(entry_bytes) - len(ext) + r.body_at + 8
    byte_length, batch_crc, expected = _INTEGRITY.unpack_from(entry_bytes, at - 8)
    actual = _entry_crc(entry_bytes, at)
    if expected != actual:
        raise CorruptManifestError(
            key,
            f"entry at sequence {entry.sequence}: entry_crc32 0x{expected:08x} does not match its bytes "
            f"(CRC-32 0x{actual:08x})",
        )
    return EntryIntegrity(byte_length, batch_crc, expected)


def matches(rec: EntryIntegrity, data: bytes) -> bool:
    """Whether ``data`` is the batch the record describes."""
    return len(data) == rec.byte_length and crc32(data) == rec.batch_crc32


def mismatch(rec: EntryIntegrity, data: bytes, key: str) -> CorruptBatchError:
    """``CorruptBatch`` naming the object and the expected and actual length and CRC."""
    return CorruptBatchError(
        key,
        f"integrity check failed: expected {rec.byte_length} bytes with CRC-32 0x{rec.batch_crc32:08x}, "
        f"read {len(data)} bytes with CRC-32 0x{crc32(data):08x}",
    )


def verify(rec: EntryIntegrity, data: bytes, key: str, reread: Callable[[], bytes]) -> bytes:
    """Checks a batch read for an entry with a record, reading it once more (``reread``) on a
    mismatch; returns the bytes that check.

    Raises:
        CorruptBatchError: The second read does not match either.
    """
    if matches(rec, data):
        return data
    again = reread()
    if matches(rec, again):
        return again
    raise mismatch(rec, again, key)
