"""The manifest's binary codec: footer, entries, whole manifests (JVM: ``ManifestCodec``)."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from osqueue.errors import CorruptManifestError, InvalidConfigError, UnsupportedFormatVersionError
from osqueue.format.batch_integrity import seal
from osqueue.format.manifest import MAX_SEQUENCE, MAX_START_INDEX, Manifest, ManifestEntry, MetadataItem, NewEntry

FORMAT_VERSION = 1
"""The only format version this osqueue reads and writes."""

MANIFEST_FOOTER_LEN = 22

U16_MAX = 0xFFFF
U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1

MANIFEST_FOOTER = struct.Struct("<IQQH")  # entry_count, next_sequence, epoch, version
_ENTRY_HEAD = struct.Struct("<IQH")  # entry_len, sequence, location_len
U32 = struct.Struct("<I")
_META_HEAD = struct.Struct("<IqI")  # start_index, ingestion_time_ms, payload_len
_ENTRY_FIXED = 8 + 2 + 4  # sequence + location_len + metadata_count
_META_FIXED = 4 + 8 + 4


@dataclass(frozen=True)
class ManifestFooter:
    """The 22-byte manifest footer."""

    entry_count: int
    next_sequence: int
    epoch: int


# Manifest


def footer_bytes(entry_count: int, next_sequence: int, epoch: int) -> bytes:
    return MANIFEST_FOOTER.pack(entry_count, next_sequence, epoch, FORMAT_VERSION)


def empty_manifest(epoch: int = 0) -> bytes:
    """The empty manifest: the footer alone (22 bytes)."""
    return footer_bytes(0, 0, epoch)


def read_manifest_footer(data: bytes, key: str, reads: tuple[int, ...] = (FORMAT_VERSION,)) -> ManifestFooter:
    """Validates and returns a manifest's footer without looking at its entries.

    Args:
        data: The whole manifest object.
        key: The object's key, for error messages.
        reads: The versions the caller reads, named if the version is not 1 (a head reader
            handles version 2 before calling this).

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
    entry_count, next_sequence, epoch, version = MANIFEST_FOOTER.unpack_from(data, n - MANIFEST_FOOTER_LEN)
    if version != FORMAT_VERSION:
        raise UnsupportedFormatVersionError(key, "manifest", version, reads)
    if next_sequence > MAX_SEQUENCE:
        raise CorruptManifestError(key, f"next_sequence {next_sequence} is at or above 2^63")
    return ManifestFooter(entry_count, next_sequence, epoch)


def _check_entries_fit(footer: ManifestFooter, region_len: int, key: str) -> None:
    # Every entry takes at least 4 + 14 bytes: refuse counts the region cannot hold before looping.
    if footer.entry_count * (4 + _ENTRY_FIXED) > region_len:
        raise CorruptManifestError(
            key, f"{footer.entry_count} entries cannot fit in the {region_len}-byte entries region"
        )


def decode_manifest(data: bytes, key: str, reads: tuple[int, ...] = (FORMAT_VERSION,)) -> Manifest:
    """Decodes a whole manifest object.

    Args:
        data: The object's bytes.
        key: The object's key, named in errors.
        reads: As for :func:`read_manifest_footer`.

    Returns:
        The manifest.

    Raises:
        CorruptManifestError: See the table in docs/format.md §2.
        UnsupportedFormatVersionError: The version is not 1.
    """
    footer = read_manifest_footer(data, key, reads)
    end = len(data) - MANIFEST_FOOTER_LEN
    _check_entries_fit(footer, end, key)
    mv = memoryview(data)
    entries: list[ManifestEntry] = []
    pos = 0
    count = footer.entry_count
    for i in range(count):
        if pos + 4 > end:
            raise CorruptManifestError(key, f"entry {i} of {count}: entry_len field runs past the entries region")
        (entry_len,) = U32.unpack_from(data, pos)
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
        (meta_count,) = U32.unpack_from(data, p)
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


def encode_entry(
    sequence: int,
    location: str,
    metadata: Sequence[MetadataItem],
    extension: bytes = b"",
    seal_integrity: bool = True,
) -> bytes:
    """Encodes one manifest entry (``entry_len`` included). An entry-integrity record in
    ``extension`` (docs/format.md §2.1) covers the sequence: its ``entry_crc32`` is computed here,
    unless ``seal_integrity`` is False (an entry decoded before, carried byte for byte).

    Raises:
        InvalidConfigError: A field does not fit its wire type.
    """
    loc = location.encode("utf-8")
    if len(loc) > U16_MAX:
        raise InvalidConfigError("location", location[:80], "a location is at most 65535 UTF-8 bytes")
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise InvalidConfigError("sequence", sequence, "sequences are in [0, 2^63)")
    if len(metadata) > U32_MAX:
        raise InvalidConfigError("metadata", len(metadata), "at most 2^32 - 1 metadata items per entry")
    parts = [b"", struct.pack("<QH", sequence, len(loc)), loc, U32.pack(len(metadata))]
    for m in metadata:
        if not 0 <= m.start_index <= MAX_START_INDEX:
            raise InvalidConfigError(
                "start_index", m.start_index, "must be below 2^31: no batch holds that many records (docs/format.md §2)"
            )
        if not I64_MIN <= m.ingestion_time_ms <= I64_MAX:
            raise InvalidConfigError("ingestion_time_ms", m.ingestion_time_ms, "ingestion_time_ms is an i64")
        if len(m.payload) > U32_MAX:
            raise InvalidConfigError("payload", len(m.payload), "a metadata payload is at most 2^32 - 1 bytes")
        parts.append(_META_HEAD.pack(m.start_index, m.ingestion_time_ms, len(m.payload)))
        parts.append(bytes(m.payload))
    parts.append(bytes(extension))
    body_len = sum(len(p) for p in parts)
    if body_len > U32_MAX:
        raise InvalidConfigError("entry", body_len, "an entry is at most 2^32 - 1 bytes")
    parts[0] = U32.pack(body_len)
    encoded = b"".join(parts)
    return seal(encoded, len(encoded) - len(extension)) if seal_integrity and extension else encoded


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
    if not 0 <= manifest.epoch <= U64_MAX:
        raise InvalidConfigError("epoch", manifest.epoch, "the epoch is a u64")
    if len(entries) > U32_MAX:
        raise InvalidConfigError("entries", len(entries), "at most 2^32 - 1 entries")
    body = b"".join(encode_entry(e.sequence, e.location, e.metadata, e.extension, False) for e in entries)
    return body + footer_bytes(len(entries), manifest.next_sequence, manifest.epoch)


def walk_headers(raw: bytes, key: str) -> Iterator[tuple[int, int, int, int]]:
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


def encode_new_entry(sequence: int, entry: NewEntry) -> bytes:
    """Encodes an entry to append at ``sequence`` (its integrity record, if any, computed for it)."""
    return encode_entry(sequence, entry[0], entry[1], entry[2] if len(entry) == 3 else b"")
