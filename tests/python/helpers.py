"""Test helpers: a manual clock and fault-injecting store wrappers."""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable

from osqueue.errors import StoreError
from osqueue.queue import ManifestStore
from osqueue.store import (
    PRECONDITION_FAILED,
    CasOutcome,
    ObjectInfo,
    ObjectStore,
    ObjectVersion,
    VersionedObject,
)

T0_MS = 1767225600000  # 2026-01-01T00:00:00Z


class ManualClock:
    """A clock that moves only when told to; ``sleep`` advances it instead of waiting."""

    def __init__(self, start_ms: int = T0_MS) -> None:
        self._lock = threading.Lock()
        self._ms = start_ms
        self._mono = 1000.0
        self.sleeps: list[float] = []

    def now_ms(self) -> int:
        with self._lock:
            return self._ms

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._ms += int(round(seconds * 1000))
            self._mono += seconds

    def advance_monotonic(self, seconds: float) -> None:
        """Time passes but the wall clock shows none of it (as when NTP steps it back meanwhile)."""
        with self._lock:
            self._mono += seconds


ConditionalHook = Callable[[str, bytes, "ObjectVersion | None", Callable[[], CasOutcome]], CasOutcome]


class WrappedStore:
    """Delegates to ``inner``; hooks can intercept operations. Counts calls."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.lock = threading.Lock()
        self.conditional_calls = 0
        self.get_calls = 0
        self.put_calls = 0
        self.on_conditional: ConditionalHook | None = None
        self.on_put: Callable[[str, bytes], None] | None = None
        self.on_list: Callable[[str], None] | None = None
        self.on_delete: Callable[[str], None] | None = None

    @property
    def uri(self) -> str:
        return "wrapped+" + self.inner.uri

    def get(self, key: str) -> VersionedObject | None:
        with self.lock:
            self.get_calls += 1
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        with self.lock:
            self.put_calls += 1
        if self.on_put is not None:
            self.on_put(key, data)
        self.inner.put(key, data)

    def _conditional(self, key: str, data: bytes, expected: ObjectVersion | None) -> CasOutcome:
        with self.lock:
            self.conditional_calls += 1

        def apply() -> CasOutcome:
            if expected is None:
                return self.inner.put_if_absent(key, data)
            return self.inner.put_if_version_matches(key, data, expected)

        if self.on_conditional is not None:
            return self.on_conditional(key, data, expected, apply)
        return apply()

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        return self._conditional(key, data, None)

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        return self._conditional(key, data, expected_version)

    def list(self, prefix: str) -> list[ObjectInfo]:
        if self.on_list is not None:
            self.on_list(prefix)
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        if self.on_delete is not None:
            self.on_delete(key)
        self.inner.delete(key)

    def close(self) -> None:
        pass


def lost_reply_hook(should_fail: Callable[[], bool]) -> ConditionalHook:
    """Applies the write, then (when ``should_fail()``) raises StoreError: the reply was lost."""

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        outcome = apply()
        if should_fail():
            raise StoreError("connection reset after the request was sent (test)")
        return outcome

    return hook


def lying_precondition_hook(should_lie: Callable[[], bool]) -> ConditionalHook:
    """Applies the write, then (when ``should_lie()`` and it landed) reports a failed
    precondition, as a client-side retry of a landed write would."""

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        outcome = apply()
        if should_lie():
            return PRECONDITION_FAILED
        return outcome

    return hook


def manifest_locations(store: ObjectStore, key: str = "ingest/manifest") -> list[str]:
    obj = store.get(key)
    if obj is None:
        return []
    return [e.location for e in ManifestStore(store, key).decode(obj.data).entries]


def assert_well_formed(store: ObjectStore, key: str = "ingest/manifest") -> list[str]:
    """Decodes the manifest (checks contiguity) and asserts there are no duplicate locations."""
    obj = store.get(key)
    assert obj is not None
    manifest = ManifestStore(store, key).decode(obj.data)  # a segmented head with its segments
    locations = [e.location for e in manifest.entries]
    assert len(locations) == len(set(locations)), "duplicate manifest entries"
    seqs = [e.sequence for e in manifest.entries]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True
    return locations


def v2_as_v3(v2: bytes) -> bytes:
    """A version 2 head (docs/format.md §2.2) as writers now write it: version 3 without sections, with
    ``head_crc32`` (§2.3, docs/adr/0006 item 3). Built from the bytes, not by the encoder under test."""
    segments_len, count, low_water = struct.unpack_from("<IIQ", v2, len(v2) - 38)
    footer = v2[-22:-2] + struct.pack("<H", 3)
    before = v2[:-38] + struct.pack("<IIIIQ", 0, 0, segments_len, count, low_water)
    return before + struct.pack("<I", zlib.crc32(before + footer)) + footer


def with_head_crc(head: bytes | bytearray) -> bytes:
    """A version 3 head with its ``head_crc32`` computed again (a test that damages another field on
    purpose, so that the field's own check is what fails)."""
    at = len(head) - 26
    crc = zlib.crc32(bytes(head[:at]) + bytes(head[at + 4 :]))
    return bytes(head[:at]) + struct.pack("<I", crc) + bytes(head[at + 4 :])
