"""The queue protocol on the manifest (docs/format.md §5).

* :class:`CasObject` is one object written only by compare-and-swap; :class:`CasLoop` runs
  read-modify-write edits on it.
* :class:`ManifestStore` is the manifest object (a :class:`CasObject`) and what it lists.
* :class:`QueueProducer` appends batch locations through a *group committer*: one background
  thread per (store, manifest key) in the process, which puts every location that became ready
  while a manifest write was in flight into the next write. Writes that fail with an unknown
  outcome are resolved by re-reading the manifest, so a producer never leaves a duplicate entry.
* :class:`QueueConsumer` owns the consumer side: the epoch bump that fences older consumers,
  the resume point, epoch-checked reads and dequeues.
* :class:`SegmentTree` finds a segmented head's segments through its index objects (docs/format.md §2.2).

Time and randomness come from an injectable :class:`Clock` and ``random.Random``.
"""

from osqueue.clock import Clock, SystemClock
from osqueue.queue.cas_loop import (
    CONFLICT,
    CasCounters,
    CasLoop,
    CasStep,
    Done,
    PreviousAttempt,
    Settle,
    Unknown,
    Write,
)
from osqueue.queue.cas_object import CasObject, Snapshot
from osqueue.queue.data_prefix_owner import DEFAULT_GC_GRACE_PERIOD_MS, OWNER_NAME, DataPrefixOwner, claim_data_prefix
from osqueue.queue.manifest_appender import MAX_REUPLOADS, EnqueueResult, ManifestAppender
from osqueue.queue.manifest_store import DEFAULT_DATA_PATH_PREFIX, DEFAULT_MANIFEST_PATH, ManifestStore
from osqueue.queue.queue_consumer import BatchDescriptor, QueueConsumer
from osqueue.queue.queue_producer import QueueProducer
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.queue.segment_tree import SegmentTree

__all__ = [
    "Clock",
    "SystemClock",
    "DEFAULT_MANIFEST_PATH",
    "DEFAULT_DATA_PATH_PREFIX",
    "ManifestStore",
    "RetryPolicy",
    "OWNER_NAME",
    "DEFAULT_GC_GRACE_PERIOD_MS",
    "DataPrefixOwner",
    "claim_data_prefix",
    "EnqueueResult",
    "ManifestAppender",
    "MAX_REUPLOADS",
    "QueueProducer",
    "BatchDescriptor",
    "QueueConsumer",
    "Snapshot",
    "Done",
    "Write",
    "CasStep",
    "CONFLICT",
    "Unknown",
    "PreviousAttempt",
    "Settle",
    "CasLoop",
    "CasCounters",
    "CasObject",
    "SegmentTree",
]
