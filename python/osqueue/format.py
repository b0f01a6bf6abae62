"""Byte formats of the queue manifest and of data batches (docs/format.md §2–§4).

Everything here is pure: bytes in, values out. Decoders raise :class:`CorruptManifestError`,
:class:`CorruptBatchError` or :class:`UnsupportedFormatVersionError` naming the object, and never
allocate by a count read from the object before checking that the bytes for it exist.

The manifest operations a producer or consumer needs on the write path work on the *raw* bytes
and are O(1) in the number of entries (:func:`append_entries`, :func:`with_epoch`) or O(removed)
(:func:`dequeue_through`): existing entries, extension bytes included, are carried byte for byte.
"""

from __future__ import annotations

import enum
import hashlib
import re
import secrets
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from osqueue.errors import (
    CorruptBatchError,
    CorruptManifestError,
    InvalidConfigError,
    UnsupportedFormatVersionError,
)

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_FOOTER_LEN",
    "BATCH_FOOTER_LEN",
    "MAX_SEQUENCE",
    "MAX_DECOMPRESSED_BLOCK",
    "MetadataItem",
    "ManifestEntry",
    "Manifest",
    "ManifestFooter",
    "Compression",
    "EntryTag",
    "Delivered",
    "decode_manifest",
    "encode_manifest",
    "encode_entry",
    "read_manifest_footer",
    "append_entries",
    "dequeue_through",
    "with_epoch",
    "next_epoch",
    "incarnation_of",
    "new_incarnation_epoch",
    "INCARNATION_SUFFIX",
    "iter_entry_locations",
    "empty_manifest",
    "encode_batch",
    "decode_batch",
    "encode_ulid",
    "new_batch_key",
    "parse_batch_ulid_ms",
    "is_batch_name",
    "DequeueReceipts",
    "RECEIPTS_SUFFIX",
    "MAX_RECEIPTS",
    "HEAD_VERSION",
    "SEGMENTS_SUFFIX",
    "SegmentRef",
    "ManifestHead",
    "decode_head",
    "HeadRefs",
    "parse_head_refs",
    "decode_segment",
]

FORMAT_VERSION = 1
"""The only format version this osqueue reads and writes."""

MANIFEST_FOOTER_LEN = 22
BATCH_FOOTER_LEN = 7
MAX_SEQUENCE = (1 << 63) - 1
"""Sequences (and ``next_sequence``) above this are rejected as corrupt, as on the JVM."""
MAX_START_INDEX = (1 << 31) - 1
"""``start_index`` above this is rejected (both languages): a batch's block is < 2 GiB, so it holds fewer records."""
MAX_DECOMPRESSED_BLOCK = (1 << 31) - 1
"""A zstd record block that decompresses past 2 GiB − 1 is rejected."""

_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1

_FOOTER = struct.Struct("<IQQH")  # entry_count, next_sequence, epoch, version
_ENTRY_HEAD = struct.Struct("<IQH")  # entry_len, sequence, location_len
_U32 = struct.Struct("<I")
_META_HEAD = struct.Struct("<IqI")  # start_index, ingestion_time_ms, payload_len
_BATCH_FOOTER = struct.Struct("<BIH")  # compression, record_count, version
_ENTRY_FIXED = 8 + 2 + 4  # sequence + location_len + metadata_count
_META_FIXED = 4 + 8 + 4


@dataclass(frozen=True)
class MetadataItem:
    """Metadata of a range of records in a batch (one per ``produce()`` call).

    Attributes:
        start_index: Index in the batch of the first record the item covers. The range runs
            to the next item's ``start_index`` or to the end of the batch.
        ingestion_time_ms: The producer's wall clock at ``produce()``, ms since the Unix epoch.
        payload: Opaque application metadata.
    """

    start_index: int
    ingestion_time_ms: int
    payload: bytes


@dataclass(frozen=True)
class ManifestEntry:
    """One queue entry: a batch location and the metadata of its record ranges.

    Attributes:
        sequence: The entry's sequence number.
        location: The batch's key relative to the store root.
        metadata: The metadata items, in ``start_index`` order.
        extension: Bytes after the metadata that this version does not interpret; kept as is.
    """

    sequence: int
    location: str
    metadata: list[MetadataItem] = field(default_factory=list)
    extension: bytes = b""


@dataclass(frozen=True)
class Manifest:
    """A decoded queue manifest.

    Attributes:
        entries: The entries, with contiguous increasing sequences.
        next_sequence: The sequence the next appended entry takes.
        epoch: The consumer epoch (fencing token).
    """

    entries: list[ManifestEntry]
    next_sequence: int
    epoch: int

    @property
    def first_sequence(self) -> int:
        """The first entry's sequence, or ``next_sequence`` when the manifest is empty."""
        return self.entries[0].sequence if self.entries else self.next_sequence


@dataclass(frozen=True)
class ManifestFooter:
    """The 22-byte manifest footer."""

    entry_count: int
    next_sequence: int
    epoch: int


_TAG_MAGIC = b"OSQ1"
_TAG_SINK = 1
_TAG_HEAD = struct.Struct("<4sBH")  # magic, tag_type, writer_len
_TAG_MID = struct.Struct("<qB")  # batch_id, attempt_len


