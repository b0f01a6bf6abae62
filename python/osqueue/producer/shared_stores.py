"""Stores opened from a path, shared by the producers of a process (JVM: none, see parity.json)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from osqueue.store.object_store import ObjectStore
from osqueue.store.object_stores import open_store


class SharedStores:
    """Stores opened from a path, shared by the producers of a process (so those with the same
    committer settings also share one group committer) and closed with the last of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stores: dict[tuple[str, tuple[tuple[str, str], ...]], list[Any]] = {}

    @staticmethod
    def _key(path: str, options: Mapping[str, Any] | None) -> tuple[str, tuple[tuple[str, str], ...]]:
        return path, tuple(sorted((str(k).lower(), str(v)) for k, v in (options or {}).items()))

    def acquire(self, path: str, options: Mapping[str, Any] | None) -> ObjectStore:
        key = self._key(path, options)
        with self._lock:
            found = self._stores.get(key)
            if found is None:
                found = self._stores[key] = [open_store(path, options), 0]
            found[1] += 1
            store: ObjectStore = found[0]
            return store

    def release(self, path: str, options: Mapping[str, Any] | None) -> None:
        key = self._key(path, options)
        with self._lock:
            found = self._stores.get(key)
            if found is None:
                return
            found[1] -= 1
            if found[1] > 0:
                return
            del self._stores[key]
        found[0].close()


SHARED_STORES = SharedStores()
"""The process's shared stores (``Producer(path=...)``)."""
