"""The version 3 head's sections: subscriptions, the unnamed reader, retention (docs/format.md §2.3;
JVM: ``HeadSections``).

A version 3 head is a version 2 head (refs, tail) preceded by typed sections and closed by a longer
trailer holding a CRC-32 of the whole head. This module codes the sections region and the trailer;
``osqueue.format.manifest_head`` frames them with the refs and the tail.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from osqueue.errors import CorruptManifestError, UnsupportedFormatVersionError
from osqueue.format.manifest import MAX_SEQUENCE
from osqueue.format.manifest_codec import MANIFEST_FOOTER, MANIFEST_FOOTER_LEN

HEAD_SECTIONS_VERSION = 3
"""The format version of a head with sections."""
SECTIONS_TRAILER = struct.Struct("<IIIIQI")
"""sections_len, section_count, segments_len, segment_count, low_water, head_crc32."""
SECTIONS_TRAILER_SIZE = SECTIONS_TRAILER.size  # 28

SUBSCRIPTIONS_SECTION = 1
UNNAMED_READER_SECTION = 2
RETENTION_SECTION = 3
WRITERS_SECTION = 4
IGNORABLE_BIT = 0x8000
"""A section type with this bit set may be skipped by a reader that does not know it (and is carried byte for byte)."""

BACKPRESSURE = 0
DROP_OLDEST = 1

MAX_NAME_LEN = 128
_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
_SECTION_HEAD = struct.Struct("<HI")
_SUBSCRIPTION_FIXED = struct.Struct("<QQqq")
_UNNAMED = struct.Struct("<Qq")
_RETENTION = struct.Struct("<qQQBQ")
_U64_MAX = (1 << 64) - 1


def valid_subscription_name(name: str) -> bool:
    """Whether ``name`` is a subscription name: 1 to 128 characters of ``[A-Za-z0-9._-]``."""
    return _NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class Subscription:
    """A subscription's record.

    Attributes:
        name: 1..128 characters of ``[A-Za-z0-9._-]``.
        epoch: High 32 bits the incarnation (random at creation), low 32 bits the takeovers.
        next: The first sequence it has not acknowledged.
        created_ms: When it was created.
        last_ack_ms: When it last acknowledged (``created_ms`` before its first ack).
    """

    name: str
    epoch: int
    next: int
    created_ms: int
    last_ack_ms: int

    @property
    def incarnation(self) -> int:
        return self.epoch >> 32


@dataclass(frozen=True)
class UnnamedReader:
    """The RFC's unnamed consumer's position on a version 3 head."""

    next: int
    last_ack_ms: int


@dataclass(frozen=True)
class Retention:
    """A queue's retention policy and its running size (``queued_bytes``)."""

    max_age_ms: int = 0
    max_bytes: int = 0
    max_entries: int = 0
    policy: int = BACKPRESSURE
    queued_bytes: int = 0


@dataclass(frozen=True)
class OpaqueSection:
    """A section this version carries without reading it: the writers section (type 4) and every
    ignorable type it does not know."""

    section_type: int
    body: bytes


@dataclass(frozen=True)
class HeadSections:
    """The sections of a head (all empty for a version 1 or 2 head)."""

    subscriptions: tuple[Subscription, ...] = ()
    unnamed_reader: UnnamedReader | None = None
    retention: Retention | None = None
    opaque: tuple[OpaqueSection, ...] = field(default=())

    @property
    def is_empty(self) -> bool:
        return not self.subscriptions and self.unnamed_reader is None and self.retention is None and not self.opaque

    def subscription(self, name: str) -> Subscription | None:
        return next((s for s in self.subscriptions if s.name == name), None)

    def with_subscription(self, sub: Subscription) -> HeadSections:
        """These sections with ``sub`` added or replacing the record of its name (names kept sorted)."""
        others = [s for s in self.subscriptions if s.name != sub.name]
        return replace(self, subscriptions=tuple(sorted([*others, sub], key=lambda s: s.name.encode("utf-8"))))

    def without_subscription(self, name: str) -> HeadSections:
        return replace(self, subscriptions=tuple(s for s in self.subscriptions if s.name != name))

    def slowest_next(self) -> int | None:
        """The smallest ``next`` of every reader record (None without any): where the queue's
        retained entries start (``low_water``), retention aside."""
        nexts = [s.next for s in self.subscriptions]
        if self.unnamed_reader is not None:
            nexts.append(self.unnamed_reader.next)
        return min(nexts) if nexts else None


NO_SECTIONS = HeadSections()
"""The sections of a version 1 or 2 head."""


def _sections(s: HeadSections) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    if s.subscriptions:
        records = [struct.pack("<I", len(s.subscriptions))]
        for sub in s.subscriptions:
            name = sub.name.encode("utf-8")
            records += [struct.pack("<B", len(name)), name]
            records.append(_SUBSCRIPTION_FIXED.pack(sub.epoch, sub.next, sub.created_ms, sub.last_ack_ms))
        out.append((SUBSCRIPTIONS_SECTION, b"".join(records)))
    if s.unnamed_reader is not None:
        out.append((UNNAMED_READER_SECTION, _UNNAMED.pack(s.unnamed_reader.next, s.unnamed_reader.last_ack_ms)))
    if s.retention is not None:
        r = s.retention
        out.append(
            (RETENTION_SECTION, _RETENTION.pack(r.max_age_ms, r.max_bytes, r.max_entries, r.policy, r.queued_bytes))
        )
    out += [(o.section_type, o.body) for o in s.opaque]
    return sorted(out, key=lambda t: t[0])