@dataclass(frozen=True)
class EntryTag:
    """osqueue's manifest entry extension (docs/format.md §2.1): the sink write that appended
    the entry. Same bytes as the JVM's ``osqueue.format.EntryTag``.

    A replayed Spark epoch appends a second copy of its batch with the same
    ``(writer_id, batch_id)`` and a new ``attempt_id``; :class:`Delivered` picks one copy.

    Attributes:
        writer_id: The sink's writer (a Spark query id, or the ``writerId`` option).
        batch_id: The epoch (i64).
        attempt_id: Fresh per commit attempt (a ULID).
    """

    writer_id: str
    batch_id: int
    attempt_id: str

    def encode(self) -> bytes:
        """The extension bytes of this tag.

        Raises:
            InvalidConfigError: A field does not fit its wire type.
        """
        w = self.writer_id.encode("utf-8")
        a = self.attempt_id.encode("utf-8")
        if len(w) > _U16_MAX:
            raise InvalidConfigError("writer_id", self.writer_id[:80], "a writer id is at most 65535 UTF-8 bytes")
        if len(a) > 0xFF:
            raise InvalidConfigError("attempt_id", self.attempt_id[:80], "an attempt id is at most 255 UTF-8 bytes")
        if not _I64_MIN <= self.batch_id <= _I64_MAX:
            raise InvalidConfigError("batch_id", self.batch_id, "a batch id is an i64")
        return _TAG_HEAD.pack(_TAG_MAGIC, _TAG_SINK, len(w)) + w + _TAG_MID.pack(self.batch_id, len(a)) + a

    @staticmethod
    def decode(extension: bytes) -> EntryTag | None:
        """The tag in an entry's extension bytes, or None when they are not exactly one
        (readers ignore other extensions, as RFC 0001 readers ignore all of them)."""
        ext = bytes(extension)
        if len(ext) < _TAG_HEAD.size + _TAG_MID.size:
            return None
        magic, tag_type, writer_len = _TAG_HEAD.unpack_from(ext)
        pos = _TAG_HEAD.size + writer_len
        if magic != _TAG_MAGIC or tag_type != _TAG_SINK or len(ext) < pos + _TAG_MID.size:
            return None
        batch_id, attempt_len = _TAG_MID.unpack_from(ext, pos)
        if len(ext) != pos + _TAG_MID.size + attempt_len:
            return None
        try:  # malformed UTF-8 is not a tag (the JVM decodes strictly too)
            writer_id = ext[_TAG_HEAD.size : pos].decode("utf-8")
            attempt_id = ext[pos + _TAG_MID.size :].decode("utf-8")
        except UnicodeDecodeError:
            return None
        return EntryTag(writer_id, batch_id, attempt_id)


@dataclass(frozen=True)
class Delivered:
    """Which copy of each writer's batches a reader delivered: the sink's reader rule
    (docs/adr/0002), as the JVM's ``EntryTag.Delivered``. Immutable: :meth:`admit` returns the
    next state.

    Attributes:
        writers: ``writer_id`` → ``(batch_id, attempt_id)`` of the copy delivered last.
    """

    writers: Mapping[str, tuple[int, str]] = field(default_factory=dict)

    def admit(self, tag: EntryTag | None) -> tuple[bool, Delivered]:
        """Whether an entry with ``tag`` is delivered, and the state after it.

        An untagged entry is always delivered. A tagged one is skipped when its writer already
        had a later batch delivered, or another attempt of the same batch (a replayed copy).
        One sink commit's entries are contiguous, so a copy is delivered whole or not at all.
        """
        if tag is None:
            return True, self
        seen = self.writers.get(tag.writer_id)
        copy = (tag.batch_id, tag.attempt_id)
        if seen is not None:
            if tag.batch_id < seen[0] or (tag.batch_id == seen[0] and tag.attempt_id != seen[1]):
                return False, self
            if seen == copy:  # another entry of the copy being delivered
                return True, self
        return True, Delivered({**self.writers, tag.writer_id: copy})


class Compression(enum.IntEnum):
    """Compression of a batch's record block (the footer's ``compression`` byte)."""

    NONE = 0
    ZSTD = 1


# ---------------------------------------------------------------------------------------------
# Manifest


def _footer_bytes(entry_count: int, next_sequence: int, epoch: int) -> bytes:
    return _FOOTER.pack(entry_count, next_sequence, epoch, FORMAT_VERSION)


def empty_manifest(epoch: int = 0) -> bytes:
    """The empty manifest: the footer alone (22 bytes)."""
    return _footer_bytes(0, 0, epoch)


def read_manifest_footer(data: bytes, key: str) -> ManifestFooter:
    """Validates and returns a manifest's footer without looking at its entries.

    Args:
        data: The whole manifest object.
        key: The object's key, for error messages.

    Raises:
        CorruptManifestError: The object is empty or shorter than the footer, or the footer
            holds impossible values.
        UnsupportedFormatVersionError: The version is not 1.
    """
    n = len(data)
    if n == 0:
        raise CorruptManifestError(key, "empty object")
    if n < MANIFEST_FOOTER_LEN:
        raise CorruptManifestError(key, f"shorter than the 22-byte footer ({n} bytes)")
    entry_count, next_sequence, epoch, version = _FOOTER.unpack_from(data, n - MANIFEST_FOOTER_LEN)
    if version != FORMAT_VERSION:
        raise UnsupportedFormatVersionError(key, "manifest", version)
    if next_sequence > MAX_SEQUENCE:
        raise CorruptManifestError(key, f"next_sequence {next_sequence} is at or above 2^63")
    return ManifestFooter(entry_count, next_sequence, epoch)


