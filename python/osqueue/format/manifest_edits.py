"""Edits on an encoded manifest without decoding every entry: append, dequeue, epoch, locations (JVM: ``ManifestEdits``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from osqueue.errors import CorruptManifestError, InvalidConfigError
from osqueue.format.manifest import MAX_SEQUENCE, NewEntry
from osqueue.format.manifest_codec import (
    MANIFEST_FOOTER_LEN,
    U32_MAX,
    U64_MAX,
    ManifestFooter,
    empty_manifest,
    encode_new_entry,
    footer_bytes,
    read_manifest_footer,
    walk_headers,
)


def append_entries(
    raw: bytes | None,
    new_entries: Sequence[NewEntry],
    key: str = "manifest",
    new_epoch: int = 0,
) -> tuple[bytes, int]:
    """Appends entries to a manifest without decoding its existing entries.

    The footer is validated and stripped, the new entries take ``next_sequence``,
    ``next_sequence + 1``, ... and a new footer is written (same epoch).

    Args:
        raw: The current manifest bytes, or None when the object is missing (empty manifest).
        new_entries: ``(location, metadata)`` pairs (or with their extension bytes third), in order.
        key: The manifest's key, for error messages.
        new_epoch: The epoch of a manifest this append creates (``raw`` None): writers pass
            :func:`new_incarnation_epoch`.

    Returns:
        The new manifest bytes and the sequence of the first new entry.
    """
    footer = ManifestFooter(0, 0, new_epoch) if raw is None else read_manifest_footer(raw, key)
    first = footer.next_sequence
    k = len(new_entries)
    if footer.entry_count + k > U32_MAX:
        raise CorruptManifestError(key, "appending would exceed 2^32 - 1 entries")
    if first + k > MAX_SEQUENCE:
        raise CorruptManifestError(key, "appending would take sequences past 2^63")
    body = b"".join(encode_new_entry(first + i, e) for i, e in enumerate(new_entries))
    prefix = b"" if raw is None else raw[: len(raw) - MANIFEST_FOOTER_LEN]
    return prefix + body + footer_bytes(footer.entry_count + k, first + k, footer.epoch), first


def iter_entry_locations(raw: bytes, key: str, min_sequence: int = 0) -> Iterator[tuple[int, str]]:
    """Yields ``(sequence, location)`` of the entries with ``sequence >= min_sequence``.

    Metadata is not decoded: each entry costs one header read.
    """
    for sequence, start, _end, location_len in walk_headers(raw, key):
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
    for sequence, _start, entry_end, _ in walk_headers(raw, key):
        if sequence > through_sequence:
            break
        cut = entry_end
        removed += 1
    if removed == 0:
        return raw, 0
    new = raw[cut : len(raw) - MANIFEST_FOOTER_LEN] + footer_bytes(
        footer.entry_count - removed, footer.next_sequence, footer.epoch
    )
    return new, removed


def with_epoch(raw: bytes | None, epoch: int, key: str = "manifest") -> bytes:
    """Returns the manifest with its footer's epoch replaced (a missing one becomes empty)."""
    if not 0 <= epoch <= U64_MAX:
        raise InvalidConfigError("epoch", epoch, "the epoch is a u64")
    if raw is None:
        return empty_manifest(epoch)
    footer = read_manifest_footer(raw, key)
    return raw[: len(raw) - MANIFEST_FOOTER_LEN] + footer_bytes(footer.entry_count, footer.next_sequence, epoch)
