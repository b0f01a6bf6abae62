"""The segmented manifest's head and its index objects (docs/format.md §2.2, §2.3; JVM: ``ManifestHead``).

:func:`decode_head` decodes a manifest object (RFC v1, a v2 head of refs and a tail, or a v3 head with
sections) whole; :class:`RawHead` is what writers and lazy readers work on: parsing reads the footer,
sections and refs only, the edits copy the tail byte for byte and never read a segment. Refs form a
tree (level 0 segments, level L >= 1 index objects); readers walk it with ``osqueue.queue.segment_tree``."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from osqueue.errors import CorruptManifestError
from osqueue.format.batch_integrity import integrity_of
from osqueue.format.batch_names import parse_batch_ulid_ms
from osqueue.format.head_sections import (
    HEAD_SECTIONS_VERSION,
    HEAD_TRAILER,
    NO_SECTIONS,
    HeadSections,
    frame_head,
    parse_sections_frame,
)
from osqueue.format.manifest import MAX_SEQUENCE, ManifestEntry, NewEntry
from osqueue.format.manifest_codec import (
    FORMAT_VERSION,
    MANIFEST_FOOTER,
    MANIFEST_FOOTER_LEN,
    U32_MAX,
    U64_MAX,
    decode_manifest,
    encode_entry,
    encode_new_entry,
    footer_bytes,
    read_manifest_footer,
)
from osqueue.format.segment_chunks import NO_BATCH_TIME, EntryRun, cut_chunks, segment_run
from osqueue.format.segment_ref import MAX_LEVEL, REF_FIXED_SIZE, SegmentRef, decode_refs, encode_refs

# The v1 functions of manifest_codec and manifest_edits (read_manifest_footer, ...) refuse a version 2 head.

HEAD_VERSION = 2
"""The format version of a segmented manifest head."""
READ_VERSIONS = (FORMAT_VERSION, HEAD_VERSION, HEAD_SECTIONS_VERSION)
"""The manifest versions a head reader reads (named when it refuses another)."""


@dataclass(frozen=True)
class ManifestHead:
    """A manifest object read as a head: a v1 manifest has no refs.

    Attributes:
        refs: The head's refs (segments and index objects), contiguous, oldest first; the first is a segment.
        low_water: The first queued sequence (with refs; sequences below it are dequeued).
        tail: The newest entries, held in the head itself.
        version: 1, 2 or 3 (a head with sections, §2.3).
        sections: A version 3 head's sections (empty otherwise).
    """

    refs: list[SegmentRef]
    low_water: int
    tail: list[ManifestEntry]
    next_sequence: int
    epoch: int
    version: int
    sections: HeadSections = NO_SECTIONS

    @property
    def first_sequence(self) -> int:
        if self.refs or self.version == HEAD_SECTIONS_VERSION:
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
    version = MANIFEST_FOOTER.unpack_from(data, n - MANIFEST_FOOTER_LEN)[3] if n >= MANIFEST_FOOTER_LEN else 0
    if version not in (HEAD_VERSION, HEAD_SECTIONS_VERSION):
        m = decode_manifest(data, key, READ_VERSIONS)
        return ManifestHead([], m.first_sequence, m.entries, m.next_sequence, m.epoch, FORMAT_VERSION)
    parsed = parse_head_refs(data, key)
    refs, low_water, segments_len, trailer_at = parsed.refs, parsed.low_water, parsed.segments_len, parsed.trailer_at
    entry_count, next_sequence, epoch = parsed.entry_count, parsed.next_sequence, parsed.epoch
    # The tail is a v1 entries region: decode it with its own footer (same checks, same messages).
    tail = decode_manifest(
        bytes(data[parsed.sections_len + segments_len : trailer_at]) + footer_bytes(entry_count, next_sequence, epoch),
        key,
    )
    refs_end = refs[-1].last_sequence + 1 if refs else tail.first_sequence  # v3 without refs: parse_head_refs checked
    if tail.entries and tail.entries[0].sequence != refs_end:
        raise CorruptManifestError(
            key, f"the tail starts at {tail.entries[0].sequence}, not where the last ref ends ({refs_end})"
        )
    if not tail.entries and refs_end != next_sequence:
        raise CorruptManifestError(key, f"the refs end at {refs_end - 1} but next_sequence is {next_sequence}")
    return ManifestHead(refs, low_water, tail.entries, next_sequence, epoch, version, parsed.sections)


@dataclass(frozen=True)
class HeadRefs:
    """The fixed parts of a version 2 or 3 head: its refs (checked), sections, trailer and footer fields."""

    refs: list[SegmentRef]
    low_water: int
    segments_len: int
    trailer_at: int
    entry_count: int
    next_sequence: int
    epoch: int
    sections: HeadSections = NO_SECTIONS
    sections_len: int = 0


def parse_head_refs(data: bytes, key: str) -> HeadRefs:
    """Parses a version 2 head's refs, trailer and footer, checking every ref invariant of §2.2
    (the tail is not read: see :func:`decode_head`)."""
    n = len(data)
    if n >= MANIFEST_FOOTER_LEN and data[-2:] == HEAD_SECTIONS_VERSION.to_bytes(2, "little"):
        return _parse_head_v3(data, key)
    if n < MANIFEST_FOOTER_LEN + HEAD_TRAILER.size:
        raise CorruptManifestError(key, f"{n} bytes is shorter than a segmented head's trailer and footer")
    entry_count, next_sequence, epoch, _ = MANIFEST_FOOTER.unpack_from(data, n - MANIFEST_FOOTER_LEN)
    if next_sequence > MAX_SEQUENCE:
        raise CorruptManifestError(key, f"next_sequence {next_sequence} is at or above 2^63")
    trailer_at = n - MANIFEST_FOOTER_LEN - HEAD_TRAILER.size
    segments_len, count, low_water = HEAD_TRAILER.unpack_from(data, trailer_at)
    if segments_len > trailer_at:
        raise CorruptManifestError(key, f"segments_len {segments_len} runs past the head")
    if count == 0:
        raise CorruptManifestError(key, "a version 2 head lists no segment (a head without segments is version 1)")
    refs = decode_refs(data, 0, segments_len, count, key)
    _check_first_ref(refs, low_water, key)
    return HeadRefs(refs, low_water, segments_len, trailer_at, entry_count, next_sequence, epoch)


def _parse_head_v3(data: bytes, key: str) -> HeadRefs:
    """A version 3 head (§2.3): its frame (CRC, sections, trailer) checked by ``head_sections``, then
    its refs as version 2's."""
    f = parse_sections_frame(data, key)
    refs: list[SegmentRef] = []
    if f.segment_count:
        refs = decode_refs(data, f.sections_len, f.sections_len + f.segments_len, f.segment_count, key)
        _check_first_ref(refs, f.low_water, key)
    fields = (f.low_water, f.segments_len, f.trailer_at, f.entry_count, f.next_sequence, f.epoch)
    return HeadRefs(refs, *fields, f.sections, f.sections_len)  # fmt: skip