def _check_entries_fit(footer: ManifestFooter, region_len: int, key: str) -> None:
    # Every entry takes at least 4 + 14 bytes: refuse counts the region cannot hold before looping.
    if footer.entry_count * (4 + _ENTRY_FIXED) > region_len:
        raise CorruptManifestError(
            key, f"{footer.entry_count} entries cannot fit in the {region_len}-byte entries region"
        )


def decode_manifest(data: bytes, key: str) -> Manifest:
    """Decodes a whole manifest object.

    Args:
        data: The object's bytes.
        key: The object's key, named in errors.

    Returns:
        The manifest.

    Raises:
        CorruptManifestError: See the table in docs/format.md §2.
        UnsupportedFormatVersionError: The version is not 1.
    """
    footer = read_manifest_footer(data, key)
    end = len(data) - MANIFEST_FOOTER_LEN
    _check_entries_fit(footer, end, key)
    mv = memoryview(data)
    entries: list[ManifestEntry] = []
    pos = 0
    count = footer.entry_count
    for i in range(count):
        if pos + 4 > end:
            raise CorruptManifestError(key, f"entry {i} of {count}: entry_len field runs past the entries region")
        (entry_len,) = _U32.unpack_from(data, pos)
        body = pos + 4
        entry_end = body + entry_len
        if entry_end > end:
            raise CorruptManifestError(key, f"entry {i} of {count}: entry_len {entry_len} runs past the entries region")
        if entry_len < _ENTRY_FIXED:
            raise CorruptManifestError(key, f"entry {i}: entry_len {entry_len} is smaller than 14")
        _, sequence, location_len = _ENTRY_HEAD.unpack_from(data, pos)
        if _ENTRY_FIXED + location_len > entry_len:
            raise CorruptManifestError(
                key, f"entry {i}: entry_len {entry_len} is smaller than 14 + location_len {location_len}"
            )
        loc_start = body + 10
        try:
            location = bytes(mv[loc_start : loc_start + location_len]).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptManifestError(key, f"entry {i}: location is not valid UTF-8") from None
        p = loc_start + location_len
        (meta_count,) = _U32.unpack_from(data, p)
        p += 4
        if meta_count * _META_FIXED > entry_end - p:
            raise CorruptManifestError(key, f"entry {i}: {meta_count} metadata items run past the entry's end")
        metadata: list[MetadataItem] = []
        for j in range(meta_count):
            if p + _META_FIXED > entry_end:
                raise CorruptManifestError(key, f"entry {i}: metadata item {j} runs past the entry's end")
            start_index, ingestion_time_ms, payload_len = _META_HEAD.unpack_from(data, p)
            p += _META_FIXED
            if p + payload_len > entry_end:
                raise CorruptManifestError(
                    key, f"entry {i}: metadata item {j} payload ({payload_len} bytes) runs past the entry's end"
                )
            if start_index > MAX_START_INDEX:  # as on the JVM (docs/format.md §2)
                raise CorruptManifestError(key, f"entry {i}: metadata item {j} start_index is out of range")
            metadata.append(MetadataItem(start_index, ingestion_time_ms, bytes(mv[p : p + payload_len])))
            p += payload_len
        extension = bytes(mv[p:entry_end])
        entries.append(ManifestEntry(sequence, location, metadata, extension))
        pos = entry_end
    if pos != end:
        raise CorruptManifestError(key, f"{end - pos} bytes left between the last entry and the footer")
    _check_sequences(entries, footer.next_sequence, key)
    return Manifest(entries, footer.next_sequence, footer.epoch)


def _check_sequences(entries: Sequence[ManifestEntry], next_sequence: int, key: str) -> None:
    previous: int | None = None
    for e in entries:
        if e.sequence > MAX_SEQUENCE:
            raise CorruptManifestError(key, f"sequence {e.sequence} is at or above 2^63")
        if previous is not None and e.sequence != previous + 1:
            raise CorruptManifestError(key, f"sequences are not contiguous: {e.sequence} follows {previous}")
        previous = e.sequence
    # Appends take next_sequence and dequeues remove a prefix: the last entry is always next - 1.
    if previous is not None and previous != next_sequence - 1:
        raise CorruptManifestError(
            key, f"last sequence {previous} is not next_sequence - 1 (next_sequence is {next_sequence})"
        )


