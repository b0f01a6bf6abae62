"""osqueue: a stateless queue on object storage (RFC 0001 "Stateless Buffer" formats).

Producers flush batches of records to object storage and append their locations to one
manifest object with compare-and-swap; a single consumer reads them in order, fenced by an
epoch. See ``docs/format.md`` for the formats and the protocol.

The user API is here: :class:`Producer`, :class:`Consumer` (and what they hand out), the errors
a user catches, and :func:`jar_path` for Spark. The layers live in their subpackages:
``osqueue.format`` (byte formats), ``osqueue.store`` (object stores, ``open_store``),
``osqueue.queue`` (the manifest protocol), ``osqueue.gc``, ``osqueue.metrics``, ``osqueue.errors``
(every error) and ``osqueue.spark`` (the PySpark helpers).

The names are loaded at first use (PEP 562 ``__getattr__``): ``import osqueue.spark_source`` runs this
module first, in each of the Python processes Spark starts per query, and needs neither the producer
nor the consumer nor the jar helpers (``tests/python/test_import_cost.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from osqueue._version import __version__

if TYPE_CHECKING:
    from osqueue._jar import jar_path
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

LAZY_NAMES: dict[str, str] = {
    "jar_path": "osqueue._jar",
    "Producer": "osqueue.producer",
    "WriteHandle": "osqueue.producer",
    "DurableWrite": "osqueue.producer",
    "Consumer": "osqueue.consumer",
    "ConsumedBatch": "osqueue.consumer",
    "FetchHandle": "osqueue.consumer",
    **{
        name: "osqueue.errors"
        for name in (
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
        )
    },
}
"""Each user-API name and the module that defines it, imported at the name's first use."""

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


LAZY_MODULES = ("consumer", "producer", "errors")
"""The subpackages this module imported before its names were lazy: ``import osqueue`` then
``osqueue.errors.X`` keeps working."""


def __getattr__(name: str) -> Any:
    module = LAZY_NAMES.get(name)
    if module is None:
        if name in LAZY_MODULES:
            return importlib.import_module(f"osqueue.{name}")
        raise AttributeError(f"module 'osqueue' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