def _check_first_ref(refs: list[SegmentRef], low_water: int, key: str) -> None:
    if refs[0].level != 0:
        raise CorruptManifestError(
            key, f"the first ref ('{refs[0].key}') is an index of level {refs[0].level}, not a segment"
        )
    if not refs[0].first_sequence <= low_water <= refs[0].last_sequence:
        raise CorruptManifestError(
            key,
            f"low_water {low_water} is not in the first segment ({refs[0].first_sequence} to {refs[0].last_sequence})",
        )


_Children = Callable[[SegmentRef], Sequence[SegmentRef]]
"""Reads an index object's refs (the dequeue's expansion)."""
_RemovedBytes = Callable[[int, int], int]
"""Σ ``byte_length`` (entry integrity records) of the entries in ``[start, end)``: a cut's ``queued_bytes``."""

# -- the raw head: what writers and lazy readers work on ----------------------------------------

DEFAULT_SEGMENT_ENTRIES = 2048
"""K, as the JVM's ``ManifestHead.DefaultSegmentEntries``: a queue that never holds more stays RFC v1."""
MAX_SEGMENT_ENTRIES = (1 << 31) - 1
"""The largest K (the JVM's ``Int.MaxValue``): it keeps every queue v1, for RFC v1 readers."""

_ENTRY_HEAD = struct.Struct("<IQH")  # entry_len, sequence, location_len
_ENTRY_FIXED = 8 + 2 + 4