def encode_entry(sequence: int, location: str, metadata: Sequence[MetadataItem], extension: bytes = b"") -> bytes:
    """Encodes one manifest entry (``entry_len`` included).

    Raises:
        InvalidConfigError: A field does not fit its wire type.
    """
    loc = location.encode("utf-8")
    if len(loc) > _U16_MAX:
        raise InvalidConfigError("location", location[:80], "a location is at most 65535 UTF-8 bytes")
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise InvalidConfigError("sequence", sequence, "sequences are in [0, 2^63)")
    if len(metadata) > _U32_MAX:
        raise InvalidConfigError("metadata", len(metadata), "at most 2^32 - 1 metadata items per entry")
    parts = [b"", struct.pack("<QH", sequence, len(loc)), loc, _U32.pack(len(metadata))]
    for m in metadata:
        if not 0 <= m.start_index <= MAX_START_INDEX:
            raise InvalidConfigError(
                "start_index", m.start_index, "must be below 2^31: no batch holds that many records (docs/format.md §2)"
            )
        if not _I64_MIN <= m.ingestion_time_ms <= _I64_MAX:
            raise InvalidConfigError("ingestion_time_ms", m.ingestion_time_ms, "ingestion_time_ms is an i64")
        if len(m.payload) > _U32_MAX:
            raise InvalidConfigError("payload", len(m.payload), "a metadata payload is at most 2^32 - 1 bytes")
        parts.append(_META_HEAD.pack(m.start_index, m.ingestion_time_ms, len(m.payload)))
        parts.append(bytes(m.payload))
    parts.append(bytes(extension))
    body_len = sum(len(p) for p in parts)
    if body_len > _U32_MAX:
        raise InvalidConfigError("entry", body_len, "an entry is at most 2^32 - 1 bytes")
    parts[0] = _U32.pack(body_len)
    return b"".join(parts)


def encode_manifest(manifest: Manifest) -> bytes:
    """Encodes a whole manifest (entries with their extension bytes, then the footer).

    Raises:
        InvalidConfigError: The manifest breaks the format's invariants (sequences not
            contiguous, last sequence not ``next_sequence - 1``, field overflow).
    """
    entries = manifest.entries
    for a, b in zip(entries, entries[1:]):
        if b.sequence != a.sequence + 1:
            raise InvalidConfigError("entries", f"{a.sequence}, {b.sequence}", "sequences must be contiguous")
    if entries and entries[-1].sequence != manifest.next_sequence - 1:
        raise InvalidConfigError("next_sequence", manifest.next_sequence, "must be the last entry's sequence + 1")
    if not 0 <= manifest.next_sequence <= MAX_SEQUENCE:
        raise InvalidConfigError("next_sequence", manifest.next_sequence, "must be in [0, 2^63)")
    if not 0 <= manifest.epoch <= _U64_MAX:
        raise InvalidConfigError("epoch", manifest.epoch, "the epoch is a u64")
    if len(entries) > _U32_MAX:
        raise InvalidConfigError("entries", len(entries), "at most 2^32 - 1 entries")
    body = b"".join(encode_entry(e.sequence, e.location, e.metadata, e.extension) for e in entries)
    return body + _footer_bytes(len(entries), manifest.next_sequence, manifest.epoch)


def append_entries(
    raw: bytes | None,
    new_entries: Sequence[tuple[str, Sequence[MetadataItem]]],
    key: str = "manifest",
    new_epoch: int = 0,
) -> tuple[bytes, int]:
    """Appends entries to a manifest without decoding its existing entries.

    The footer is validated and stripped, the new entries take ``next_sequence``,
    ``next_sequence + 1``, ... and a new footer is written (same epoch).

    Args:
        raw: The current manifest bytes, or None when the object is missing (empty manifest).
        new_entries: ``(location, metadata)`` pairs, in order.
        key: The manifest's key, for error messages.
        new_epoch: The epoch of a manifest this append creates (``raw`` None): writers pass
            :func:`new_incarnation_epoch`.

    Returns:
        The new manifest bytes and the sequence of the first new entry.
    """
    footer = ManifestFooter(0, 0, new_epoch) if raw is None else read_manifest_footer(raw, key)
    first = footer.next_sequence
    k = len(new_entries)
    if footer.entry_count + k > _U32_MAX:
        raise CorruptManifestError(key, "appending would exceed 2^32 - 1 entries")
    if first + k > MAX_SEQUENCE:
        raise CorruptManifestError(key, "appending would take sequences past 2^63")
    body = b"".join(encode_entry(first + i, loc, meta) for i, (loc, meta) in enumerate(new_entries))
    prefix = b"" if raw is None else raw[: len(raw) - MANIFEST_FOOTER_LEN]
    return prefix + body + _footer_bytes(footer.entry_count + k, first + k, footer.epoch), first


def _walk_headers(raw: bytes, key: str) -> Iterator[tuple[int, int, int, int]]:
    """Yields ``(sequence, entry_start, entry_end, location_len)`` hopping over entries."""
    footer = read_manifest_footer(raw, key)
    end = len(raw) - MANIFEST_FOOTER_LEN
    _check_entries_fit(footer, end, key)
    pos = 0
    for i in range(footer.entry_count):
        if pos + 4 + _ENTRY_FIXED > end:
            raise CorruptManifestError(key, f"entry {i} of {footer.entry_count}: header runs past the entries region")
        entry_len, sequence, location_len = _ENTRY_HEAD.unpack_from(raw, pos)
        entry_end = pos + 4 + entry_len
        if entry_end > end:
            raise CorruptManifestError(key, f"entry {i}: entry_len {entry_len} runs past the entries region")
        if _ENTRY_FIXED + location_len > entry_len:
            raise CorruptManifestError(
                key, f"entry {i}: entry_len {entry_len} is smaller than 14 + location_len {location_len}"
            )
        yield sequence, pos, entry_end, location_len
        pos = entry_end
    if pos != end:
        raise CorruptManifestError(key, f"{end - pos} bytes left between the last entry and the footer")


