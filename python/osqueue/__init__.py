"""osqueue: a stateless queue on object storage (RFC 0001 "Stateless Buffer" formats).

Producers flush batches of records to object storage and append their locations to one
manifest object with compare-and-swap; a single consumer reads them in order, fenced by an
epoch. See ``docs/format.md`` for the formats and the protocol.
"""

from osqueue._jar import jar_path
from osqueue._version import __version__
from osqueue.consumer import ConsumedBatch, Consumer, FetchHandle
from osqueue.errors import (
    AmbiguousCommitError,
    BatchNotFoundError,
    ConditionalWritesNotHonouredError,
    ConflictRetriesExhaustedError,
    CorruptBatchError,
    CorruptManifestError,
    ErrorKind,
    FencedError,
    IllegalQueueStateError,
    InvalidConfigError,
    InvalidObjectKeyError,
    OsqueueError,
    ResumePointError,
    StoreError,
    UnsupportedFormatVersionError,
)
from osqueue.format import (
    Compression,
    Delivered,
    EntryTag,
    Manifest,
    ManifestEntry,
    MetadataItem,
    decode_batch,
    decode_manifest,
    encode_batch,
    encode_manifest,
)
from osqueue.gc import GarbageCollector, GcResult
from osqueue.metrics import REGISTRY, MetricsRegistry
from osqueue.producer import DurableWrite, Producer, WriteHandle
from osqueue.queue import (
    BatchDescriptor,
    Clock,
    EnqueueResult,
    ManifestStore,
    QueueConsumer,
    QueueProducer,
    RetryPolicy,
    SystemClock,
)
from osqueue.store import (
    InMemoryStore,
    LocalFileSystemStore,
    ObjectStore,
    S3Store,
    open_store,
)

__all__ = [
    "__version__",
    "jar_path",
    # producer / consumer
    "Producer",
    "WriteHandle",
    "DurableWrite",
    "Consumer",
    "ConsumedBatch",
    "FetchHandle",
    "BatchDescriptor",
    "GarbageCollector",
    "GcResult",
    # queue protocol
    "QueueProducer",
    "QueueConsumer",
    "ManifestStore",
    "EnqueueResult",
    "RetryPolicy",
    "Clock",
    "SystemClock",
    # formats
    "Compression",
    "Manifest",
    "ManifestEntry",
    "MetadataItem",
    "EntryTag",
    "Delivered",
    "decode_manifest",
    "encode_manifest",
    "decode_batch",
    "encode_batch",
    # stores
    "ObjectStore",
    "InMemoryStore",
    "LocalFileSystemStore",
    "S3Store",
    "open_store",
    # metrics
    "MetricsRegistry",
    "REGISTRY",
    # errors
    "ErrorKind",
    "OsqueueError",
    "InvalidConfigError",
    "InvalidObjectKeyError",
    "CorruptManifestError",
    "CorruptBatchError",
    "UnsupportedFormatVersionError",
    "BatchNotFoundError",
    "FencedError",
    "ResumePointError",
    "ConflictRetriesExhaustedError",
    "AmbiguousCommitError",
    "StoreError",
    "ConditionalWritesNotHonouredError",
    "IllegalQueueStateError",
]
