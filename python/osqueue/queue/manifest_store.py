"""The manifest object: its key, reads and conditional writes (JVM: ``ManifestStore``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from osqueue.errors import CorruptManifestError
from osqueue.format.batch_names import SupportsRandBits
from osqueue.format.dequeue_receipts import RECEIPTS_SUFFIX, DequeueReceipts
from osqueue.format.incarnation import INCARNATION_SUFFIX
from osqueue.format.index_object import FoldedIndex, decode_index, decode_segment
from osqueue.format.manifest import Manifest, ManifestEntry
from osqueue.format.manifest_codec import decode_manifest, empty_manifest
from osqueue.format.manifest_head import RawHead, SealedTail, parse_head
from osqueue.format.segment_names import new_index_key
from osqueue.format.segment_names import new_key as new_segment_key
from osqueue.format.segment_ref import SegmentRef
from osqueue.queue.cas_object import CasObject
from osqueue.queue.segment_tree import SegmentTree
from osqueue.store.object_store import CasOutcome, ObjectStore, ObjectVersion

DEFAULT_MANIFEST_PATH = "ingest/manifest"
DEFAULT_DATA_PATH_PREFIX = "ingest"
SEGMENT_READS_IN_FLIGHT = 8
"""Segment GETs in flight at once when a whole segmented manifest is read (as on the JVM)."""


class ManifestStore:
    """The one manifest object of a queue (a :class:`CasObject`) and the objects it lists: its
    codec, segments, index objects, and the receipts and incarnation beside it.

    Args:
        store: The object store.
        key: The manifest's key (default ``ingest/manifest``).
    """

    def __init__(self, store: ObjectStore, key: str = DEFAULT_MANIFEST_PATH) -> None:
        self.cas_object = CasObject(store, key)
        """The manifest as a CAS register: what :class:`~osqueue.queue.cas_loop.CasLoop` runs its edits on."""
        self.store = store
        self.key = self.cas_object.key

    def read_raw(self) -> tuple[bytes | None, ObjectVersion | None]:
        """The manifest's bytes and version; ``(None, None)`` when it does not exist."""
        snapshot = self.cas_object.read()
        return snapshot.raw, snapshot.version

    def decode(self, raw: bytes | None) -> Manifest:
        """Decodes raw bytes; None is the empty manifest. A segmented head's segments are all read
        (memory grows with the queue: lazy readers use :meth:`head` and a
        :class:`~osqueue.queue.segment_tree.SegmentTree`), ``SEGMENT_READS_IN_FLIGHT`` at a time."""
        if raw is None:
            return Manifest([], 0, 0)
        head = self.head(raw)
        if not head.refs:  # v1, or v3 without segments (its tail is every queued entry)
            if head.version == 1:
                return decode_manifest(raw, self.key)
            return Manifest(head.tail_entries(), head.next_sequence, head.epoch)
        leaves = list(SegmentTree(self).leaves(head, head.first_sequence, head.tail_first_sequence))
        with ThreadPoolExecutor(SEGMENT_READS_IN_FLIGHT, thread_name_prefix="osqueue-segment-reader") as pool:
            sealed = [e for entries in pool.map(self.read_segment, leaves) for e in entries]
        queued = [e for e in sealed if e.sequence >= head.low_water] + head.tail_entries()
        return Manifest(queued, head.next_sequence, head.epoch)

    def head(self, raw: bytes | None) -> RawHead:
        """The manifest as writers and lazy readers see it (docs/format.md §2.2); None is the empty manifest."""
        return parse_head(empty_manifest() if raw is None else raw, self.key)

    def read_segment(self, ref: SegmentRef) -> list[ManifestEntry]:
        """A listed segment's entries, checked against its ref.

        Raises:
            CorruptManifestError: The segment is missing ("listed but missing") or differs from its ref.
        """
        data = self.read_segment_bytes(ref)
        if data is None:
            raise CorruptManifestError(
                ref.key,
                f"segment of '{self.key}' (sequences {ref.first_sequence} to {ref.last_sequence}) is listed but missing",
            )
        return decode_segment(data, ref)

    def read_segment_bytes(self, ref: SegmentRef) -> bytes | None:
        """The segment's (or index object's) bytes, None if it is gone (a reader racing the dequeue
        that dropped it, and GC)."""
        obj = self.store.get(ref.key)
        return None if obj is None else obj.data

    def read_index(self, ref: SegmentRef) -> list[SegmentRef]:
        """A listed index object's refs, checked against its ref.

        Raises:
            CorruptManifestError: The index object is missing ("listed but missing") or differs from its ref.
        """
        refs = self.read_index_if_present(ref)
        if refs is None:
            raise CorruptManifestError(
                ref.key,
                f"index object of '{self.key}' (sequences {ref.first_sequence} to {ref.last_sequence}) "
                "is listed but missing",
            )
        return refs

    def read_index_if_present(self, ref: SegmentRef) -> list[SegmentRef] | None:
        """As :meth:`read_index`, but None when the object is gone."""
        data = self.read_segment_bytes(ref)
        return None if data is None else decode_index(data, ref)

    def write_index(self, folded: FoldedIndex, now_ms: int, rng: SupportsRandBits) -> SegmentRef:
        """Stores a folded index object under a fresh name (before any head lists it, docs/format.md §2.2)."""
        ref = folded.ref(new_index_key(self.key, now_ms, rng))
        self.store.put(ref.key, folded.data)
        return ref

    def write_segment(self, sealed: SealedTail, now_ms: int, rng: SupportsRandBits) -> SegmentRef:
        """Stores a sealed tail under a fresh segment name (before any head lists it, docs/format.md §2.2)."""
        ref = sealed.ref(new_segment_key(self.key, now_ms, rng))
        self.store.put(ref.key, sealed.data)
        return ref

    def read(self) -> tuple[Manifest, ObjectVersion | None]:
        """The decoded manifest (empty when missing) and its version."""
        raw, version = self.read_raw()
        return self.decode(raw), version

    def write(self, data: bytes, expected: ObjectVersion | None) -> CasOutcome:
        """Create-if-absent when ``expected`` is None, else put-if-version-matches."""
        return self.cas_object.write(data, expected)

    @property
    def receipts_key(self) -> str:
        """``<manifest>.dequeued``: the dequeue receipts (docs/format.md §5.1)."""
        return self.key + RECEIPTS_SUFFIX

    def read_receipts(self) -> DequeueReceipts | None:
        """The dequeue receipts; None when absent or not receipts v1. Raises ``StoreError``."""
        obj = self.store.get(self.receipts_key)
        return None if obj is None else DequeueReceipts.decode(obj.data)

    def write_receipts(self, receipts: DequeueReceipts) -> None:
        self.store.put(self.receipts_key, receipts.encode())

    @property
    def incarnation_key(self) -> str:
        """``<manifest>.incarnation``: the incarnation the last consumer initialized (§5.2)."""
        return self.key + INCARNATION_SUFFIX

    def read_recorded_incarnation(self) -> int | None:
        """The recorded incarnation; None when absent or not a decimal number."""
        obj = self.store.get(self.incarnation_key)
        if obj is None:
            return None
        text = obj.data.decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None

    def record_incarnation(self, incarnation: int) -> None:
        self.store.put(self.incarnation_key, str(incarnation).encode("ascii"))
