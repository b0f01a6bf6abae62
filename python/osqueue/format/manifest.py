"""The manifest's entries and metadata items, decoded (JVM: ``Manifest``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MAX_SEQUENCE = (1 << 63) - 1
"""Sequences (and ``next_sequence``) above this are rejected as corrupt, as on the JVM."""
MAX_START_INDEX = (1 << 31) - 1
"""``start_index`` above this is rejected (both languages): a batch's block is < 2 GiB, so it holds fewer records."""


@dataclass(frozen=True)
class MetadataItem:
    """Metadata of a range of records in a batch (one per ``produce()`` call).

    Attributes:
        start_index: Index in the batch of the first record the item covers. The range runs
            to the next item's ``start_index`` or to the end of the batch.
        ingestion_time_ms: The producer's wall clock at ``produce()``, ms since the Unix epoch.
        payload: Opaque application metadata.
    """

    start_index: int
    ingestion_time_ms: int
    payload: bytes


@dataclass(frozen=True)
class ManifestEntry:
    """One queue entry: a batch location and the metadata of its record ranges.

    Attributes:
        sequence: The entry's sequence number.
        location: The batch's key relative to the store root.
        metadata: The metadata items, in ``start_index`` order.
        extension: Bytes after the metadata that this version does not interpret; kept as is.
    """

    sequence: int
    location: str
    metadata: list[MetadataItem] = field(default_factory=list)
    extension: bytes = b""


@dataclass(frozen=True)
class Manifest:
    """A decoded queue manifest.

    Attributes:
        entries: The entries, with contiguous increasing sequences.
        next_sequence: The sequence the next appended entry takes.
        epoch: The consumer epoch (fencing token).
    """

    entries: list[ManifestEntry]
    next_sequence: int
    epoch: int

    @property
    def first_sequence(self) -> int:
        """The first entry's sequence, or ``next_sequence`` when the manifest is empty."""
        return self.entries[0].sequence if self.entries else self.next_sequence


NewEntry = tuple[str, Sequence[MetadataItem]] | tuple[str, Sequence[MetadataItem], bytes]
"""An entry to append: ``(location, metadata)`` or ``(location, metadata, extension)``; the
manifest assigns its sequence (JVM: ``NewEntry``)."""
