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

from __future__ import annotations

import math
import threading

BATCHES_FLUSHED = "buffer.batches_flushed"
ENTRIES_FLUSHED = "buffer.entries_flushed"
BYTES_FLUSHED = "buffer.bytes_flushed"
BYTES_WRITTEN = "buffer.bytes_written"
FLUSH_DURATION = "buffer.flush_duration_seconds"
BATCHES_COLLECTED = "buffer.batches_collected"
ENTRIES_COLLECTED = "buffer.entries_collected"
BYTES_COLLECTED = "buffer.bytes_collected"
ACKS = "buffer.acks"
DESCRIPTORS_HANDED_OUT = "buffer.descriptors_handed_out"
DUPLICATE_COPIES_SKIPPED = "buffer.duplicate_copies_skipped"
BATCHES_UNVERIFIED = "buffer.batches_unverified"
GC_FILES_DELETED = "buffer.gc_files_deleted"
GC_FILES_FAILED = "buffer.gc_files_failed"
GC_DURATION = "buffer.gc_duration_seconds"
FETCH_DURATION = "buffer.fetch_duration_seconds"
CONSUMER_LAG = "buffer.consumer_lag_seconds"
QUEUE_LENGTH = "buffer.queue_length"
MANIFEST_WRITES = "buffer.manifest_writes"
MANIFEST_CONFLICTS = "buffer.manifest_conflicts"
AMBIGUITIES_RESOLVED_BY_RECEIPTS = "buffer.ambiguities_resolved_by_receipts"
RECEIPT_WRITE_FAILURES = "buffer.receipt_write_failures"
MANIFEST_AMBIGUOUS_WRITES = "buffer.manifest_ambiguous_writes"
BATCHES_REUPLOADED = "buffer.batches_reuploaded"
# Segments a producer sealed (docs/format.md §2.2).
SEGMENTS_SEALED = "buffer.segments_sealed"
# The producer spool (docs/adr/0006 part 2)
SPOOL_BYTES = "buffer.spool_bytes"
SPOOL_OLDEST_ENTRY_AGE_SECONDS = "buffer.spool_oldest_entry_age_seconds"
SPOOL_REPLAYED_BATCHES = "buffer.spool_replayed_batches"
SPOOL_DROPPED_ENTRIES = "buffer.spool_dropped_entries"
SPOOL_FULL_WAITS = "buffer.spool_full_waits"
SEGMENTS_RESPLIT = "buffer.segments_resplit"
# Cooperative commit (docs/adr/0007 part 1)
INTENTS_ANNOUNCED = "buffer.intents_announced"
INTENTS_APPENDED_FOR_OTHERS = "buffer.intents_appended_for_others"
INTENTS_REJECTED = "buffer.intents_rejected"
COMMIT_ROUNDS = "buffer.commit_rounds"
DATA_LOSS_EVENTS = "buffer.data_loss_events"
DROPPED_ENTRIES = "buffer.dropped_entries"
ENTRIES_DROPPED = "buffer.entries_dropped"
BYTES_DROPPED = "buffer.bytes_dropped"
QUEUE_FULL_WAITS = "buffer.queue_full_waits"
# Per reader (label ``subscription``, "" for the unnamed consumer; docs/adr/0005 "Ack coalescing"):
# the manifest writes its acks made, and its lag in entries (next_sequence - its next unacked) at its last head read.
ACK_WRITES = "buffer.ack_writes"
CONSUMER_LAG_ENTRIES = "buffer.consumer_lag_entries"

_LabelKey = tuple[tuple[str, str], ...]


class Counter:
    """A monotonically increasing count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0.0

    def inc(self, amount: float = 1) -> None:
        """Adds ``amount`` (must not be negative)."""
        if amount < 0:
            raise ValueError("a counter only goes up")
        with self._lock:
            self._value += amount

    @property
    def value(self) -> float:
        with self._lock:
            return self._value


class Gauge:
    """A value that goes up and down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0.0

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)

    @property
    def value(self) -> float:
        with self._lock:
            return self._value


class Histogram:
    """Count, sum, min and max of observed values."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf

    def observe(self, value: float) -> None:
        with self._lock:
            self.count += 1
            self.sum += value
            self.min = min(self.min, value)
            self.max = max(self.max, value)

    def summary(self) -> dict[str, float]:
        with self._lock:
            return {"count": self.count, "sum": self.sum, "min": self.min, "max": self.max}


_Metric = Counter | Gauge | Histogram


class MetricsRegistry:
    """Holds metrics by name and labels; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metrics: dict[tuple[str, _LabelKey], _Metric] = {}

    def _get(self, cls: type, name: str, labels: dict[str, str]) -> _Metric:
        key = (name, tuple(sorted((k, str(v)) for k, v in labels.items())))
        with self._lock:
            metric = self._metrics.get(key)
            if metric is None:
                metric = self._metrics[key] = cls()
            elif not isinstance(metric, cls):
                raise TypeError(f"metric {name} is a {type(metric).__name__}, not a {cls.__name__}")
            return metric

    def counter(self, name: str, **labels: str) -> Counter:
        """The counter ``name`` with these labels (created at 0)."""
        m = self._get(Counter, name, labels)
        assert isinstance(m, Counter)
        return m

    def gauge(self, name: str, **labels: str) -> Gauge:
        """The gauge ``name`` with these labels (created at 0)."""
        m = self._get(Gauge, name, labels)
        assert isinstance(m, Gauge)
        return m

    def histogram(self, name: str, **labels: str) -> Histogram:
        """The histogram ``name`` with these labels."""
        m = self._get(Histogram, name, labels)
        assert isinstance(m, Histogram)
        return m

    def snapshot(self) -> dict[str, object]:
        """All metrics as ``{"name{k=v,...}": value or histogram summary}``."""
        with self._lock:
            items = list(self._metrics.items())
        out: dict[str, object] = {}
        for (name, labels), metric in sorted(items, key=lambda kv: kv[0]):
            label_text = "{" + ",".join(f"{k}={v}" for k, v in labels) + "}" if labels else ""
            if isinstance(metric, Histogram):
                out[name + label_text] = metric.summary()
            else:
                out[name + label_text] = metric.value
        return out


REGISTRY = MetricsRegistry()
"""The process-wide default registry."""
