"""The segments of a segmented head, found by walking its index objects (docs/format.md §2.2; JVM: ``SegmentTree``).

A head lists refs of any level: a segment (level 0) or an index object listing refs one level down.
Every reader that needs segments goes through a :class:`SegmentTree`: the native consumer, the
dequeue's expansion, :meth:`ManifestStore.decode`, the producer's ambiguous-write resolution, GC and
the CLI. It walks down lazily, holding at most one index object per level besides what its caller
holds, and keeps the last index objects it decoded (they are immutable) in a small LRU.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from osqueue.errors import CorruptManifestError
from osqueue.format.incarnation import incarnation_of
from osqueue.format.index_object import decode_segment
from osqueue.format.manifest import ManifestEntry
from osqueue.format.manifest_head import RawHead, entry_byte_length
from osqueue.format.segment_ref import SegmentRef

if TYPE_CHECKING:
    from osqueue.queue.manifest_store import ManifestStore

CACHED_INDEXES = 64
"""Decoded index objects a tree keeps (an index of the default F = 64 refs is about 7 KB)."""


class _Gone(Exception):
    """An index object on the way down is missing (a walk that tolerates it stops there)."""

    def __init__(self, ref: SegmentRef) -> None:
        super().__init__(ref.key)
        self.ref = ref


class SegmentTree:
    """Walks a head's refs down to its segments, reading index objects through ``manifest``.

    Args:
        manifest: Where the index objects are read from (checked against their refs).
        cached_indexes: How many decoded index objects to keep, least recently used dropped first.
    """

    def __init__(self, manifest: ManifestStore, cached_indexes: int = CACHED_INDEXES) -> None:
        self.manifest = manifest
        self._capacity = max(1, cached_indexes)
        self._cache: OrderedDict[str, tuple[bytes, list[SegmentRef]]] = OrderedDict()
        self._lock = threading.Lock()

    def children(self, ref: SegmentRef) -> list[SegmentRef]:
        """An index object's refs (from the cache, or one GET checked against ``ref``): the loader a
        dequeue's expansion takes.

        Raises:
            CorruptManifestError: The index object is missing ("listed but missing") or differs from ``ref``.
        """
        cached = self._cached(ref)
        if cached is not None:
            return cached
        return self._remember(ref, self.manifest.read_index(ref))

    def _children_if_present(self, ref: SegmentRef) -> list[SegmentRef]:
        cached = self._cached(ref)
        if cached is not None:
            return cached
        refs = self.manifest.read_index_if_present(ref)
        if refs is None:
            raise _Gone(ref)
        return self._remember(ref, refs)

    def _cached(self, ref: SegmentRef) -> list[SegmentRef] | None:
        with self._lock:
            hit = self._cache.get(ref.key)
            if hit is None or hit[0] != ref.sha256:
                return None
            self._cache.move_to_end(ref.key)
            return hit[1]

    def _remember(self, ref: SegmentRef, refs: list[SegmentRef]) -> list[SegmentRef]:
        with self._lock:
            self._cache[ref.key] = (ref.sha256, refs)
            self._cache.move_to_end(ref.key)
            while len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
        return refs

    def leaves(self, head: RawHead, from_sequence: int | None = None, until: int | None = None) -> Iterator[SegmentRef]:
        """The segment refs covering sequences ``[from_sequence, until)`` (default: from the first queued
        sequence to the tail), in order, read lazily: one index object per level at a time.

        Raises:
            CorruptManifestError: An index object on the way is missing or differs from its ref.
        """
        lo = head.first_sequence if from_sequence is None else from_sequence
        hi = head.next_sequence if until is None else until
        return _walk(head.refs, lo, hi, self.children)

    def leaf_for(self, head: RawHead, sequence: int) -> SegmentRef | None:
        """The segment ref holding ``sequence`` (dequeued sequences below ``low_water`` included); None
        when no ref covers it (it is in the tail, or past it)."""
        return next(self.leaves(head, sequence, sequence + 1), None)

    def leaf_if_present(self, head: RawHead, sequence: int) -> SegmentRef | None:
        """As :meth:`leaf_for`, but None also when an index object on the way is gone (a dequeue expanded it
        since ``head`` was read, and GC collected it: the producer's resolution counts it as dequeued)."""
        try:
            return next(_walk(head.refs, sequence, sequence + 1, self._children_if_present), None)
        except _Gone:
            return None

    def reachable_keys(self, head: RawHead) -> set[str] | str:
        """GC's walk: the keys of every segment and index object reachable from ``head``, reading the
        index objects only; or the key of an index object that is missing (nothing may be deleted then).

        Raises:
            CorruptManifestError: An index object differs from its ref.
        """
        keys: set[str] = set()
        stack: list[SegmentRef] = list(reversed(head.refs))
        while stack:
            ref = stack.pop()
            keys.add(ref.key)
            if ref.level > 0:
                try:
                    stack.extend(reversed(self._children_if_present(ref)))
                except _Gone:
                    return ref.key
        return keys

    def entries(
        self,
        head: RawHead,
        from_sequence: int | None = None,
        read_segment: Callable[[SegmentRef], Sequence[ManifestEntry]] | None = None,
    ) -> Iterator[ManifestEntry]:
        """The queued entries from ``from_sequence`` (default: the first queued) on, segment by segment
        and then the tail: one segment in memory at a time, whatever the depth.

        Raises:
            CorruptManifestError: A segment or index object is missing or differs from its ref.
        """
        lo = max(head.first_sequence, head.first_sequence if from_sequence is None else from_sequence)
        read = read_segment or self.manifest.read_segment
        for leaf in self.leaves(head, lo, head.tail_first_sequence):
            for e in read(leaf):
                if e.sequence >= lo:
                    yield e
        for e in head.tail_entries():
            if e.sequence >= lo:
                yield e

    def bytes_between(self, head: RawHead, start: int, end: int) -> int:
        """Σ ``byte_length`` of the entries in ``[start, end)`` per their integrity records (0 for an entry
        without one): what a cut removes from ``queued_bytes`` (docs/format.md §2.3). Reads the segments
        holding such entries (one GET each)."""
        total = 0
        for leaf in self.leaves(head, start, min(end, head.tail_first_sequence)):
            total += sum(
                entry_byte_length(e.extension) for e in self.manifest.read_segment(leaf) if start <= e.sequence < end
            )
        if end > head.tail_first_sequence:
            total += sum(entry_byte_length(e.extension) for e in head.tail_entries() if start <= e.sequence < end)
        return total

    def entries_following(
        self, head: RawHead, from_sequence: int, reread: Callable[[int], RawHead | None]
    ) -> Iterator[ManifestEntry]:
        """As :meth:`entries`, for a reader that does not own the queue while a consumer dequeues: a segment
        or index object ``head`` listed that is gone is judged by :meth:`after_missing`, and the walk goes on
        from the head it returns, at the next sequence not yet yielded (it ends where that returns None).

        Raises:
            CorruptManifestError: A segment or index object is missing and the head read again still
                lists it, or an object differs from its ref.
        """
        position = max(from_sequence, head.first_sequence)
        while True:
            try:
                for leaf in _walk(head.refs, position, head.tail_first_sequence, self._children_if_present):
                    data = self.manifest.read_segment_bytes(leaf)
                    if data is None:
                        raise _Gone(leaf)
                    for e in decode_segment(data, leaf):
                        if e.sequence >= position:
                            position = e.sequence + 1
                            yield e
                break
            except _Gone as gone:
                found = self.after_missing(head, gone.ref, position, reread)
                if found is None:
                    return
                head, position = found, max(position, found.first_sequence)
        for e in head.tail_entries():
            if e.sequence >= position:
                yield e

    def after_missing(
        self, head: RawHead, gone: SegmentRef, position: int, reread: Callable[[int], RawHead | None]
    ) -> RawHead | None:
        """The one rule for a segment or index object that ``head`` listed and a reader found missing.

        The head is read again (``reread(position)``; it raises the fence error for a reader that took the
        queue over and sees another epoch, or returns None to stop). If that head still reaches the object
        for the sequences from ``position`` on, the queue is corrupt. Otherwise a consumer's dequeue dropped
        it (or expanded the index object) since ``head`` was read and GC collected it: the benign race, and
        the reader goes on from the returned head. None also when the queue was reset (another incarnation):
        nothing more of the queue ``head`` belonged to can be read.

        Raises:
            CorruptManifestError: The head read again still lists the missing object.
        """
        again = reread(position)
        if again is None or incarnation_of(again.epoch) != incarnation_of(head.epoch):
            return None
        if self._reaches(again, gone.key, max(position, again.first_sequence), gone.last_sequence + 1):
            what = "segment" if gone.level == 0 else "index object"
            raise CorruptManifestError(
                gone.key,
                f"{what} of '{self.manifest.key}' (sequences {gone.first_sequence} to {gone.last_sequence}) "
                "is listed but missing",
            )
        return again

    def _reaches(self, head: RawHead, key: str, lo: int, hi: int) -> bool:
        """Whether ``head``'s walk over ``[lo, hi)`` passes through ``key`` (index objects gone too are skipped)."""
        stack = [r for r in head.refs if r.last_sequence >= lo and r.first_sequence < hi]
        while stack:
            ref = stack.pop()
            if ref.key == key:
                return True
            if ref.level > 0:
                try:
                    below = self._children_if_present(ref)
                except _Gone:
                    continue
                stack.extend(r for r in below if r.last_sequence >= lo and r.first_sequence < hi)
        return False


def _walk(
    refs: Sequence[SegmentRef], lo: int, hi: int, children: Callable[[SegmentRef], Sequence[SegmentRef]]
) -> Iterator[SegmentRef]:
    for r in refs:
        if r.last_sequence < lo:
            continue
        if r.first_sequence >= hi:
            return
        if r.level == 0:
            yield r
        else:
            yield from _walk(children(r), lo, hi, children)
