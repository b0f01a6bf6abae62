"""osqueue: a stateless queue on object storage (RFC 0001 "Stateless Buffer" formats).

Producers flush batches of records to object storage and append their locations to one
manifest object with compare-and-swap; a single consumer reads them in order, fenced by an
epoch. See ``docs/format.md`` for the formats and the protocol.

The user API is here: :class:`Producer`, :class:`Consumer` (and what they hand out), the errors
a user catches, and :func:`jar_path` for Spark. The layers live in their subpackages:
``osqueue.format`` (byte formats), ``osqueue.store`` (object stores, ``open_store``),
``osqueue.queue`` (the manifest protocol), ``osqueue.gc``, ``osqueue.metrics``, ``osqueue.errors``
(every error) and ``osqueue.spark`` (the PySpark helpers).
"""

from osqueue._jar import jar_path
from osqueue._version import __version__
from osqueue.consumer import ConsumedBatch, Consumer, FetchHandle
from osqueue.errors import (
    AmbiguousCommitError,
    ConflictRetriesExhaustedError,
    CorruptSpoolError,
    DataLossError,
    ErrorKind,
    FencedError,
    InvalidConfigError,
    OsqueueError,
    QueueFullError,
    ResumePointError,
    StoreError,
)
from osqueue.producer import DurableWrite, Producer, WriteHandle

__all__ = [
    "__version__",
    "jar_path",
    "Producer",
    "WriteHandle",
    "DurableWrite",
    "Consumer",
    "ConsumedBatch",
    "FetchHandle",
    "ErrorKind",
    "OsqueueError",
    "InvalidConfigError",
    "FencedError",
    "ResumePointError",
    "StoreError",
    "ConflictRetriesExhaustedError",
    "AmbiguousCommitError",
    "DataLossError",
    "QueueFullError",
    "CorruptSpoolError",
]
