"""The errors osqueue raises on purpose.

The names and messages mirror the JVM's ``osqueue.errors`` (``FooException`` there is
``FooError`` here). Every error carries a :class:`ErrorKind` in ``.kind`` that tells a caller
what it can do about it:

* ``Configuration``: fix the input (option, URI, key);
* ``PersistentState``: stored bytes are corrupt, of an unknown version, or missing;
* ``Fenced``: another consumer took over the queue, this one must stop;
* ``Transient``: the same call may succeed later;
* ``Operation``: a call on an object in the wrong state.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

__all__ = [
    "ErrorKind",
    "OsqueueError",
    "InvalidConfigError",
    "InvalidObjectKeyError",
    "CorruptManifestError",
    "CorruptBatchError",
    "UnsupportedFormatVersionError",
    "BatchNotFoundError",
    "FencedError",
    "WriterFencedError",
    "ResumePointError",
    "ConflictRetriesExhaustedError",
    "AmbiguousCommitError",
    "StoreError",
    "ConditionalWritesNotHonouredError",
    "IllegalQueueStateError",
]


class ErrorKind(str, enum.Enum):
    """The public kind of every osqueue failure: what a caller can do about it."""

    CONFIGURATION = "Configuration"
    PERSISTENT_STATE = "PersistentState"
    FENCED = "Fenced"
    TRANSIENT = "Transient"
    OPERATION = "Operation"


class OsqueueError(Exception):
    """Base of every error osqueue raises on purpose.

    Attributes:
        kind: What a caller can do about the error.
    """

    kind: ErrorKind = ErrorKind.OPERATION

    def __init__(self, message: str, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind

    @property
    def message(self) -> str:
        """The error message."""
        return str(self.args[0]) if self.args else ""


class InvalidConfigError(OsqueueError, ValueError):
    """An option or argument is invalid; the message names it and echoes the value.

    Attributes:
        option: The option (or argument) name.
        value: The rejected value, as text.
    """

    def __init__(self, option: str, value: object, hint: str) -> None:
        self.option = option
        self.value = str(value)
        super().__init__(f"invalid value for '{option}': '{value}'. {hint}", ErrorKind.CONFIGURATION)


class InvalidObjectKeyError(OsqueueError, ValueError):
    """An object key would escape the store root or is not a plain relative key.

    Attributes:
        key: The rejected key.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        super().__init__(f"invalid object key '{key}': {reason}", ErrorKind.CONFIGURATION)


class CorruptManifestError(OsqueueError):
    """A manifest object does not decode.

    Attributes:
        key: The manifest's key in its store.
    """

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(f"corrupt queue manifest '{key}': {detail}", ErrorKind.PERSISTENT_STATE)


class CorruptBatchError(OsqueueError):
    """A batch object does not decode.

    Attributes:
        key: The batch's key in its store.
    """

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(f"corrupt data batch '{key}': {detail}", ErrorKind.PERSISTENT_STATE)


class UnsupportedFormatVersionError(OsqueueError):
    """A manifest or batch was written by a newer (or unknown) format version.

    Attributes:
        key: The object's key.
        object_type: ``"manifest"`` or ``"batch"``.
        version: The version found in the footer.
        reads: The versions the reader that refused it reads.
    """

    def __init__(self, key: str, object_type: str, version: int, reads: Sequence[int] = (1,)) -> None:
        self.key = key
        self.object_type = object_type
        self.version = version
        self.reads = tuple(reads)
        super().__init__(
            f"{object_type} '{key}' has format version {version}; this osqueue reads {_versions(self.reads)} only "
            "(upgrade osqueue)",
            ErrorKind.PERSISTENT_STATE,
        )


def _versions(reads: Sequence[int]) -> str:
    """``version 1`` or ``versions 1 and 2``: what a reader reads, for messages."""
    if len(reads) == 1:
        return f"version {reads[0]}"
    return "versions " + ", ".join(str(v) for v in reads[:-1]) + f" and {reads[-1]}"


class BatchNotFoundError(OsqueueError):
    """A manifest entry points at a batch object that does not exist.

    Attributes:
        key: The missing batch's key.
        sequence: The sequence of the manifest entry.
    """

    def __init__(self, key: str, sequence: int) -> None:
        self.key = key
        self.sequence = sequence
        super().__init__(
            f"data batch '{key}' (sequence {sequence}) is referenced by the manifest but does not exist",
            ErrorKind.PERSISTENT_STATE,
        )


class FencedError(OsqueueError):
    """This consumer's epoch is no longer the manifest's: a newer consumer fenced it.

    Attributes:
        own_epoch: The epoch this consumer wrote at initialization.
        current_epoch: The manifest's epoch now.
    """

    def __init__(self, own_epoch: int, current_epoch: int) -> None:
        self.own_epoch = own_epoch
        self.current_epoch = current_epoch
        super().__init__(
            f"consumer with epoch {own_epoch} was fenced: the queue manifest is now at epoch "
            f"{current_epoch} (another consumer initialized the queue)",
            ErrorKind.FENCED,
        )