def section_count(s: HeadSections) -> int:
    """How many sections :func:`encode_sections` writes for ``s``."""
    return len(_sections(s))


def encode_sections(s: HeadSections) -> bytes:
    """The sections region: ``type u16 | body_len u32 | body`` per section, types increasing."""
    return b"".join(_SECTION_HEAD.pack(t, len(b)) + b for t, b in _sections(s))


def head_crc32(data: bytes, crc_at: int) -> int:
    """CRC-32 (zlib's) of a head's bytes without the 4 of ``head_crc32`` at ``crc_at``."""
    return zlib.crc32(data[crc_at + 4 :], zlib.crc32(data[:crc_at]))


def decode_sections(data: bytes, start: int, end: int, count: int, key: str) -> HeadSections:
    """``count`` sections filling ``data[start:end]`` exactly, each checked.

    Raises:
        CorruptManifestError: A section is malformed, out of order or repeated.
        UnsupportedFormatVersionError: A type this version does not know, without the ignorable bit.
    """
    pos, previous = start, -1
    subs: tuple[Subscription, ...] = ()
    unnamed: UnnamedReader | None = None
    retention: Retention | None = None
    opaque: list[OpaqueSection] = []
    for i in range(count):
        if end - pos < _SECTION_HEAD.size:
            raise CorruptManifestError(key, f"head section {i} runs past the sections region")
        section_type, body_len = _SECTION_HEAD.unpack_from(data, pos)
        pos += _SECTION_HEAD.size
        if body_len > end - pos:
            raise CorruptManifestError(key, f"head section 0x{section_type:04x}: its body runs past the sections")
        if section_type <= previous:
            raise CorruptManifestError(
                key, f"head section 0x{section_type:04x} after 0x{previous:04x}: types must increase, each once"
            )
        previous = section_type
        body = bytes(data[pos : pos + body_len])
        pos += body_len
        if section_type == SUBSCRIPTIONS_SECTION:
            subs = _decode_subscriptions(body, key)
        elif section_type == UNNAMED_READER_SECTION:
            if body_len != _UNNAMED.size:
                raise CorruptManifestError(key, f"unnamed reader section: {body_len} bytes, not {_UNNAMED.size}")
            unnamed = UnnamedReader(*_UNNAMED.unpack(body))
        elif section_type == RETENTION_SECTION:
            if body_len != _RETENTION.size:
                raise CorruptManifestError(key, f"retention section: {body_len} bytes, not {_RETENTION.size}")
            retention = Retention(*_RETENTION.unpack(body))
            if retention.policy not in (BACKPRESSURE, DROP_OLDEST) or retention.max_age_ms < 0:
                raise CorruptManifestError(key, f"retention section: policy {retention.policy} or max_age invalid")
        elif section_type == WRITERS_SECTION or section_type & IGNORABLE_BIT:
            opaque.append(OpaqueSection(section_type, body))
        else:
            raise _unknown_section(key, section_type)
    if pos != end:
        raise CorruptManifestError(key, f"{end - pos} unexpected bytes after the last head section")
    return HeadSections(subs, unnamed, retention, tuple(opaque))


def _unknown_section(key: str, section_type: int) -> UnsupportedFormatVersionError:
    e = UnsupportedFormatVersionError(key, "manifest", HEAD_SECTIONS_VERSION, (1, 2, 3))
    e.args = (
        f"manifest '{key}': unknown head section 0x{section_type:04x} (not ignorable): written by a newer "
        "osqueue (upgrade osqueue)",
    )
    return e


def _decode_subscriptions(body: bytes, key: str) -> tuple[Subscription, ...]:
    if len(body) < 4:
        raise CorruptManifestError(key, "subscriptions section: shorter than its count")
    (count,) = struct.unpack_from("<I", body, 0)
    if count == 0 or count > (len(body) - 4) // (1 + _SUBSCRIPTION_FIXED.size + 1):
        raise CorruptManifestError(key, f"subscriptions section: {count} records cannot fill {len(body)} bytes")
    out: list[Subscription] = []
    pos = 4
    for i in range(count):
        name_len = body[pos] if pos < len(body) else 0
        if name_len == 0 or name_len > MAX_NAME_LEN or pos + 1 + name_len + _SUBSCRIPTION_FIXED.size > len(body):
            raise CorruptManifestError(key, f"subscription {i}: name_len {name_len} does not fit")
        raw_name = body[pos + 1 : pos + 1 + name_len]
        name = raw_name.decode("ascii", errors="replace")
        if not valid_subscription_name(name):
            raise CorruptManifestError(key, f"subscription {i}: name '{name}' is not [A-Za-z0-9._-]{{1,128}}")
        if out and raw_name <= out[-1].name.encode("ascii"):
            raise CorruptManifestError(key, f"subscription '{name}' after '{out[-1].name}': names must increase")
        pos += 1 + name_len
        epoch, next_, created, last_ack = _SUBSCRIPTION_FIXED.unpack_from(body, pos)
        pos += _SUBSCRIPTION_FIXED.size
        out.append(Subscription(name, epoch, next_, created, last_ack))
    if pos != len(body):
        raise CorruptManifestError(key, f"subscriptions section: {len(body) - pos} bytes after the last record")
    return tuple(out)