def iter_entry_locations(raw: bytes, key: str, min_sequence: int = 0) -> Iterator[tuple[int, str]]:
    """Yields ``(sequence, location)`` of the entries with ``sequence >= min_sequence``.

    Metadata is not decoded: each entry costs one header read.
    """
    for sequence, start, _end, location_len in _walk_headers(raw, key):
        if sequence < min_sequence:
            continue
        loc_start = start + 14
        try:
            location = raw[loc_start : loc_start + location_len].decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptManifestError(key, f"entry {sequence}: location is not valid UTF-8") from None
        yield sequence, location


def dequeue_through(raw: bytes, through_sequence: int, key: str = "manifest") -> tuple[bytes, int]:
    """Removes the entries with ``sequence <= through_sequence`` (a prefix of the list).

    Only the removed entries' headers are read; the rest is carried byte for byte and
    ``next_sequence`` and the epoch are kept.

    Returns:
        The new bytes and the number of entries removed (0: ``raw`` is returned unchanged).
    """
    footer = read_manifest_footer(raw, key)
    cut = 0
    removed = 0
    for sequence, _start, entry_end, _ in _walk_headers(raw, key):
        if sequence > through_sequence:
            break
        cut = entry_end
        removed += 1
    if removed == 0:
        return raw, 0
    new = raw[cut : len(raw) - MANIFEST_FOOTER_LEN] + _footer_bytes(
        footer.entry_count - removed, footer.next_sequence, footer.epoch
    )
    return new, removed


def with_epoch(raw: bytes | None, epoch: int, key: str = "manifest") -> bytes:
    """Returns the manifest with its footer's epoch replaced (a missing one becomes empty)."""
    if not 0 <= epoch <= _U64_MAX:
        raise InvalidConfigError("epoch", epoch, "the epoch is a u64")
    if raw is None:
        return empty_manifest(epoch)
    footer = read_manifest_footer(raw, key)
    return raw[: len(raw) - MANIFEST_FOOTER_LEN] + _footer_bytes(footer.entry_count, footer.next_sequence, epoch)


INCARNATION_SUFFIX = ".incarnation"
"""``<manifest>.incarnation``: the incarnation the last consumer initialized (docs/format.md §5.2)."""


def incarnation_of(epoch: int) -> int:
    """The manifest incarnation an epoch belongs to: its high 32 bits (docs/format.md §5.2).

    0 for a manifest created by the reference implementation or an osqueue before incarnations.
    """
    return epoch >> 32


def new_incarnation_epoch() -> int:
    """The epoch of a manifest being created: a fresh random incarnation in [1, 2^31) in the high
    32 bits, 0 in the low ones (kept below 2^63 so the JVM's signed Long holds it). Not drawn from
    an injected ``random.Random``: two seeded test queues must not share an incarnation."""
    return (1 + secrets.randbelow((1 << 31) - 1)) << 32


def next_epoch(epoch: int) -> int:
    """The epoch a consumer takes at ``initialize``: ``epoch + 1``, wrapping past 2^64 − 2 to 0."""
    nxt = epoch + 1
    return 0 if nxt >= _U64_MAX else nxt


# ---------------------------------------------------------------------------------------------
# Data batches


def encode_batch(records: Sequence[bytes], compression: Compression = Compression.NONE) -> bytes:
    """Encodes records as a data batch (docs/format.md §3).

    Args:
        records: The records, in order (empty records are allowed).
        compression: ``Compression.ZSTD`` compresses the record block at level 3.
    """
    compression = Compression(compression)
    if len(records) > _U32_MAX:
        raise InvalidConfigError("records", len(records), "at most 2^32 - 1 records per batch")
    parts: list[bytes] = []
    for r in records:
        if len(r) > _U32_MAX:
            raise InvalidConfigError("record", len(r), "a record is at most 2^32 - 1 bytes")
        parts.append(_U32.pack(len(r)))
        parts.append(bytes(r))
    block = b"".join(parts)
    if compression is Compression.ZSTD:
        import zstandard

        block = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(block)
    return block + _BATCH_FOOTER.pack(int(compression), len(records), FORMAT_VERSION)


def _zstd_decompress(block: bytes, key: str) -> bytes:
    """Decompresses every concatenated zstd frame of ``block``; a truncated frame, garbage or
    more than ``MAX_DECOMPRESSED_BLOCK`` bytes of output raise ``CorruptBatchError``.

    Input is fed 4 KiB at a time, so one step can only produce a bounded amount of output
    (a decompression bomb is stopped near the cap, not after allocating its whole output).
    """
    import zstandard

    out = bytearray()
    dctx = zstandard.ZstdDecompressor()
    pos, n = 0, len(block)
    step = 4096
    try:
        while pos < n:
            frame = dctx.decompressobj()
            while not frame.eof:
                if pos >= n:
                    raise CorruptBatchError(key, "zstd block ends inside a frame (truncated)")
                chunk = block[pos : pos + step]
                out += frame.decompress(chunk)
                if len(out) > MAX_DECOMPRESSED_BLOCK:
                    raise CorruptBatchError(key, "zstd block decompresses past 2 GiB - 1")
                pos += len(chunk) - (len(frame.unused_data) if frame.eof else 0)
    except zstandard.ZstdError as e:
        raise CorruptBatchError(key, f"zstd block does not decompress: {e}") from e
    return bytes(out)


