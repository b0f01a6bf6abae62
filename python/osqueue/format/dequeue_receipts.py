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
    """``locations[i]`` held sequence ``first + i`` in the manifest of ``incarnation`` (and was dequeued).

    Every pair was read from a real manifest version, and a sequence is assigned once per
    incarnation (a reset starts again at 0, docs/format.md §5.2), so a receipt of the incarnation
    a write was sent to is true whoever wrote it; receipts may only be missing (never written, or
    trimmed). ``incarnation`` is None for receipts v1, which do not say: a producer then trusts only
    a receipt naming its own location (a location is unique), never one naming another.
    """

    first: int = 0
    locations: tuple[str, ...] = ()
    incarnation: int | None = None

    def location_at(self, sequence: int) -> str | None:
        i = sequence - self.first
        return self.locations[i] if 0 <= i < len(self.locations) else None

    def extended(
        self, removed: Sequence[tuple[int, str]], incarnation: int | None = None, max_count: int = MAX_RECEIPTS
    ) -> DequeueReceipts:
        """These receipts plus ``removed`` (consecutive ``(sequence, location)``) of ``incarnation``,
        keeping the last ``max_count``. A gap before ``removed``, or another incarnation, starts the
        receipts afresh."""
        if not removed:
            return self
        lo = removed[0][0]
        new = tuple(loc for _, loc in removed)
        if self.locations and self.incarnation == incarnation and self.first <= lo <= self.first + len(self.locations):
            merged = DequeueReceipts(self.first, self.locations[: lo - self.first] + new, incarnation)
        else:
            merged = DequeueReceipts(lo, new, incarnation)
        return merged.trimmed(max_count)

    def trimmed(self, max_count: int) -> DequeueReceipts:
        drop = max(0, len(self.locations) - max_count)
        return self if drop == 0 else DequeueReceipts(self.first + drop, self.locations[drop:], self.incarnation)

    def encode(self) -> bytes:
        """``"OSQR"``, version u8, [v2: incarnation u64], first u64, count u32, then per location u16
        length + UTF-8 (LE). Version 2 when the incarnation is known, else 1."""
        if self.incarnation is None:
            parts = [_RECEIPTS_MAGIC, struct.pack("<BQI", 1, self.first, len(self.locations))]
        else:
            parts = [_RECEIPTS_MAGIC, struct.pack("<BQQI", 2, self.incarnation, self.first, len(self.locations))]
        for location in self.locations:
            b = location.encode()
            parts.append(struct.pack("<H", len(b)) + b)
        return b"".join(parts)

    @staticmethod
    def decode(data: bytes) -> DequeueReceipts | None:
        """None for bytes that are not receipts v1 or v2 (they are advisory: a reader then knows less)."""
        if len(data) < 17 or data[:4] != _RECEIPTS_MAGIC:
            return None
        incarnation: int | None = None
        if data[4] == 1:
            _, first, count = struct.unpack_from("<BQI", data, 4)
            pos = 17
        elif data[4] == 2 and len(data) >= 25:
            _, incarnation, first, count = struct.unpack_from("<BQQI", data, 4)
            pos = 25
        else:
            return None
        if first > MAX_SEQUENCE or count > (len(data) - pos) // 2:
            return None
        locations = []
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
        return DequeueReceipts(first, tuple(locations), incarnation)
