"""A tiny thread-safe registry of counters, gauges and histograms.

Metric names follow the reference implementation (all start with ``buffer.``):

* producer: counters ``buffer.batches_flushed``, ``buffer.entries_flushed``,
  ``buffer.bytes_flushed`` (raw), ``buffer.bytes_written`` (encoded); histogram
  ``buffer.flush_duration_seconds``;
* consumer: counters ``buffer.batches_collected``, ``buffer.entries_collected``,
  ``buffer.bytes_collected``, ``buffer.acks``, ``buffer.descriptors_handed_out``,
  ``buffer.duplicate_copies_skipped`` (replayed sink copies not delivered),
  ``buffer.gc_files_deleted``, ``buffer.gc_files_failed``; gauges
  ``buffer.consumer_lag_seconds``, ``buffer.queue_length``; histograms
  ``buffer.gc_duration_seconds``, ``buffer.fetch_duration_seconds``;
* both: counters ``buffer.manifest_writes``, ``buffer.manifest_conflicts`` and
  ``buffer.manifest_ambiguous_writes`` (writes of unknown outcome) with a ``role`` label
  (``producer`` or ``consumer``); producer: ``buffer.batches_reuploaded`` (stale batches
  uploaded again before their manifest write).

Components take a ``metrics`` argument and default to the process-wide :data:`REGISTRY`.
"""

from osqueue.metrics.metrics import (
    ACKS,
    AMBIGUITIES_RESOLVED_BY_RECEIPTS,
    BATCHES_COLLECTED,
    BATCHES_FLUSHED,
    BATCHES_REUPLOADED,
    BYTES_COLLECTED,
    BYTES_FLUSHED,
    BYTES_WRITTEN,
    CONSUMER_LAG,
    DESCRIPTORS_HANDED_OUT,
    DUPLICATE_COPIES_SKIPPED,
    ENTRIES_COLLECTED,
    ENTRIES_FLUSHED,
    FETCH_DURATION,
    FLUSH_DURATION,
    GC_DURATION,
    GC_FILES_DELETED,
    GC_FILES_FAILED,
    MANIFEST_AMBIGUOUS_WRITES,
    MANIFEST_CONFLICTS,
    MANIFEST_WRITES,
    QUEUE_LENGTH,
    RECEIPT_WRITE_FAILURES,
    REGISTRY,
    SEGMENTS_SEALED,
    Counter,
    Gauge,
    Histogram,
    MetricsRegistry,
)

__all__ = [
    "BATCHES_FLUSHED",
    "ENTRIES_FLUSHED",
    "BYTES_FLUSHED",
    "BYTES_WRITTEN",
    "FLUSH_DURATION",
    "BATCHES_COLLECTED",
    "ENTRIES_COLLECTED",
    "BYTES_COLLECTED",
    "ACKS",
    "DESCRIPTORS_HANDED_OUT",
    "DUPLICATE_COPIES_SKIPPED",
    "GC_FILES_DELETED",
    "GC_FILES_FAILED",
    "GC_DURATION",
    "FETCH_DURATION",
    "CONSUMER_LAG",
    "QUEUE_LENGTH",
    "MANIFEST_WRITES",
    "MANIFEST_CONFLICTS",
    "AMBIGUITIES_RESOLVED_BY_RECEIPTS",
    "RECEIPT_WRITE_FAILURES",
    "MANIFEST_AMBIGUOUS_WRITES",
    "BATCHES_REUPLOADED",
    "SEGMENTS_SEALED",
    "Counter",
    "Gauge",
    "Histogram",
    "MetricsRegistry",
    "REGISTRY",
]
