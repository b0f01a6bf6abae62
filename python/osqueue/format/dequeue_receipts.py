"""The dequeue receipts object: which batches a consumer dequeued (JVM: ``DequeueReceipts``)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from osqueue.format.manifest import MAX_SEQUENCE

# Dequeue receipts (docs/format.md §5.1): which location held each recently dequeued sequence.

RECEIPTS_SUFFIX = ".dequeued"
MAX_RECEIPTS = 4096
_RECEIPTS_MAGIC = b"OSQR"


@dataclass(frozen=True)
class DequeueReceipts:
    """``locations[i]`` held sequence ``first + i`` in the manifest (and was dequeued).

    Every pair was read from a real manifest version, and a sequence is assigned once, so a
    receipt is true whoever wrote it; receipts may only be missing (never written, or trimmed).
    """

    first: int = 0
    locations: tuple[str, ...] = ()

    def location_at(self, sequence: int) -> str | None:
        i = sequence - self.first
        return self.locations[i] if 0 <= i < len(self.locations) else None

    def extended(self, removed: Sequence[tuple[int, str]], max_count: int = MAX_RECEIPTS) -> DequeueReceipts:
        """These receipts plus ``removed`` (consecutive ``(sequence, location)``), keeping the
        last ``max_count``. A gap before ``removed`` starts the receipts afresh."""
        if not removed:
            return self
        lo = removed[0][0]
        new = tuple(loc for _, loc in removed)
        if self.locations and self.first <= lo <= self.first + len(self.locations):
            merged = DequeueReceipts(self.first, self.locations[: lo - self.first] + new)
        else:
            merged = DequeueReceipts(lo, new)
        return merged.trimmed(max_count)

    def trimmed(self, max_count: int) -> DequeueReceipts:
        drop = max(0, len(self.locations) - max_count)
        return self if drop == 0 else DequeueReceipts(self.first + drop, self.locations[drop:])

    def encode(self) -> bytes:
        """``"OSQR"``, version u8 = 1, first u64, count u32, then per location u16 length + UTF-8 (LE)."""
        parts = [_RECEIPTS_MAGIC, struct.pack("<BQI", 1, self.first, len(self.locations))]
        for location in self.locations:
            b = location.encode()
            parts.append(struct.pack("<H", len(b)) + b)
        return b"".join(parts)

    @staticmethod
    def decode(data: bytes) -> DequeueReceipts | None:
        """None for bytes that are not receipts v1 (they are advisory: a reader then knows less)."""
        if len(data) < 17 or data[:4] != _RECEIPTS_MAGIC:
            return None
        version, first, count = struct.unpack_from("<BQI", data, 4)
        if version != 1 or first > MAX_SEQUENCE or count > (len(data) - 17) // 2:
            return None
        pos, locations = 17, []
        for _ in range(count):
            if pos + 2 > len(data):
                return None
            (n,) = struct.unpack_from("<H", data, pos)
            if pos + 2 + n > len(data):
                return None
            try:
                locations.append(data[pos + 2 : pos + 2 + n].decode("utf-8"))
            except UnicodeDecodeError:
                return None
            pos += 2 + n
        if pos != len(data) or first + len(locations) > MAX_SEQUENCE + 1:
            return None
        return DequeueReceipts(first, tuple(locations))
