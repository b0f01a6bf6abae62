"""Index objects: the second level of a segmented head (docs/format.md §2.2; JVM: ``IndexObject``).

An index object ``<manifest_path>.segments/<ULID>.index`` lists refs of level L - 1 that a producer
folded into it, byte for byte as the head held them, and a footer ``ref_count u32 | level u8 |
version u16 = 2``. It is never rewritten; a reader checks it against the ref that lists it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from osqueue.errors import CorruptManifestError
from osqueue.format.manifest import ManifestEntry
from osqueue.format.manifest_codec import decode_manifest
from osqueue.format.segment_ref import MAX_LEVEL, SegmentRef, decode_refs, encode_refs

INDEX_VERSION = 2
"""The version in an index object's footer."""
INDEX_FOOTER_SIZE = 7
"""ref_count u32, level u8, version u16."""
_INDEX_FOOTER = struct.Struct("<IBH")


@dataclass(frozen=True)
class FoldedIndex:
    """An index object a producer is about to store (as :class:`~osqueue.format.manifest_head.SealedTail`
    is for a segment): its bytes and what its ref records."""

    data: bytes
    first_sequence: int
    entry_count: int
    level: int
    oldest_batch_ms: int

    def ref(self, key: str) -> SegmentRef:
        """The ref of these bytes stored under ``key``."""
        return SegmentRef(
            self.first_sequence,
            self.entry_count,
            self.level,
            len(self.data),
            self.oldest_batch_ms,
            hashlib.sha256(self.data).digest(),
            key,
        )


def encode_index(refs: Sequence[SegmentRef], level: int) -> bytes:
    """An index object of ``level`` listing ``refs``: the refs back to back and the footer."""
    return encode_refs(refs) + _INDEX_FOOTER.pack(len(refs), level, INDEX_VERSION)


def fold_index(refs: Sequence[SegmentRef]) -> FoldedIndex:
    """The index object (level L + 1) of ``refs``: at least 2, contiguous, all of level L < 32."""
    level = refs[0].level
    if len(refs) < 2 or level >= MAX_LEVEL or any(r.level != level for r in refs):
        raise ValueError(f"cannot fold {len(refs)} refs of levels {sorted({r.level for r in refs})} into an index")
    for a, b in zip(refs, refs[1:]):
        if b.first_sequence != a.last_sequence + 1:
            raise ValueError(f"cannot fold refs that are not contiguous ({a.last_sequence} then {b.first_sequence})")
    return FoldedIndex(
        encode_index(refs, level + 1),
        refs[0].first_sequence,
        sum(r.entry_count for r in refs),
        level + 1,
        min(r.oldest_batch_ms for r in refs),
    )


def decode_index(data: bytes, ref: SegmentRef) -> list[SegmentRef]:
    """Decodes an index object read for ``ref`` (docs/format.md §2.2): its refs, checked against ``ref``.

    Raises:
        CorruptManifestError: Naming the index object, when its length or SHA-256 differ from the ref,
            its footer's level is not the ref's, it lists fewer than 2 refs, or they are not contiguous
            from the ref's first sequence, not one level below, do not sum to its entry count or their
            oldest batch time is not the ref's.
    """
    key = ref.key
    if ref.level < 1:
        raise CorruptManifestError(key, f"read as an index object, but its ref has level {ref.level}")
    if len(data) != ref.byte_length:
        raise CorruptManifestError(key, f"index object: {len(data)} bytes, but its ref lists {ref.byte_length}")
    if hashlib.sha256(data).digest() != ref.sha256:
        raise CorruptManifestError(key, "index object: its SHA-256 differs from its ref's")
    if len(data) < INDEX_FOOTER_SIZE:
        raise CorruptManifestError(key, f"index object: {len(data)} bytes is shorter than its footer")
    count, level, version = _INDEX_FOOTER.unpack_from(data, len(data) - INDEX_FOOTER_SIZE)
    if version != INDEX_VERSION:
        raise CorruptManifestError(key, f"index object: version {version}, not {INDEX_VERSION}")
    if level != ref.level:
        raise CorruptManifestError(key, f"index object of level {level}, but its ref has level {ref.level}")
    if count < 2:
        raise CorruptManifestError(key, f"index object lists {count} refs (at least 2)")
    refs = decode_refs(data, 0, len(data) - INDEX_FOOTER_SIZE, count, key)
    if refs[0].first_sequence != ref.first_sequence:
        raise CorruptManifestError(
            key, f"index object starts at {refs[0].first_sequence}, but its ref at {ref.first_sequence}"
        )
    wrong = next((r for r in refs if r.level != level - 1), None)
    if wrong is not None:
        raise CorruptManifestError(
            key, f"index object of level {level} lists '{wrong.key}' of level {wrong.level}, not {level - 1}"
        )
    total = sum(r.entry_count for r in refs)
    if total != ref.entry_count:
        raise CorruptManifestError(key, f"index object covers {total} entries, but its ref {ref.entry_count}")
    oldest = min(r.oldest_batch_ms for r in refs)
    if oldest != ref.oldest_batch_ms:
        raise CorruptManifestError(
            key, f"index object's oldest batch time is {oldest}, but its ref's {ref.oldest_batch_ms}"
        )
    return refs


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
    if ref.level != 0:
        raise CorruptManifestError(ref.key, f"read as a segment, but its ref has level {ref.level}")
    m = decode_manifest(data, ref.key)
    if len(m.entries) != ref.entry_count or m.first_sequence != ref.first_sequence:
        raise CorruptManifestError(
            ref.key,
            f"segment: holds {len(m.entries)} entries from {m.first_sequence}, "
            f"but the head lists {ref.entry_count} from {ref.first_sequence}",
        )
    return m.entries
