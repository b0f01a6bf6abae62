"""Cutting a deep tail, or an oversized segment, into segments of K entries (docs/format.md §2.2;
JVM: ``SegmentChunks``).

A v1 manifest written by the RFC reference (or with segmentation off) can hold a million entries;
sealed as one segment, every reader's first read would decode all of it. Instead the entries are
cut into chunks of exactly K entries aligned on a sequence ``align`` (chunk ``i`` covers
``align + iK .. align + (i+1)K - 1``, the first and last possibly shorter), each chunk an RFC v1
manifest of its entries byte for byte: the same segments K-at-a-time sealing would have written.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from osqueue.errors import CorruptManifestError
from osqueue.format.batch_names import parse_batch_ulid_ms
from osqueue.format.manifest_codec import FORMAT_VERSION, MANIFEST_FOOTER, MANIFEST_FOOTER_LEN, read_manifest_footer

_ENTRY_HEAD = struct.Struct("<IQH")  # entry_len, sequence, location_len
_ENTRY_FIXED = 8 + 2 + 4
NO_BATCH_TIME = (1 << 63) - 1
"""A chunk's ``oldest_batch_ms`` when none of its locations is a ULID batch name."""
PARALLEL_PUTS = 8
"""How many segment objects a seal writes at once (docs/format.md §2.2)."""


@dataclass(frozen=True)
class Chunk:
    """One chunk: the bytes of its segment object (an RFC v1 manifest of its entries, epoch 0)."""

    data: bytes
    first_sequence: int
    entry_count: int
    oldest_batch_ms: int

    @property
    def last_sequence(self) -> int:
        return self.first_sequence + self.entry_count - 1


@dataclass(frozen=True)
class EntryRun:
    """Consecutive encoded entries inside a byte string: entry ``i`` (sequence ``first_sequence + i``)
    is ``data[starts[i]:starts[i + 1]]``, the last one ending at ``end``."""

    data: bytes
    starts: Sequence[int]
    end: int
    locations: Sequence[str]
    first_sequence: int


def chunk_bounds(first: int, count: int, k: int, align: int) -> list[tuple[int, int]]:
    """``(first_sequence, entry_count)`` of the chunks covering ``first .. first + count - 1``, cut at
    the sequences ``align + iK`` (``align <= first``)."""
    if k < 1 or align > first:
        raise ValueError(f"chunks of {k} aligned on {align} cannot start at {first}")
    out: list[tuple[int, int]] = []
    s, end = first, first + count
    while s < end:
        boundary = align + ((s - align) // k + 1) * k
        n = min(boundary, end) - s
        out.append((s, n))
        s += n
    return out


def cut_chunks(run: EntryRun, k: int, align: int, keep_from: int | None = None) -> list[Chunk]:
    """The run's entries cut into chunks of K aligned on ``align``; chunks wholly below ``keep_from``
    (dequeued) are left out."""
    chunks: list[Chunk] = []
    for first, n in chunk_bounds(run.first_sequence, len(run.starts), k, align):
        if keep_from is not None and first + n - 1 < keep_from:
            continue
        i = first - run.first_sequence
        start = run.starts[i]
        end = run.starts[i + n] if i + n < len(run.starts) else run.end
        times = [t for loc in run.locations[i : i + n] if (t := parse_batch_ulid_ms(loc)) is not None]
        data = run.data[start:end] + MANIFEST_FOOTER.pack(n, first + n, 0, FORMAT_VERSION)
        chunks.append(Chunk(data, first, n, min(times, default=NO_BATCH_TIME)))
    return chunks


def segment_run(data: bytes, key: str) -> EntryRun:
    """The entries of a segment object (an RFC v1 manifest whose length and SHA-256 were already checked
    against its ref): their headers walked and checked, nothing else decoded."""
    footer = read_manifest_footer(data, key)
    end = len(data) - MANIFEST_FOOTER_LEN
    first = footer.next_sequence - footer.entry_count
    starts: list[int] = []
    locations: list[str] = []
    pos = 0
    for i in range(footer.entry_count):
        if pos + 4 + _ENTRY_FIXED > end:
            raise CorruptManifestError(key, f"segment entry {i}: header runs past the entries")
        entry_len, sequence, location_len = _ENTRY_HEAD.unpack_from(data, pos)
        if pos + 4 + entry_len > end or _ENTRY_FIXED + location_len > entry_len or sequence != first + i:
            raise CorruptManifestError(key, f"segment entry {i}: does not fit or is out of sequence")
        starts.append(pos)
        locations.append(data[pos + 14 : pos + 14 + location_len].decode("utf-8", errors="replace"))
        pos += 4 + entry_len
    if pos != end:
        raise CorruptManifestError(key, f"segment: {end - pos} bytes left after its last entry")
    return EntryRun(data, starts, end, locations, first)
