"""The manifest object: its key, reads and conditional writes (JVM: ``ManifestStore``)."""

from __future__ import annotations

from dataclasses import dataclass

from osqueue.format.dequeue_receipts import RECEIPTS_SUFFIX, DequeueReceipts
from osqueue.format.incarnation import INCARNATION_SUFFIX
from osqueue.format.manifest import Manifest
from osqueue.format.manifest_codec import decode_manifest
from osqueue.store.object_store import CasOutcome, ObjectStore, ObjectVersion, validate_key

DEFAULT_MANIFEST_PATH = "ingest/manifest"
DEFAULT_DATA_PATH_PREFIX = "ingest"


@dataclass(frozen=True)
class Snapshot:
    """The manifest as read: its bytes (None when it does not exist) and its version."""

    raw: bytes | None
    version: ObjectVersion | None


class ManifestStore:
    """Reads and compare-and-swaps one manifest object.

    Args:
        store: The object store.
        key: The manifest's key (default ``ingest/manifest``).
    """

    def __init__(self, store: ObjectStore, key: str = DEFAULT_MANIFEST_PATH) -> None:
        self.store = store
        self.key = validate_key(key)

    def read_raw(self) -> tuple[bytes | None, ObjectVersion | None]:
        """The manifest's bytes and version; ``(None, None)`` when it does not exist."""
        obj = self.store.get(self.key)
        return (None, None) if obj is None else (obj.data, obj.version)

    def decode(self, raw: bytes | None) -> Manifest:
        """Decodes raw bytes; None is the empty manifest."""
        return Manifest([], 0, 0) if raw is None else decode_manifest(raw, self.key)

    def read(self) -> tuple[Manifest, ObjectVersion | None]:
        """The decoded manifest (empty when missing) and its version."""
        raw, version = self.read_raw()
        return self.decode(raw), version

    def write(self, data: bytes, expected: ObjectVersion | None) -> CasOutcome:
        """Create-if-absent when ``expected`` is None, else put-if-version-matches."""
        if expected is None:
            return self.store.put_if_absent(self.key, data)
        return self.store.put_if_version_matches(self.key, data, expected)

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