def check_positions(s: HeadSections, next_sequence: int, key: str) -> None:
    """Every reader's ``next`` is at most ``next_sequence`` (§2.3)."""
    readers: Sequence[tuple[str, int]] = [(f"subscription '{x.name}'", x.next) for x in s.subscriptions]
    if s.unnamed_reader is not None:
        readers = [*readers, ("the unnamed reader", s.unnamed_reader.next)]
    for who, nxt in readers:
        if nxt > next_sequence:
            raise CorruptManifestError(key, f"{who}: next {nxt} is past next_sequence {next_sequence}")


@dataclass(frozen=True)
class SectionsFrame:
    """A version 3 head's frame: its sections, trailer and footer fields (the refs not decoded)."""

    sections: HeadSections
    sections_len: int
    segments_len: int
    segment_count: int
    low_water: int
    trailer_at: int
    entry_count: int
    next_sequence: int
    epoch: int


def parse_sections_frame(data: bytes, key: str) -> SectionsFrame:
    """Checks a version 3 head's CRC, sections, readers' positions and (without refs) ``low_water``
    against the tail (§2.3); the refs are left to ``manifest_head``.

    Raises:
        CorruptManifestError: An invariant of §2.3 does not hold.
        UnsupportedFormatVersionError: An unknown section type without the ignorable bit.
    """
    n = len(data)
    if n < MANIFEST_FOOTER_LEN + SECTIONS_TRAILER.size:
        raise CorruptManifestError(key, f"{n} bytes is shorter than a version 3 head's trailer and footer")
    entry_count, next_sequence, epoch, _ = MANIFEST_FOOTER.unpack_from(data, n - MANIFEST_FOOTER_LEN)
    trailer_at = n - MANIFEST_FOOTER_LEN - SECTIONS_TRAILER.size
    sections_len, n_sections, segments_len, count, low_water, crc = SECTIONS_TRAILER.unpack_from(data, trailer_at)
    actual = head_crc32(data, trailer_at + SECTIONS_TRAILER.size - 4)
    if crc != actual:
        raise CorruptManifestError(key, f"head_crc32 is {crc:08x} but the head's bytes give {actual:08x}")
    if next_sequence > MAX_SEQUENCE:
        raise CorruptManifestError(key, f"next_sequence {next_sequence} is at or above 2^63")
    if sections_len + segments_len > trailer_at:
        raise CorruptManifestError(key, f"sections_len {sections_len} + segments_len {segments_len} run past the head")
    sections = decode_sections(data, 0, sections_len, n_sections, key)
    if n_sections == 0 and count == 0:
        raise CorruptManifestError(
            key, "a version 3 head with neither a section nor a ref (it is written as version 1)"
        )
    check_positions(sections, next_sequence, key)
    if count == 0:
        if segments_len != 0:
            raise CorruptManifestError(key, f"segments_len {segments_len} with no segment")
        if entry_count <= next_sequence and low_water != next_sequence - entry_count:
            raise CorruptManifestError(
                key, f"low_water {low_water} is not the tail's first sequence {next_sequence - entry_count}"
            )
    return SectionsFrame(
        sections, sections_len, segments_len, count, low_water, trailer_at, entry_count, next_sequence, epoch
    )


HEAD_TRAILER = struct.Struct("<IIQ")
"""A version 2 head's trailer: segments_len, segment_count, low_water."""


def frame_head(
    sections: HeadSections,
    body: bytes,
    segments_len: int,
    segment_count: int,
    low_water: int,
    entry_count: int,
    next_sequence: int,
    epoch: int,
) -> bytes:
    """A head from ``body`` (its refs region, then its tail): version 1 (RFC bytes) without refs or
    sections; else version 3 (the sections, ``body``, the trailer with its CRC, the footer), so every
    segmented head carries ``head_crc32`` (docs/adr/0006 item 3; version 2 is read, never written)."""
    if sections.is_empty and segment_count == 0:
        return body + MANIFEST_FOOTER.pack(entry_count, next_sequence, epoch, 1)
    secs = encode_sections(sections)
    trailer = SECTIONS_TRAILER.pack(len(secs), section_count(sections), segments_len, segment_count, low_water, 0)
    out = bytearray(
        secs + body + trailer + MANIFEST_FOOTER.pack(entry_count, next_sequence, epoch, HEAD_SECTIONS_VERSION)
    )
    crc_at = len(out) - MANIFEST_FOOTER_LEN - 4
    struct.pack_into("<I", out, crc_at, head_crc32(bytes(out), crc_at))
    return bytes(out)
