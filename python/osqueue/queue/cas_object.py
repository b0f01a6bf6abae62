"""One object written only by compare-and-swap (JVM: ``osqueue.queue.CasObject``)."""

from __future__ import annotations

from dataclasses import dataclass

from osqueue.store.object_store import CasOutcome, ObjectStore, ObjectVersion, validate_key


@dataclass(frozen=True)
class Snapshot:
    """An object as read: its bytes (None when it does not exist) and its version."""

    raw: bytes | None
    version: ObjectVersion | None


class CasObject:
    """Versioned reads, create-if-absent and overwrite-if-unchanged of one object.

    :class:`~osqueue.queue.cas_loop.CasLoop` runs its read-modify-write edits; the manifest
    (:class:`~osqueue.queue.manifest_store.ManifestStore`) is one, as on the JVM (where the Spark
    sink's writer states and the queue id are too).

    Args:
        store: The object store.
        key: The object's key.
    """

    def __init__(self, store: ObjectStore, key: str) -> None:
        self.store = store
        self.key = validate_key(key)

    def read(self) -> Snapshot:
        """The object's bytes and version; both None when it does not exist."""
        obj = self.store.get(self.key)
        return Snapshot(None, None) if obj is None else Snapshot(obj.data, obj.version)

    def write(self, data: bytes, expected: ObjectVersion | None) -> CasOutcome:
        """Create-if-absent when ``expected`` is None, else put-if-version-matches."""
        if expected is None:
            return self.store.put_if_absent(self.key, data)
        return self.store.put_if_version_matches(self.key, data, expected)