@dataclass(frozen=True)
class SealedTail:
    """The tail a producer seals: the bytes of the segment object (an RFC v1 manifest of the entries)."""

    data: bytes
    first_sequence: int
    entry_count: int
    oldest_batch_ms: int

    def ref(self, key: str) -> SegmentRef:
        """The ref of these bytes stored under ``key``."""
        return SegmentRef(
            self.first_sequence,
            self.entry_count,
            0,
            len(self.data),
            self.oldest_batch_ms,
            hashlib.sha256(self.data).digest(),
            key,
        )


@dataclass(frozen=True)
class _Span:
    sequence: int
    start: int
    end: int
    location: str


class RawHead:
    """A parsed manifest object (v1, or a v2 head): footer, refs and where its tail lies in ``raw``.

    Build it with :func:`parse_head`.
    """

    def __init__(
        self,
        raw: bytes,
        key: str,
        version: int,
        entry_count: int,
        next_sequence: int,
        epoch: int,
        refs: list[SegmentRef],
        low_water: int,
        tail_from: int,
        tail_until: int,
        sections: HeadSections = NO_SECTIONS,
        refs_from: int = 0,
    ) -> None:
        self.raw = raw
        self.key = key
        self.version = version
        self.tail_size = entry_count
        self.next_sequence = next_sequence
        self.epoch = epoch
        self.refs = refs
        self.low_water = low_water
        self._tail_from = tail_from
        self._tail_until = tail_until
        self.sections = sections
        self._refs_from = refs_from

    @property
    def is_segmented(self) -> bool:
        return bool(self.refs)

    @property
    def tail_first_sequence(self) -> int:
        """The first tail entry's sequence (``next_sequence`` when the tail is empty)."""
        return self.next_sequence - self.tail_size

    @property
    def first_sequence(self) -> int:
        """The first queued sequence, or ``next_sequence`` when the queue is empty."""
        return self.low_water if self.refs or self.version == HEAD_SECTIONS_VERSION else self.tail_first_sequence

    @property
    def depth(self) -> int:
        """How many entries are queued."""
        return self.next_sequence - self.first_sequence

    # -- the tail ----------------------------------------------------------------------------

    def _walk(self, count: int, keep_from: int = 0) -> list[_Span]:
        """The first ``count`` tail entries' headers (checked: in the tail region, contiguous); only
        those from sequence ``keep_from`` on are kept (their locations decoded)."""
        raw, key, end = self.raw, self.key, self._tail_until
        spans: list[_Span] = []
        pos = self._tail_from
        expected = self.tail_first_sequence
        for i in range(count):
            if pos + 4 + _ENTRY_FIXED > end:
                raise CorruptManifestError(key, f"tail entry {i} of {self.tail_size}: header runs past the tail")
            entry_len, sequence, location_len = _ENTRY_HEAD.unpack_from(raw, pos)
            entry_end = pos + 4 + entry_len
            if entry_end > end or _ENTRY_FIXED + location_len > entry_len:
                raise CorruptManifestError(key, f"tail entry {i}: entry_len {entry_len} does not fit")
            if sequence != expected + i:
                raise CorruptManifestError(
                    key,
                    f"tail entry {i} has sequence {sequence}, not {expected + i} (the tail ends at next_sequence - 1)",
                )
            if sequence >= keep_from:
                try:
                    location = raw[pos + 14 : pos + 14 + location_len].decode("utf-8")
                except UnicodeDecodeError:
                    raise CorruptManifestError(key, f"tail entry {i}: location is not valid UTF-8") from None
                spans.append(_Span(sequence, pos, entry_end, location))
            pos = entry_end
        if count == self.tail_size and pos != end:
            raise CorruptManifestError(key, f"{end - pos} bytes left between the last entry and the footer")
        return spans

    @cached_property
    def _spans(self) -> list[_Span]:
        return self._walk(self.tail_size)

    def tail_locations(self) -> list[tuple[int, str]]:
        """``(sequence, location)`` of the tail's entries (no metadata decoded)."""
        return [(s.sequence, s.location) for s in self._spans]

    def tail_locations_from(self, sequence: int) -> list[tuple[int, str]]:
        """``(sequence, location)`` of the tail's entries from ``sequence`` on (every header is still
        walked and checked, but only these are kept: a v1 manifest can be deep)."""
        if sequence <= self.tail_first_sequence:
            return self.tail_locations()
        return [(s.sequence, s.location) for s in self._walk(self.tail_size, keep_from=sequence)]

    def tail_locations_through(self, sequence: int) -> list[tuple[int, str]]:
        """``(sequence, location)`` of the tail's entries up to ``sequence``: only their headers are
        walked (a dequeue's receipts cost O(removed), as the v1 dequeue)."""
        count = min(self.tail_size, max(0, sequence - self.tail_first_sequence + 1))
        spans = self._spans if count == self.tail_size else self._walk(count)
        return [(s.sequence, s.location) for s in spans]

    def tail_location_at(self, sequence: int) -> str | None:
        i = sequence - self.tail_first_sequence
        return self._spans[i].location if 0 <= i < self.tail_size else None

    def tail_entries(self) -> list[ManifestEntry]:
        """The tail's entries, fully decoded (and checked as a v1 manifest is)."""
        region = self.raw[self._tail_from : self._tail_until]
        footer = MANIFEST_FOOTER.pack(self.tail_size, self.next_sequence, self.epoch, FORMAT_VERSION)
        return decode_manifest(region + footer, self.key).entries

    def oldest_referenced_batch_ms(self) -> int | None:
        """The oldest ULID time of any referenced batch: tail entries and refs (an index ref's is its
        subtree's: GC's rule 3, §6)."""
        times = [t for s in self._spans if (t := parse_batch_ulid_ms(s.location)) is not None]
        times += [r.oldest_batch_ms for r in self.refs if r.oldest_batch_ms != NO_BATCH_TIME]
        return min(times) if times else None

    # -- edits ---------------------------------------------------------------------------------

    def appended(
        self,
        entries: Sequence[NewEntry],
        max_tail: int,
        seal: Callable[[SealedTail], SegmentRef],
        fold: Callable[[Sequence[SegmentRef]], SegmentRef],
        seal_all: Callable[[Sequence[SealedTail]], Sequence[SegmentRef]] | None = None,
        read_segment: Callable[[SegmentRef], bytes] | None = None,
        align: int | None = None,
    ) -> tuple[bytes, int]:
        """Appends entries (``NewEntry``: location, metadata and an optional extension, docs/format.md
        §2.1) at ``next_sequence``. When the tail would exceed
        ``max_tail`` (K) entries, the current tail is sealed first, in chunks of exactly K entries aligned
        on ``align`` (default: the tail's first sequence; :mod:`osqueue.format.segment_chunks`):
        ``seal_all`` (default: ``seal`` one by one) stores them and returns their refs (a reused object may
        start below the tail's first sequence when a dequeue took part of it since), and the new entries
        become the whole tail. After each new ref the refs are folded (F = ``fanout(K)``, :func:`_folded`).
        With ``read_segment`` (the checked bytes of a ref), a segment ref of more than 2K entries is
        replaced by its chunks too. Returns the bytes and the first new sequence.
        """
        k = len(entries)
        if self.tail_size + k > U32_MAX:
            raise CorruptManifestError(self.key, "appending would exceed 2^32 - 1 entries")
        base = self.next_sequence
        if base + k > MAX_SEQUENCE:
            raise CorruptManifestError(self.key, "appending would take sequences past 2^63")
        added = b"".join(encode_new_entry(base + i, e) for i, e in enumerate(entries))
        sections = with_added_bytes(self.sections, entries)
        put_all = seal_all or (lambda tails: [seal(t) for t in tails])
        refs = self.refs if read_segment is None else self._resplit(max_tail, put_all, fold, read_segment)
        if self.tail_size == 0 or self.tail_size + k <= max_tail:
            if refs is self.refs:
                body = self.raw[self._refs_from : self._tail_until] + added
            else:
                body = encode_refs(refs) + self.raw[self._tail_from : self._tail_until] + added
            low = self.first_sequence if self.refs or self.tail_size else base
            return _framed(sections, refs, body, low, self.tail_size + k, base + k, self.epoch), base
        first, spans = self.tail_first_sequence, self._spans
        run = EntryRun(self.raw, [s.start for s in spans], self._tail_until, [s.location for s in spans], first)
        chunks = cut_chunks(run, max_tail, first if align is None or align > first else align)
        sealed = put_all([SealedTail(c.data, c.first_sequence, c.entry_count, c.oldest_batch_ms) for c in chunks])
        for c, ref in zip(chunks, sealed, strict=True):
            # Only the first chunk of a v1 tail may be a reused object that starts below it (low_water inside).
            below = not refs and ref.first_sequence < c.first_sequence
            if ref.last_sequence != c.last_sequence or (ref.first_sequence != c.first_sequence and not below):
                raise CorruptManifestError(ref.key, f"sealed as {c.first_sequence} to {c.last_sequence}, not as listed")
            refs = _folded([*refs, ref], fanout(max_tail), fold)
        low_water = self.low_water if self.refs else first
        return _framed(sections, refs, encode_refs(refs) + added, low_water, k, base + k, self.epoch), base

    def _resplit(
        self,
        max_tail: int,
        put_all: Callable[[Sequence[SealedTail]], Sequence[SegmentRef]],
        fold: Callable[[Sequence[SegmentRef]], SegmentRef],
        read_segment: Callable[[SegmentRef], bytes],
    ) -> list[SegmentRef]:
        """The refs, every segment of over 2K entries replaced by its chunks (none below ``low_water``), folded."""
        if not any(r.level == 0 and r.entry_count > 2 * max_tail for r in self.refs):
            return self.refs
        out: list[SegmentRef] = []
        for r in self.refs:
            if r.level != 0 or r.entry_count <= 2 * max_tail:
                out.append(r)
                continue
            chunks = cut_chunks(segment_run(read_segment(r), r.key), max_tail, r.first_sequence, self.low_water)
            part: list[SegmentRef] = []
            for ref in put_all(
                [SealedTail(c.data, c.first_sequence, c.entry_count, c.oldest_batch_ms) for c in chunks]
            ):
                part = _folded([*part, ref], fanout(max_tail), fold)
            out += part
        return out

    def dequeued_through(
        self, through: int, children: Callable[[SegmentRef], Sequence[SegmentRef]]
    ) -> tuple[bytes, int] | None:
        """Removes sequences ``<= through``: the bytes and how many were removed; None when nothing
        would be removed (no write needed). An index that becomes the first ref is expanded: replaced
        by its refs (``children`` reads it), those dequeued dropped, until the first ref is a segment."""
        if through < self.first_sequence or self.depth == 0:
            return None
        return self._rebuild(self.epoch, through, children)

    def with_sections(
        self,
        sections: HeadSections,
        children: _Children,
        epoch: int | None = None,
        *,
        cut: bool = True,
        removed_bytes: _RemovedBytes | None = None,
        through: int | None = None,
    ) -> tuple[bytes, int]:
        """The head with ``sections`` (and ``epoch``); with ``cut``, entries below the slowest reader's
        ``next`` are removed (``low_water`` never decreases), and with ``through`` those up to it too (a
        retention cut). Empty sections write v2 (refs) or v1, byte for byte as a head that never had any
        (§2.3). With a retention section, ``queued_bytes`` loses the removed entries' ``byte_length``
        (``removed_bytes(start, end)`` sums them; needed when the retention section is there).
        Returns the bytes and how many entries were removed."""
        slowest = sections.slowest_next() if cut else None
        upto = self.first_sequence - 1 if slowest is None else max(self.first_sequence, slowest) - 1
        upto = upto if through is None else max(upto, through)
        return self._rebuild(self.epoch if epoch is None else epoch, upto, children, sections, removed_bytes)

    def with_epoch(
        self, epoch: int, through: int | None, children: Callable[[SegmentRef], Sequence[SegmentRef]]
    ) -> tuple[bytes, int]:
        """Sets the epoch and, optionally, dequeues through a sequence, in one edit (as :meth:`dequeued_through`)."""
        if not 0 <= epoch <= U64_MAX:
            raise CorruptManifestError(self.key, f"epoch {epoch} is not a u64")
        return self._rebuild(epoch, self.first_sequence - 1 if through is None else through, children)

    def _rebuild(
        self,
        epoch: int,
        through: int,
        children: _Children,
        sections: HeadSections | None = None,
        removed_bytes: _RemovedBytes | None = None,
    ) -> tuple[bytes, int]:
        new_first = min(max(self.first_sequence, through + 1), self.next_sequence)
        secs = self.sections if sections is None else sections
        if secs.retention is not None and new_first > self.first_sequence:
            if removed_bytes is None:
                raise CorruptManifestError(self.key, "a cut of a head with retention needs the removed entries' bytes")
            gone = removed_bytes(self.first_sequence, new_first)
            secs = replace(
                secs, retention=replace(secs.retention, queued_bytes=max(0, secs.retention.queued_bytes - gone))
            )
        refs = [r for r in self.refs if r.last_sequence >= new_first]
        while refs and refs[0].level > 0:  # the first ref is always a segment (§2.2)
            refs = [r for r in children(refs[0]) if r.last_sequence >= new_first] + refs[1:]
        dropped_tail = max(0, new_first - self.tail_first_sequence)
        # Only the removed tail entries' headers are walked (O(removed), as the v1 dequeue).
        cut = self._tail_from if dropped_tail == 0 else self._walk(dropped_tail)[-1].end
        kept = self.tail_size - dropped_tail
        body = (encode_refs(refs) if refs else b"") + self.raw[cut : self._tail_until]
        return _framed(secs, refs, body, new_first, kept, self.next_sequence, epoch), new_first - self.first_sequence


