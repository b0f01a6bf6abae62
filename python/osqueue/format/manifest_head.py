"""The segmented manifest's head: segment references and the tail (JVM: ``ManifestHead``)."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from osqueue.errors import CorruptManifestError
from osqueue.format.manifest import MAX_SEQUENCE, ManifestEntry
from osqueue.format.manifest_codec import _FOOTER, FORMAT_VERSION, MANIFEST_FOOTER_LEN, _footer_bytes, decode_manifest

# -- segmented heads (docs/format.md §2.2) ----------------------------------------------------------
# Read only for now: the codec mirrors the JVM's ManifestHead; Python producers and consumers still
# refuse a version 2 head (read_manifest_footer raises UnsupportedFormatVersionError).

HEAD_VERSION = 2
"""The format version of a segmented manifest head."""

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
    if n < MANIFEST_FOOTER_LEN + _HEAD_TRAILER.size:
        raise CorruptManifestError(key, f"{n} bytes is shorter than a segmented head's trailer and footer")
    entry_count, next_sequence, epoch, _ = _FOOTER.unpack_from(data, n - MANIFEST_FOOTER_LEN)
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
