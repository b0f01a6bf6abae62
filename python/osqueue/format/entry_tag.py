"""The sink's entry tag in a manifest entry's extension, and the delivered-writers filter (JVM: ``EntryTag``)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from osqueue.errors import InvalidConfigError
from osqueue.format.batch_integrity import sink_tag_bytes
from osqueue.format.manifest import ManifestEntry
from osqueue.format.manifest_codec import I64_MAX, I64_MIN, U16_MAX

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
        if len(w) > U16_MAX:
            raise InvalidConfigError("writer_id", self.writer_id[:80], "a writer id is at most 65535 UTF-8 bytes")
        if len(a) > 0xFF:
            raise InvalidConfigError("attempt_id", self.attempt_id[:80], "an attempt id is at most 255 UTF-8 bytes")
        if not I64_MIN <= self.batch_id <= I64_MAX:
            raise InvalidConfigError("batch_id", self.batch_id, "a batch id is an i64")
        return _TAG_HEAD.pack(_TAG_MAGIC, _TAG_SINK, len(w)) + w + _TAG_MID.pack(self.batch_id, len(a)) + a

    @staticmethod
    def decode(extension: bytes) -> EntryTag | None:
        """The tag in an entry's extension bytes, or None when they are not exactly one
        (readers ignore other extensions, as RFC 0001 readers ignore all of them). The tag is the
        last of the extension records (docs/format.md §2.1), after any integrity record."""
        found = sink_tag_bytes(bytes(extension)) if extension else None
        if found is None:
            return None
        ext = found
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

    def admit_all(self, entries: Iterable[ManifestEntry]) -> Iterator[Admission]:
        """The reader rule folded over ``entries`` in order from this state, lazily (one entry
        read per admission): each entry, whether it is delivered, and the state after it. Every
        reader threads the sink-copy state through what it reads with this (JVM: ``admitAll``)."""
        state = self
        for entry in entries:
            admitted, state = state.admit(EntryTag.decode(entry.extension))
            yield Admission(entry, admitted, state)


@dataclass(frozen=True)
class Admission:
    """One entry of a read in order: whether the reader rule delivers it, and the sink-copy
    state after it (JVM: ``EntryTag.Admission``)."""

    entry: ManifestEntry
    admitted: bool
    after: Delivered