def entry_byte_length(extension: bytes) -> int:
    """An entry's ``byte_length`` per its integrity record (§2.1 type 3); 0 without one."""
    rec = integrity_of(extension)
    return 0 if rec is None else rec.byte_length


def with_added_bytes(sections: HeadSections, entries: Sequence[NewEntry]) -> HeadSections:
    """``sections`` with the new entries' ``byte_length`` added to ``queued_bytes`` (with a retention section)."""
    r = sections.retention
    if r is None:
        return sections
    added = sum(entry_byte_length(e[2]) for e in entries if len(e) > 2)
    return replace(sections, retention=replace(r, queued_bytes=r.queued_bytes + added))


def _folded(refs: list[SegmentRef], f: int, fold: Callable[[Sequence[SegmentRef]], SegmentRef]) -> list[SegmentRef]:
    """Folds the last ``f`` refs into an index while they share a level and the first ref is not among
    them, then looks again one level up (at most one index per level)."""
    while len(refs) > f:
        last = refs[-f:]
        level = last[0].level
        if level >= MAX_LEVEL or any(r.level != level for r in last):
            break
        refs = [*refs[:-f], fold(last)]
    return refs


def fanout(segment_entries: int) -> int:
    """F, how many refs of one level a producer folds into an index object: ``max(2, K / 32)`` (a writer's
    choice, never checked by readers; docs/format.md §2.2)."""
    return max(2, segment_entries // 32)


def parse_head(raw: bytes, key: str) -> RawHead:
    """Parses a manifest object (v1 or a v2 head): its footer and refs, every ref invariant checked.

    Raises:
        CorruptManifestError: An invariant of docs/format.md §2 or §2.2 does not hold (the tail's
            entries are checked when first walked).
        UnsupportedFormatVersionError: A version other than 1 or 2.
    """
    n = len(raw)
    found = MANIFEST_FOOTER.unpack_from(raw, n - MANIFEST_FOOTER_LEN)[3] if n >= MANIFEST_FOOTER_LEN else 0
    sections, refs_from = NO_SECTIONS, 0
    if found in (HEAD_VERSION, HEAD_SECTIONS_VERSION):
        refs = parse_head_refs(raw, key)
        tail_from, tail_until = refs.sections_len + refs.segments_len, refs.trailer_at
        count, next_sequence, epoch = refs.entry_count, refs.next_sequence, refs.epoch
        ref_list, low_water, version = refs.refs, refs.low_water, found
        sections, refs_from = refs.sections, refs.sections_len
    else:
        footer = read_manifest_footer(raw, key, READ_VERSIONS)
        tail_from, tail_until = 0, n - MANIFEST_FOOTER_LEN
        count, next_sequence, epoch = footer.entry_count, footer.next_sequence, footer.epoch
        ref_list, low_water, version = [], 0, FORMAT_VERSION
    if count * (4 + _ENTRY_FIXED) > tail_until - tail_from:
        raise CorruptManifestError(
            key, f"{count} entries cannot fit in the {tail_until - tail_from}-byte entries region"
        )
    if count > next_sequence:
        raise CorruptManifestError(key, f"{count} entries end at next_sequence {next_sequence}: sequences below 0")
    if ref_list:
        refs_end = ref_list[-1].last_sequence + 1
        if next_sequence - count != refs_end:
            raise CorruptManifestError(
                key, f"the tail starts at {next_sequence - count}, not where the last ref ends ({refs_end})"
            )
    return RawHead(
        raw, key, version, count, next_sequence, epoch, ref_list, low_water, tail_from, tail_until, sections, refs_from
    )


def _framed(sections: HeadSections, refs: Sequence[SegmentRef], body: bytes, *fields: int) -> bytes:
    """A head from its refs region and tail (``body``) and ``low_water, entry_count, next_sequence,
    epoch``: v1 without refs or sections, else v2 or v3 (§2.3)."""
    refs_len = sum(REF_FIXED_SIZE + len(r.key.encode("utf-8")) for r in refs)
    return frame_head(sections, body, refs_len, len(refs), *fields)


def encode_head(
    refs: Sequence[SegmentRef],
    low_water: int,
    tail: Sequence[ManifestEntry],
    next_sequence: int,
    epoch: int,
    sections: HeadSections = NO_SECTIONS,
) -> bytes:
    """Encodes a whole head (a v1 manifest when ``refs`` and ``sections`` are empty): what the golden vectors hold."""
    body = b"".join(encode_entry(e.sequence, e.location, e.metadata, e.extension, False) for e in tail)
    return _framed(
        sections, refs, (encode_refs(refs) if refs else b"") + body, low_water, len(tail), next_sequence, epoch
    )