def decode_batch(data: bytes, key: str) -> list[bytes]:
    """Decodes a data batch into its records.

    Args:
        data: The batch object's bytes.
        key: The object's key, named in errors.

    Raises:
        CorruptBatchError: See the table in docs/format.md §3.
        UnsupportedFormatVersionError: The version is not 1.
    """
    n = len(data)
    if n < BATCH_FOOTER_LEN:
        raise CorruptBatchError(key, f"shorter than the 7-byte footer ({n} bytes)")
    compression, count, version = _BATCH_FOOTER.unpack_from(data, n - BATCH_FOOTER_LEN)
    if version != FORMAT_VERSION:
        raise UnsupportedFormatVersionError(key, "batch", version)
    if compression == Compression.NONE:
        block = bytes(data[: n - BATCH_FOOTER_LEN])
    elif compression == Compression.ZSTD:
        block = _zstd_decompress(bytes(data[: n - BATCH_FOOTER_LEN]), key)
    else:
        raise CorruptBatchError(key, f"unknown compression type 0x{compression:02x}")
    size = len(block)
    if count * 4 > size:
        raise CorruptBatchError(key, f"fewer records than record_count {count} ({size}-byte block)")
    records: list[bytes] = []
    pos = 0
    for i in range(count):
        if pos + 4 > size:
            raise CorruptBatchError(key, f"fewer records than record_count {count} (record {i} missing)")
        (length,) = _U32.unpack_from(block, pos)
        pos += 4
        if pos + length > size:
            raise CorruptBatchError(key, f"record {i} ({length} bytes) runs past the block")
        records.append(block[pos : pos + length])
        pos += length
    if pos != size:
        raise CorruptBatchError(key, f"trailing bytes: {size - pos} bytes after {count} records")
    return records


# ---------------------------------------------------------------------------------------------
# Batch names (ULIDs)

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CROCKFORD_INDEX = {c: i for i, c in enumerate(_CROCKFORD)}
_BATCH_NAME = re.compile(r"([0-7][0-9A-HJKMNP-TV-Z]{25})\.batch")
BATCH_SUFFIX = ".batch"


class SupportsNowMs(Protocol):
    """Anything with a wall clock in milliseconds (see :class:`osqueue.queue.Clock`)."""

    def now_ms(self) -> int: ...


class SupportsRandBits(Protocol):
    """A source of random bits, like :class:`random.Random`."""

    def getrandbits(self, k: int, /) -> int: ...


def encode_ulid(time_ms: int, randomness: int) -> str:
    """Encodes a ULID: 48 bits of ms time and 80 random bits as 26 Crockford base32 characters."""
    if not 0 <= time_ms < (1 << 48):
        raise InvalidConfigError("time_ms", time_ms, "a ULID time is a 48-bit millisecond count")
    if not 0 <= randomness < (1 << 80):
        raise InvalidConfigError("randomness", randomness, "ULID randomness is 80 bits")
    value = (time_ms << 80) | randomness
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_batch_key(prefix: str, clock: SupportsNowMs, rng: SupportsRandBits | None = None) -> str:
    """A fresh batch key ``<prefix>/<ULID>.batch`` whose ULID time is ``clock.now_ms()``.

    Args:
        prefix: The data path prefix (may be empty).
        clock: Gives the creation time.
        rng: Gives the 80 random bits; the OS's secure source when None.
    """
    bits = rng.getrandbits(80) if rng is not None else secrets.randbits(80)
    name = encode_ulid(clock.now_ms(), bits) + BATCH_SUFFIX
    p = prefix.strip("/")
    return f"{p}/{name}" if p else name


def parse_batch_ulid_ms(name: str) -> int | None:
    """The creation time (ms) of a batch name ``<ULID>.batch``, or None if it is not one.

    Only the last ``/``-separated segment of ``name`` is looked at. The ULID must be exactly 26
    upper-case Crockford base32 characters whose first one is ``0``–``7``.
    """
    last = name.rsplit("/", 1)[-1]
    m = _BATCH_NAME.fullmatch(last)
    if m is None:
        return None
    value = 0
    for c in m.group(1)[:10]:
        value = (value << 5) | _CROCKFORD_INDEX[c]
    return value


def is_batch_name(name: str) -> bool:
    """Whether the last segment of ``name`` is a ``<ULID>.batch`` name."""
    return parse_batch_ulid_ms(name) is not None


# ---------------------------------------------------------------------------------------------
# Dequeue receipts (docs/format.md §5.1): which location held each recently dequeued sequence.

RECEIPTS_SUFFIX = ".dequeued"
MAX_RECEIPTS = 4096
_RECEIPTS_MAGIC = b"OSQR"


