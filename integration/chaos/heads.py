"""The manifest figures the chaos run samples, from a v1 manifest or a segmented head (docs/format.md §2.2)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadFigures:
    epoch: int
    next_sequence: int
    first_sequence: int
    segments: int

    @property
    def entry_count(self) -> int:
        """Entries queued (in the tail and the listed segments)."""
        return self.next_sequence - self.first_sequence


def head_figures(raw: bytes, key: str) -> HeadFigures:
    from osqueue.format import decode_head

    h = decode_head(raw, key)
    return HeadFigures(h.epoch, h.next_sequence, h.first_sequence, len(h.segments))
