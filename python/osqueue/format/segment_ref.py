"""A ref to a segment or index object, as a segmented head (docs/format.md §2.2) and an index
object list them: the ref's fields, and the refs region's codec. (JVM: ``SegmentRef`` and
``ManifestHead.decodeRefs`` / ``encodeRefs`` in ManifestHead.scala; a module of its own here to keep
``manifest_head`` under the size cap.)"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from osqueue.errors import CorruptManifestError, InvalidObjectKeyError
from osqueue.format.manifest import MAX_SEQUENCE
from osqueue.format.manifest_codec import U32_MAX, U64_MAX
from osqueue.store.object_store import validate_key

_REF_HEAD = struct.Struct("<QQBIq")  # first_sequence, entry_count, level, byte_length, oldest_batch_ms
REF_FIXED_SIZE = _REF_HEAD.size + 32 + 2
"""The bytes of a ref before its key (63)."""
_REF_FIXED = REF_FIXED_SIZE
MAX_LEVEL = 32
"""The highest level a ref may have (a tree of 2^32 segments at the smallest fan-out)."""


@dataclass(frozen=True)
class SegmentRef:
    """A ref listed by a head or an index object: sequences ``first_sequence`` to ``last_sequence``.

    Attributes:
        entry_count: The entries it covers (an index ref: its whole subtree's).
        level: 0 for a segment object; L >= 1 for an index object listing refs of level L - 1.
        byte_length: The size of the object.
        oldest_batch_ms: Smallest ULID time of its locations (``2**63 - 1`` when none is a ULID name).
        sha256: The SHA-256 of the object.
        key: The object's key, relative to the store root.
    """

    first_sequence: int
    entry_count: int
    level: int
    byte_length: int
    oldest_batch_ms: int
    sha256: bytes
    key: str

    @property
    def last_sequence(self) -> int:
        return self.first_sequence + self.entry_count - 1

    @property
    def is_index(self) -> bool:
        return self.level > 0


def decode_refs(data: bytes, start: int, end: int, count: int, key: str) -> list[SegmentRef]:
    """``count`` refs filling ``data[start:end]`` exactly (a head's or an index object's), each checked
    and contiguous with the one before."""
    if count > (end - start) // _REF_FIXED:
        raise CorruptManifestError(key, f"{count} refs cannot fit in {end - start} bytes of refs")
    refs: list[SegmentRef] = []
    pos = start
    for i in range(count):
        if end - pos < _REF_FIXED:
            raise CorruptManifestError(key, f"ref {i} runs past the refs region")
        first, n_entries, level, length, oldest = _REF_HEAD.unpack_from(data, pos)
        sha = bytes(data[pos + _REF_HEAD.size : pos + _REF_HEAD.size + 32])
        (key_len,) = struct.unpack_from("<H", data, pos + _REF_FIXED - 2)
        pos += _REF_FIXED
        if key_len > end - pos:
            raise CorruptManifestError(key, f"ref {i}: its key runs past the refs region")
        try:
            ref_key = bytes(data[pos : pos + key_len]).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptManifestError(key, f"ref {i}: key is not valid UTF-8") from None
        try:
            validate_key(ref_key)  # as the JVM's ObjectKeys.validate: a ref never points outside the root
        except InvalidObjectKeyError as e:
            raise CorruptManifestError(key, f"ref {i}: {e}") from None
        pos += key_len
        if n_entries == 0:
            raise CorruptManifestError(key, f"ref {i} ('{ref_key}') has no entries")
        if first + n_entries - 1 > MAX_SEQUENCE:
            raise CorruptManifestError(key, f"ref {i}: sequences out of range")
        if level > MAX_LEVEL:
            raise CorruptManifestError(key, f"ref {i} ('{ref_key}') has level {level}, above {MAX_LEVEL}")
        if refs and first != refs[-1].last_sequence + 1:
            raise CorruptManifestError(
                key,
                f"ref {i} starts at {first}, not at {refs[-1].last_sequence + 1} (refs must be contiguous)",
            )
        refs.append(SegmentRef(first, n_entries, level, length, oldest, sha, ref_key))
    if pos != end:
        raise CorruptManifestError(key, f"{end - pos} unexpected bytes after the last ref")
    return refs


def encode_refs(refs: Sequence[SegmentRef]) -> bytes:
    """The refs region of a head or an index object, refs back to back."""
    parts = []
    for r in refs:
        k = r.key.encode("utf-8")
        if (
            len(r.sha256) != 32
            or len(k) > 0xFFFF
            or r.byte_length > U32_MAX
            or not 1 <= r.entry_count <= U64_MAX
            or not 0 <= r.level <= MAX_LEVEL
        ):
            raise CorruptManifestError(r.key, "ref does not fit its wire format")
        parts.append(_REF_HEAD.pack(r.first_sequence, r.entry_count, r.level, r.byte_length, r.oldest_batch_ms))
        parts += [r.sha256, struct.pack("<H", len(k)), k]
    return b"".join(parts)