@dataclass(frozen=True)
class DequeueReceipts:
    """``locations[i]`` held sequence ``first + i`` in the manifest (and was dequeued).

    Every pair was read from a real manifest version, and a sequence is assigned once, so a
    receipt is true whoever wrote it; receipts may only be missing (never written, or trimmed).
    """

    first: int = 0
    locations: tuple[str, ...] = ()

    def location_at(self, sequence: int) -> str | None:
        i = sequence - self.first
        return self.locations[i] if 0 <= i < len(self.locations) else None

    def extended(self, removed: Sequence[tuple[int, str]], max_count: int = MAX_RECEIPTS) -> DequeueReceipts:
        """These receipts plus ``removed`` (consecutive ``(sequence, location)``), keeping the
        last ``max_count``. A gap before ``removed`` starts the receipts afresh."""
        if not removed:
            return self
        lo = removed[0][0]
        new = tuple(loc for _, loc in removed)
        if self.locations and self.first <= lo <= self.first + len(self.locations):
            merged = DequeueReceipts(self.first, self.locations[: lo - self.first] + new)
        else:
            merged = DequeueReceipts(lo, new)
        return merged.trimmed(max_count)

    def trimmed(self, max_count: int) -> DequeueReceipts:
        drop = max(0, len(self.locations) - max_count)
        return self if drop == 0 else DequeueReceipts(self.first + drop, self.locations[drop:])

    def encode(self) -> bytes:
        """``"OSQR"``, version u8 = 1, first u64, count u32, then per location u16 length + UTF-8 (LE)."""
        parts = [_RECEIPTS_MAGIC, struct.pack("<BQI", 1, self.first, len(self.locations))]
        for location in self.locations:
            b = location.encode()
            parts.append(struct.pack("<H", len(b)) + b)
        return b"".join(parts)

    @staticmethod
    def decode(data: bytes) -> DequeueReceipts | None:
        """None for bytes that are not receipts v1 (they are advisory: a reader then knows less)."""
        if len(data) < 17 or data[:4] != _RECEIPTS_MAGIC:
            return None
        version, first, count = struct.unpack_from("<BQI", data, 4)
        if version != 1 or first > MAX_SEQUENCE or count > (len(data) - 17) // 2:
            return None
        pos, locations = 17, []
        for _ in range(count):
            if pos + 2 > len(data):
                return None
            (n,) = struct.unpack_from("<H", data, pos)
            if pos + 2 + n > len(data):
                return None
            try:
                locations.append(data[pos + 2 : pos + 2 + n].decode("utf-8"))
            except UnicodeDecodeError:
                return None
            pos += 2 + n
        if pos != len(data) or first + len(locations) > MAX_SEQUENCE + 1:
            return None
        return DequeueReceipts(first, tuple(locations))


# -- segmented heads (docs/format.md §2.2) ----------------------------------------------------------
# The decoded view; writers and lazy readers work on the raw head (osqueue.manifest_head), as the JVM's
# ManifestHead does. The v1 functions above (read_manifest_footer, ...) refuse a version 2 head.

HEAD_VERSION = 2
"""The format version of a segmented manifest head."""
SEGMENTS_SUFFIX = ".segments"
"""Segment objects live under ``<manifest_path>.segments/``."""

_HEAD_TRAILER = struct.Struct("<IIQ")  # segments_len, segment_count, low_water
_REF_HEAD = struct.Struct("<QIIq")  # first_sequence, entry_count, byte_length, oldest_batch_ms
_REF_FIXED = _REF_HEAD.size + 32 + 2


@dataclass(frozen=True)
class SegmentRef:
    """A segment listed by a head: sequences ``first_sequence`` to ``last_sequence``.

    Attributes:
        oldest_batch_ms: Smallest ULID time of its locations (``2**63 - 1`` when none is a ULID name).
        sha256: The SHA-256 of the segment object.
        key: The segment object's key, relative to the store root.
    """

    first_sequence: int
    entry_count: int
    byte_length: int
    oldest_batch_ms: int
    sha256: bytes
    key: str

    @property
    def last_sequence(self) -> int:
        return self.first_sequence + self.entry_count - 1


@dataclass(frozen=True)
class ManifestHead:
    """A manifest object read as a head: a v1 manifest has no segments.

    Attributes:
        segments: The segment refs, contiguous, oldest first.
        low_water: The first queued sequence (with segments; sequences below it are dequeued).
        tail: The newest entries, held in the head itself.
        version: 1 or 2.
    """

    segments: list[SegmentRef]
    low_water: int
    tail: list[ManifestEntry]
    next_sequence: int
    epoch: int
    version: int

    @property
    def first_sequence(self) -> int:
        if self.segments:
            return self.low_water
        return self.tail[0].sequence if self.tail else self.next_sequence

    @property
    def depth(self) -> int:
        """How many entries are queued."""
        return self.next_sequence - self.first_sequence


def decode_head(data: bytes, key: str) -> ManifestHead:
    """Decodes a manifest object that may be a segmented head (version 2) or RFC v1.

    Raises:
        CorruptManifestError: An invariant of docs/format.md §2 or §2.2 does not hold.
        UnsupportedFormatVersionError: A version other than 1 or 2.
    """
    n = len(data)
    if n < MANIFEST_FOOTER_LEN or _FOOTER.unpack_from(data, n - MANIFEST_FOOTER_LEN)[3] != HEAD_VERSION:
        m = decode_manifest(data, key)
        return ManifestHead([], m.first_sequence, m.entries, m.next_sequence, m.epoch, FORMAT_VERSION)
    refs = parse_head_refs(data, key)
    segments, low_water, segments_len, trailer_at = refs.segments, refs.low_water, refs.segments_len, refs.trailer_at
    entry_count, next_sequence, epoch = refs.entry_count, refs.next_sequence, refs.epoch
    # The tail is a v1 entries region: decode it with its own footer (same checks, same messages).
    tail = decode_manifest(bytes(data[segments_len:trailer_at]) + _footer_bytes(entry_count, next_sequence, epoch), key)
    segments_end = segments[-1].last_sequence + 1
    if tail.entries and tail.entries[0].sequence != segments_end:
        raise CorruptManifestError(
            key, f"the tail starts at {tail.entries[0].sequence}, not where the last segment ends ({segments_end})"
        )
    if not tail.entries and segments_end != next_sequence:
        raise CorruptManifestError(key, f"the segments end at {segments_end - 1} but next_sequence is {next_sequence}")
    return ManifestHead(segments, low_water, tail.entries, next_sequence, epoch, HEAD_VERSION)


