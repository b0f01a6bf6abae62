"""Segment and index object names beside the manifest (docs/format.md §2.2):
``<manifest_path>.segments/<ULID>.segment`` and ``<ULID>.index`` (JVM: ``SegmentNames``)."""

from __future__ import annotations

import re

from osqueue.format.batch_names import SupportsRandBits, encode_ulid

__all__ = ["INDEX_SUFFIX", "SEGMENTS_SUFFIX", "SEGMENT_SUFFIX", "new_index_key", "new_key", "prefix", "ulid_time_ms"]

SEGMENTS_SUFFIX = ".segments"
"""Segment objects live under ``<manifest_path>.segments/``."""
SEGMENT_SUFFIX = ".segment"
INDEX_SUFFIX = ".index"
_OBJECT_NAME = re.compile(r"([0-7][0-9A-HJKMNP-TV-Z]{25})\.(?:segment|index)")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def prefix(manifest_path: str) -> str:
    """The "directory" holding a manifest's segments, with its trailing ``/`` (what GC lists)."""
    return manifest_path + SEGMENTS_SUFFIX + "/"


def new_key(manifest_path: str, now_ms: int, rng: SupportsRandBits) -> str:
    """A fresh segment key named at ``now_ms`` (GC measures an unlisted segment's age from it)."""
    return prefix(manifest_path) + encode_ulid(now_ms, rng.getrandbits(80)) + SEGMENT_SUFFIX


def new_index_key(manifest_path: str, now_ms: int, rng: SupportsRandBits) -> str:
    """A fresh index object key named at ``now_ms`` (GC measures an unreachable index's age from it)."""
    return prefix(manifest_path) + encode_ulid(now_ms, rng.getrandbits(80)) + INDEX_SUFFIX


def ulid_time_ms(manifest_path: str, key: str) -> int | None:
    """The ULID time of a key that is exactly ``<ULID>.segment`` or ``<ULID>.index`` directly under
    the manifest's segments, else None."""
    directory = prefix(manifest_path)
    if not key.startswith(directory):
        return None
    m = _OBJECT_NAME.fullmatch(key[len(directory) :])
    if m is None:
        return None
    value = 0
    for c in m.group(1)[:10]:
        value = (value << 5) | _CROCKFORD.index(c)
    return value