class WriterFencedError(OsqueueError):
    """A Spark sink driver's writer generation is no longer the writer state's: a newer driver of the
    same writer id (its query restarted elsewhere) claimed it (docs/adr/0002).

    Attributes:
        writer_id: The sink's writer id.
        own_generation: The generation this driver claimed (None: claimed by another process of its run).
        current_generation: The writer state's generation now.
    """

    def __init__(self, writer_id: str, own_generation: int | None, current_generation: int) -> None:
        self.writer_id = writer_id
        self.own_generation = own_generation
        self.current_generation = current_generation
        own = "an older generation" if own_generation is None else f"generation {own_generation}"
        super().__init__(
            f"sink writer '{writer_id}' with {own} was fenced: generation {current_generation} "
            "now owns it (a newer driver of the same query or writerId started)",
            ErrorKind.FENCED,
        )


class ResumePointError(OsqueueError):
    """A resume point that the queue cannot honour without skipping or replaying entries."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorKind.PERSISTENT_STATE)


class ConflictRetriesExhaustedError(OsqueueError):
    """Compare-and-swap on the manifest kept conflicting until the retry budget ran out.

    Attributes:
        key: The manifest key.
        attempts: Attempts made.
        elapsed_ms: Time spent, in milliseconds.
    """

    def __init__(self, key: str, attempts: int, elapsed_ms: int) -> None:
        self.key = key
        self.attempts = attempts
        self.elapsed_ms = elapsed_ms
        super().__init__(
            f"manifest '{key}' update gave up after {attempts} conflicting attempts in {elapsed_ms} ms "
            "(too many concurrent writers; raise the retry budget or add group commit)",
            ErrorKind.TRANSIENT,
        )


class AmbiguousCommitError(OsqueueError):
    """A write's outcome could not be determined (its reply was lost and the evidence is gone)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorKind.TRANSIENT)


class CorruptSpoolError(OsqueueError):
    """A producer spool's log file is damaged in the middle (not a torn tail): nothing is uploaded
    from the spool until an operator moves the file away (docs/adr/0006, part 2).

    Attributes:
        path: The log file.
        offset: Where the damaged record starts.
    """

    def __init__(self, path: str, offset: int, detail: str) -> None:
        self.path = path
        self.offset = offset
        super().__init__(
            f"corrupt producer spool file '{path}' at offset {offset}: {detail}; move the file away to start",
            ErrorKind.PERSISTENT_STATE,
        )


class QueueFullError(OsqueueError):
    """A cap was reached: a producer spool's ``spool_max_bytes`` (or a queue's size cap, ADR 0005)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorKind.TRANSIENT)


class DataLossError(OsqueueError):
    """Retention removed entries a reader had not read (docs/format.md §2.3, ADR 0005): ``count``
    entries from sequence ``first`` on. The reader has moved past them; reading again goes on.

    Attributes:
        subscription: The reader's subscription (None: the unnamed reader).
        first: The first lost sequence.
        count: How many consecutive entries were lost.
    """

    def __init__(self, subscription: str | None, first: int, count: int) -> None:
        self.subscription = subscription
        self.first = first
        self.count = count
        who = "the unnamed reader" if subscription is None else f"subscription '{subscription}'"
        super().__init__(
            f"data loss: retention removed {count} entries ({first}..{first + count - 1}) before {who} read them",
            ErrorKind.PERSISTENT_STATE,
        )


class StoreError(OsqueueError):
    """The object store failed (I/O error, 5xx, timeout, unreachable endpoint).

    After a conditional write raises this error, the write may or may not have been applied,
    unless ``outcome_known`` is True (the store rejected the request outright, e.g. HTTP 403).

    Attributes:
        outcome_known: True when the failed write was certainly not applied.
    """

    def __init__(self, message: str, *, outcome_known: bool = False) -> None:
        self.outcome_known = outcome_known
        super().__init__(message, ErrorKind.TRANSIENT)


class ConditionalWritesNotHonouredError(OsqueueError):
    """The S3 endpoint does not honour conditional writes (``If-None-Match: *``, ``If-Match``).

    A store that accepts a condition and overwrites anyway would lose entries without an error,
    so osqueue refuses it (docs/format.md §8). Raised by the probe a store runs before its first
    conditional write, and when ``If-Match`` with the object's current entity tag keeps failing.

    Attributes:
        endpoint: The S3 endpoint.
        detail: What the endpoint did.
    """

    def __init__(self, endpoint: str, detail: str) -> None:
        self.endpoint = endpoint
        self.detail = detail
        super().__init__(
            f"the object store endpoint {endpoint} does not honour conditional writes: {detail}. osqueue needs "
            "create-if-absent and replace-if-unchanged writes to keep the manifest consistent and refuses this store",
            ErrorKind.CONFIGURATION,
        )


class IllegalQueueStateError(OsqueueError):
    """A call on an object in the wrong state: closed producer or consumer, out-of-order ack."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorKind.OPERATION)
