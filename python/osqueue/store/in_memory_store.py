"""An in-process store for unit tests (JVM: ``InMemoryStore``)."""

from __future__ import annotations

import itertools
import threading

from osqueue.clock import Clock, SystemClock
from osqueue.store.object_store import (
    PRECONDITION_FAILED,
    CasOutcome,
    ObjectInfo,
    ObjectVersion,
    VersionedObject,
    Written,
    validate_key,
    validate_prefix,
)

# In memory


class InMemoryStore:
    """A thread-safe in-process store (unit tests). Versions come from a store-wide counter, and
    listed last-modified times from ``clock`` (the store's clock, which tests may set apart from a
    producer's or GC's).

    ``InMemoryStore.named(name)`` returns the process-wide store behind ``memory://name``.
    """

    _registry: dict[str, InMemoryStore] = {}
    _registry_lock = threading.Lock()

    def __init__(self, name: str = "test", clock: Clock | None = None) -> None:
        self._name = name
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[bytes, ObjectVersion, int]] = {}
        self._counter = itertools.count(1)

    @classmethod
    def named(cls, name: str) -> InMemoryStore:
        """The shared store for ``memory://name`` (created on first use)."""
        with cls._registry_lock:
            store = cls._registry.get(name)
            if store is None:
                store = cls._registry[name] = cls(name)
            return store

    @classmethod
    def forget(cls, name: str) -> None:
        """Drops the shared store ``memory://name``."""
        with cls._registry_lock:
            cls._registry.pop(name, None)

    @property
    def uri(self) -> str:
        return f"memory://{self._name}"

    def _new_version(self) -> ObjectVersion:
        return ObjectVersion(f"mem:{next(self._counter)}")

    def get(self, key: str) -> VersionedObject | None:
        validate_key(key)
        with self._lock:
            found = self._objects.get(key)
        return None if found is None else VersionedObject(found[0], found[1])

    def _store(self, key: str, data: bytes) -> ObjectVersion:
        version = self._new_version()
        self._objects[key] = (bytes(data), version, self._clock.now_ms())
        return version

    def put(self, key: str, data: bytes) -> None:
        validate_key(key)
        with self._lock:
            self._store(key, data)

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        validate_key(key)
        with self._lock:
            if key in self._objects:
                return PRECONDITION_FAILED
            return Written(self._store(key, data))

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        validate_key(key)
        with self._lock:
            found = self._objects.get(key)
            if found is None or found[1] != expected_version:
                return PRECONDITION_FAILED
            return Written(self._store(key, data))

    def list(self, prefix: str) -> list[ObjectInfo]:
        validate_prefix(prefix)
        with self._lock:
            return [ObjectInfo(k, len(v[0]), v[2]) for k, v in self._objects.items() if k.startswith(prefix)]

    def delete(self, key: str) -> None:
        validate_key(key)
        with self._lock:
            self._objects.pop(key, None)

    def close(self) -> None:
        pass
