"""The object-store protocol, its value types and key rules (JVM: ``ObjectStore``, ``ObjectKeys``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol, runtime_checkable

from osqueue.errors import InvalidObjectKeyError


@dataclass(frozen=True)
class ObjectVersion:
    """An opaque object version: S3's ETag, a content hash on disk, a counter in memory."""

    token: str


@dataclass(frozen=True)
class VersionedObject:
    """An object's bytes and the version they were read at."""

    data: bytes
    version: ObjectVersion


@dataclass(frozen=True)
class ObjectInfo:
    """A listed object.

    Attributes:
        key: The object's key.
        size: Its length in bytes.
        last_modified_ms: When the store last wrote it, in ms since the Unix epoch by the STORE's
            clock (S3 ``LastModified``, GCS ``updated``, Azure ``Last-Modified``, a file's mtime). GC
            ages objects by it, never by a writer's clock (docs/format.md §6).
    """

    key: str
    size: int
    last_modified_ms: int


@dataclass(frozen=True)
class Written:
    """A conditional write was applied; ``version`` is the object's new version."""

    version: ObjectVersion


@dataclass(frozen=True)
class PreconditionFailed:
    """The condition did not hold (HTTP 412/409): the object changed, or already existed.

    A store returns this only when the write was certainly *not* applied.
    """


PRECONDITION_FAILED = PreconditionFailed()

CasOutcome = Written | PreconditionFailed
"""The outcome of a conditional write. A raised ``StoreError`` means the outcome is unknown."""


@runtime_checkable
class ObjectStore(Protocol):
    """The object-store operations the queue needs.

    Implementations are thread-safe.
    """

    @property
    def uri(self) -> str:
        """Where this store points, for messages: ``s3://bucket/prefix``, ``file:/dir``, ..."""
        ...

    def get(self, key: str) -> VersionedObject | None:
        """The object and its version, or None if it does not exist."""
        ...

    def put(self, key: str, data: bytes) -> None:
        """Unconditional write (batch files: ULID names are never reused)."""
        ...

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        """Create only if the key does not exist."""
        ...

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        """Overwrite only if the current version is ``expected_version``."""
        ...

    def list(self, prefix: str) -> list[ObjectInfo]:
        """All objects whose key starts with ``prefix`` (recursively), in no particular order."""
        ...

    def delete(self, key: str) -> None:
        """Delete; deleting a missing key succeeds."""
        ...

    def close(self) -> None:
        """Release resources (connections)."""
        ...


def delete_many(store: ObjectStore, keys: Sequence[str]) -> None:
    """Deletes ``keys``: in one request per 1,000 keys where the store has a bulk delete (S3's DeleteObjects:
    ``S3Store.delete_many``), else one by one; a missing key is no error (JVM: ``ObjectStore.deleteMany``)."""
    bulk = getattr(store, "delete_many", None)
    if bulk is not None:
        bulk(keys)
        return
    for k in keys:
        store.delete(k)


def validate_key(key: str) -> str:
    """Rejects keys that are empty or absolute, or contain ``.``/``..``/empty segments,
    backslashes, NULs or ``://``; returns the key unchanged otherwise.

    Raises:
        InvalidObjectKeyError: The key is not a plain relative key.
    """
    if not isinstance(key, str) or key == "":
        raise InvalidObjectKeyError(str(key) if key is not None else "", "empty key")
    if key.startswith("/"):
        raise InvalidObjectKeyError(key, "absolute keys are not allowed")
    if "\\" in key:
        raise InvalidObjectKeyError(key, "backslashes are not allowed")
    if "\x00" in key:
        raise InvalidObjectKeyError(key, "NUL characters are not allowed")
    if "://" in key:
        raise InvalidObjectKeyError(key, "keys are relative to the store root, not URIs")
    segments = key.split("/")
    if any(s == "" for s in segments):
        raise InvalidObjectKeyError(key, "empty path segment")
    if any(s in (".", "..") for s in segments):
        raise InvalidObjectKeyError(key, "'.' and '..' segments are not allowed")
    return key


def validate_prefix(prefix: str) -> str:
    """A list prefix: empty, or a key optionally followed by ``/``."""
    if prefix == "":
        return prefix
    validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


UNKNOWN_LAST_MODIFIED_MS = 2**63 - 1
"""A listed object's time when the store gave none: "just now" forever, so GC never ages it."""


def epoch_ms(when: datetime | None) -> int:
    """A store's listed timestamp in ms since the Unix epoch (:data:`UNKNOWN_LAST_MODIFIED_MS` if absent)."""
    if when is None:
        return UNKNOWN_LAST_MODIFIED_MS
    if when.tzinfo is None:  # stores report UTC
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def join_key(prefix: str, name: str) -> str:
    """Joins a prefix and a name with exactly one ``/``. An empty prefix yields the name."""
    return name if prefix == "" else prefix.rstrip("/") + "/" + name