@dataclass(frozen=True)
class HeadRefs:
    """The fixed parts of a version 2 head: its refs (checked), trailer and footer fields."""

    segments: list[SegmentRef]
    low_water: int
    segments_len: int
    trailer_at: int
    entry_count: int
    next_sequence: int
    epoch: int


def parse_head_refs(data: bytes, key: str) -> HeadRefs:
    """Parses a version 2 head's refs, trailer and footer, checking every ref invariant of §2.2
    (the tail is not read: see :func:`decode_head`)."""
    n = len(data)
    if n < MANIFEST_FOOTER_LEN + _HEAD_TRAILER.size:
        raise CorruptManifestError(key, f"{n} bytes is shorter than a segmented head's trailer and footer")
    entry_count, next_sequence, epoch, _ = _FOOTER.unpack_from(data, n - MANIFEST_FOOTER_LEN)
    if next_sequence > MAX_SEQUENCE:
        raise CorruptManifestError(key, f"next_sequence {next_sequence} is at or above 2^63")
    trailer_at = n - MANIFEST_FOOTER_LEN - _HEAD_TRAILER.size
    segments_len, count, low_water = _HEAD_TRAILER.unpack_from(data, trailer_at)
    if segments_len > trailer_at:
        raise CorruptManifestError(key, f"segments_len {segments_len} runs past the head")
    if count == 0:
        raise CorruptManifestError(key, "a version 2 head lists no segment (a head without segments is version 1)")
    if count > segments_len // _REF_FIXED:
        raise CorruptManifestError(key, f"segment_count {count} cannot fit in {segments_len} bytes of refs")
    segments: list[SegmentRef] = []
    pos = 0
    for i in range(count):
        if segments_len - pos < _REF_FIXED:
            raise CorruptManifestError(key, f"segment ref {i} runs past the refs region")
        first, n_entries, length, oldest = _REF_HEAD.unpack_from(data, pos)
        sha = bytes(data[pos + _REF_HEAD.size : pos + _REF_HEAD.size + 32])
        (key_len,) = struct.unpack_from("<H", data, pos + _REF_FIXED - 2)
        pos += _REF_FIXED
        if key_len > segments_len - pos:
            raise CorruptManifestError(key, f"segment ref {i}: its key runs past the refs region")
        try:
            seg_key = bytes(data[pos : pos + key_len]).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptManifestError(key, f"segment ref {i}: key is not valid UTF-8") from None
        pos += key_len
        if n_entries == 0:
            raise CorruptManifestError(key, f"segment ref {i} ('{seg_key}') has no entries")
        if first + n_entries - 1 > MAX_SEQUENCE:
            raise CorruptManifestError(key, f"segment ref {i}: sequences out of range")
        if segments and first != segments[-1].last_sequence + 1:
            raise CorruptManifestError(
                key,
                f"segment ref {i} starts at {first}, not at {segments[-1].last_sequence + 1} (segments must be contiguous)",
            )
        segments.append(SegmentRef(first, n_entries, length, oldest, sha, seg_key))
    if pos != segments_len:
        raise CorruptManifestError(key, f"{segments_len - pos} unexpected bytes after the last segment ref")
    if not segments[0].first_sequence <= low_water <= segments[0].last_sequence:
        raise CorruptManifestError(
            key,
            f"low_water {low_water} is not in the first segment "
            f"({segments[0].first_sequence} to {segments[0].last_sequence})",
        )
    return HeadRefs(segments, low_water, segments_len, trailer_at, entry_count, next_sequence, epoch)


def decode_segment(data: bytes, ref: SegmentRef) -> list[ManifestEntry]:
    """Decodes a segment object (an RFC v1 manifest) read for ``ref``, checking it is the one listed.

    Raises:
        CorruptManifestError: Naming the segment, when its length, SHA-256 or sequences differ from
            the ref, or it does not decode.
    """
    if len(data) != ref.byte_length:
        raise CorruptManifestError(ref.key, f"segment: {len(data)} bytes, but the head lists {ref.byte_length}")
    if hashlib.sha256(data).digest() != ref.sha256:
        raise CorruptManifestError(ref.key, "segment: its SHA-256 differs from the head's ref")
    m = decode_manifest(data, ref.key)
    if len(m.entries) != ref.entry_count or m.first_sequence != ref.first_sequence:
        raise CorruptManifestError(
            ref.key,
            f"segment: holds {len(m.entries)} entries from {m.first_sequence}, "
            f"but the head lists {ref.entry_count} from {ref.first_sequence}",
        )
    return m.entries
