"""The consumer: reads batches in queue order, acknowledges them, dequeues them.

Constructing a :class:`Consumer` initializes the queue: it bumps the manifest's epoch (fencing
every older consumer) and applies the resume point (docs/format.md §5). Then:

* serial path: :meth:`Consumer.next_batch` returns the next batch; :meth:`Consumer.ack` acks
  in order and dequeues every 100 acks (or, with ``ack_interval``, at most once per interval:
  docs/adr/0005, "Ack coalescing"); :meth:`Consumer.flush` dequeues what was acked;
* read-ahead path: :meth:`Consumer.next_descriptors` hands out manifest entries without
  fetching them, :meth:`Consumer.fetch_handle` fetches them from any thread, and
  :meth:`Consumer.ack_through` moves the ack frontier in one dequeue write.

A fenced consumer's manifest operations raise :class:`~osqueue.errors.FencedError`; none of its
writes can land, because every write is a compare-and-swap against an epoch-checked read.

Like the Spark source, the consumer applies the sink's reader rule (docs/adr/0002,
:class:`~osqueue.format.Delivered`): a replayed copy of a sink batch is never handed out and
counts as acknowledged. The delivered-copies map lives in memory for the consumer's lifetime
only: a consumer started with ``last_acked_sequence`` begins with an empty map.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from osqueue import metrics as m
from osqueue.clock import Clock, SystemClock
from osqueue.consumer.batch_fetcher import ConsumedBatch, FetchHandle
from osqueue.errors import (
    DataLossError,
    FencedError,
    IllegalQueueStateError,
    InvalidConfigError,
    InvalidObjectKeyError,
    ResumePointError,
)
from osqueue.format.entry_tag import Delivered
from osqueue.format.manifest import ManifestEntry
from osqueue.gc.garbage_collector import GarbageCollector
from osqueue.queue.data_prefix_owner import DEFAULT_GC_GRACE_PERIOD_MS
from osqueue.queue.manifest_store import DEFAULT_DATA_PATH_PREFIX, DEFAULT_MANIFEST_PATH
from osqueue.queue.queue_consumer import BatchDescriptor, QueueConsumer
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.store.object_store import ObjectStore, validate_key
from osqueue.store.object_stores import open_store

ACK_DEQUEUE_INTERVAL = 100
"""``ack()`` dequeues the acknowledged entries every this many acks."""


@dataclass(frozen=True)
class _Scan:
    """What one manifest read found (see :meth:`Consumer._scan`)."""

    descriptors: list[BatchDescriptor]
    skipped: list[int]
    last: int | None
    delivered: Delivered


class Consumer:
    """The single consumer of a queue.

    Entries that are replayed copies of a Spark sink batch (docs/format.md §2.1) are skipped:
    :meth:`next_batch` and :meth:`next_descriptors` never return them, and the ack frontier
    moves over them (:meth:`ack` expects the next *delivered* sequence; dequeues remove them).
    Which copy was delivered is remembered in memory for this consumer's lifetime only.

    Args:
        path: The queue's store root (see :func:`osqueue.store.open_store`); or pass ``store``.
        last_acked_sequence: Resume after this sequence (None: from the first entry).
        incarnation: The manifest incarnation ``last_acked_sequence`` belongs to (store it with
            the sequence: :attr:`incarnation`). A different one means the queue was reset:
            :class:`ResumePointError`. Without it, the incarnation the last consumer recorded is
            checked instead (docs/format.md §5.2).
        manifest_path: The manifest's key.
        data_path_prefix: Where batches live (for GC).
        gc_interval: Seconds between GC cycles when ``run_gc``.
        gc_grace_period: GC grace period in seconds.
        run_gc: Run the garbage collector in a background thread (default, as the JVM consumer):
            a cycle every ``gc_interval``; at open the data prefix's owner is checked (docs/format.md §6).
        store_options: Store settings, e.g. the ``fs.s3a.*`` keys.
        store: A ready store (not closed by the consumer).
        clock: Time seam.
        rng: Jitter source.
        retry: Manifest retry policy.
        metrics: Metrics registry.
        subscription: Read as this named subscription of the queue (docs/format.md §2.3): from its
            position, acks move only its ``next``, and a second reader of the same subscription
            fences this one (readers of other subscriptions never do). Entries leave the queue once
            every reader passed them. None: the queue's unnamed consumer.
        create_subscription: Create ``subscription`` at the queue's first entry if it is missing
            (else a missing one is :class:`IllegalQueueStateError`).
        fail_on_data_loss: When retention removed entries this reader had not read (a range below the
            queue's ``low_water``, docs/format.md §2.3), the read that finds it raises
            :class:`DataLossError` naming the first lost sequence and the exact count (True, the default);
            False: nothing is raised. Either way the range is reported once (``on_data_loss``, the
            ``buffer.data_loss_events`` / ``buffer.dropped_entries`` metrics) and reading goes on after it.
        on_data_loss: Called with the :class:`DataLossError` of each lost range (before it is raised).
        ack_interval: Seconds; above 0, acks are coalesced: :meth:`ack` and :meth:`ack_through`
            write the manifest at most once per interval (the first ack after an interval carries
            every ack before it), a read (:meth:`next_batch`, :meth:`next_descriptors`) writes the
            acks still pending once the interval has passed, and :meth:`flush` / :meth:`close`
            write at once. 0 (default): ``ack`` writes every 100 acks and ``ack_through`` at once.

    Raises:
        ResumePointError: ``last_acked_sequence`` is ahead of the queue or entries after it
            were already removed.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        last_acked_sequence: int | None = None,
        incarnation: int | None = None,
        manifest_path: str = DEFAULT_MANIFEST_PATH,
        data_path_prefix: str = DEFAULT_DATA_PATH_PREFIX,
        gc_interval: float = 300.0,
        gc_grace_period: float = DEFAULT_GC_GRACE_PERIOD_MS / 1000,
        run_gc: bool = True,
        store_options: Mapping[str, Any] | None = None,
        store: ObjectStore | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        retry: RetryPolicy | None = None,
        metrics: m.MetricsRegistry | None = None,
        subscription: str | None = None,
        create_subscription: bool = False,
        fail_on_data_loss: bool = True,
        on_data_loss: Callable[[DataLossError], None] | None = None,
        ack_interval: float = 0.0,
    ) -> None:
        for option, value in (("manifest_path", manifest_path), ("data_path_prefix", data_path_prefix)):
            try:
                validate_key(value)
            except InvalidObjectKeyError as e:
                raise InvalidConfigError(option, value, str(e)) from e
        if isinstance(ack_interval, bool) or not isinstance(ack_interval, (int, float)) or not ack_interval >= 0:
            raise InvalidConfigError("ack_interval", ack_interval, "use a number of seconds >= 0 (0: no coalescing)")
        for option, number in (("gc_interval", gc_interval), ("gc_grace_period", gc_grace_period)):
            if isinstance(number, bool) or not isinstance(number, (int, float)) or not number > 0:
                raise InvalidConfigError(option, number, "must be a positive number of seconds")
        if last_acked_sequence is not None and (
            isinstance(last_acked_sequence, bool) or not isinstance(last_acked_sequence, int) or last_acked_sequence < 0
        ):
            raise InvalidConfigError("last_acked_sequence", last_acked_sequence, "use None or a sequence >= 0")
        if incarnation is not None and (
            isinstance(incarnation, bool) or not isinstance(incarnation, int) or not 0 <= incarnation < 1 << 32
        ):
            raise InvalidConfigError("incarnation", incarnation, "use None or the consumer's incarnation (0..2^32-1)")
        if (path is None) == (store is None):
            raise InvalidConfigError("path", path, "give either a path or a store")
        self._owns_store = store is None
        self._store: ObjectStore = store if store is not None else open_store(path or "", store_options)
        self._clock = clock or SystemClock()
        self._metrics = metrics or m.REGISTRY
        self._lock = threading.RLock()
        self._closed = False
        self._gc: GarbageCollector | None = None
        try:
            self._queue = QueueConsumer(
                self._store,
                manifest_path,
                clock=self._clock,
                rng=rng,
                retry=retry,
                metrics=self._metrics,
                subscription=subscription,
                create_subscription=create_subscription,
            )
        except BaseException:
            if self._owns_store:
                self._store.close()
            raise
        self._fetcher = FetchHandle(self._store, manifest_path, self._metrics, self._clock)
        try:
            manifest = self._queue.initialize(last_acked_sequence, incarnation)
        except BaseException:
            if self._owns_store:
                self._store.close()
            raise
        start = self._queue.start_sequence
        if (
            start
            and (not manifest.sections.is_empty or subscription is not None)
            and start > (-1 if last_acked_sequence is None else last_acked_sequence) + 1
        ):
            # A reader record's position (docs/format.md §2.3): what it acknowledged is behind it.
            last_acked_sequence = start - 1
        self._last_acked = last_acked_sequence
        self._last_dequeued = last_acked_sequence
        self._last_handed_out = last_acked_sequence
        self._next_ack = last_acked_sequence + 1 if last_acked_sequence is not None else manifest.first_sequence
        self._acks_since_dequeue = 0
        self._ack_interval = float(ack_interval)
        self._last_ack_write = self._clock.monotonic()  # initialize wrote the head
        # Per reader: each subscription's consumer counts its own ack writes and lag (docs/adr/0005).
        reader = {"subscription": subscription or ""}
        self._ack_writes = self._metrics.counter(m.ACK_WRITES, **reader)
        self._lag_entries = self._metrics.gauge(m.CONSUMER_LAG_ENTRIES, **reader)
        self._delivered = Delivered()
        # Sequences read and skipped as replayed copies, ascending, not yet passed by the ack frontier.
        self._skipped: deque[int] = deque()
        # Entries read from the manifest and not handed out yet: handed out before the manifest is read
        # again, so draining a backlog of N entries decodes the manifest O(1) times per N, not per batch.
        # With a segmented head it holds one segment (or the tail) at a time (docs/format.md §2.2).
        self._buffer: list[ManifestEntry] = []
        self._buffer_start = 0
        self._fail_on_data_loss = fail_on_data_loss
        self._on_data_loss = on_data_loss
        self._lost: deque[tuple[int, int]] = deque()  # [first, end) ranges retention cut, not yet acked past
        self._pending_loss = self._queue.initial_loss  # cut before initialize: reported by the first read
        self._metrics.gauge(m.QUEUE_LENGTH).set(manifest.depth)
        if run_gc:
            self._gc = GarbageCollector(
                self._store,
                manifest_path,
                data_path_prefix,
                grace_period=gc_grace_period,
                clock=self._clock,
                metrics=self._metrics,
            )
            try:
                self._gc.check_owner()  # a data prefix another queue owns is refused at open (§6)
            except BaseException:
                if self._owns_store:
                    self._store.close()
                raise
            self._gc.start(gc_interval)

    # -- state ----------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch this consumer owns the queue with."""
        epoch = self._queue.epoch
        assert epoch is not None
        return epoch

    @property
    def incarnation(self) -> int:
        """The incarnation of the queue's manifest (docs/format.md §5.2): store it with
        :attr:`last_acked_sequence` and pass both back when resuming."""
        incarnation = self._queue.incarnation
        assert incarnation is not None
        return incarnation

    @property
    def last_acked_sequence(self) -> int | None:
        """The ack frontier (None before the first ack of a fresh start). It includes the
        skipped replayed copies right after the last ack."""
        return self._last_acked

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def garbage_collector(self) -> GarbageCollector | None:
        """The background GC, when ``run_gc``."""
        return self._gc

    def _check_usable(self) -> None:
        if self._closed:
            raise IllegalQueueStateError("this Consumer is closed")
        fenced = self._queue.fenced
        if fenced is not None:
            raise FencedError(fenced.own_epoch, fenced.current_epoch)

    def _buffered(self) -> list[ManifestEntry]:
        """The entries after the last one handed out: those already read, or (when none are left)
        those of a fresh, epoch-checked manifest read."""
        if self._pending_loss is not None:
            first_lost, count = self._pending_loss
            self._pending_loss = None
            self._report_loss(first_lost, first_lost + count)
        if self._buffer_start >= len(self._buffer):
            # One segment or the tail at a time: memory stays bounded at any depth (docs/format.md §2.2).
            head = self._queue.read_head()
            self._metrics.gauge(m.QUEUE_LENGTH).set(head.depth)
            self._lag_entries.set(max(0, head.next_sequence - self._next_ack))
            after = self._last_handed_out
            first = head.first_sequence
            expected = after + 1 if after is not None else self._next_ack
            if first > expected:  # retention cut entries this reader had not read (ADR 0005 step 3)
                self._buffer, self._buffer_start = [], 0
                self._report_loss(expected, first)
                after = self._last_handed_out
            start = first if after is None else max(first, after + 1)
            ref = self._queue.segment_tree.leaf_for(head, start)
            entries = self._queue.read_segment(ref) if ref is not None else head.tail_entries()
            self._buffer = [e for e in entries if e.sequence >= first and (after is None or e.sequence > after)]
            self._buffer_start = 0
        return self._buffer

    def _scan(self, max_count: int) -> _Scan:
        """The entries after the last one handed out, through the ``max_count``-th deliverable
        one, applying the reader rule; from those already read if any are left, else from a
        manifest read. Moves no cursor (see :meth:`_commit`)."""
        entries = self._buffered()
        after = self._last_handed_out
        descriptors: list[BatchDescriptor] = []
        skipped: list[int] = []
        state, last = self._delivered, after
        unread = (entries[i] for i in range(self._buffer_start, len(entries)))
        for a in state.admit_all(e for e in unread if after is None or e.sequence > after):
            if len(descriptors) >= max_count:
                break
            e = a.entry
            if last == after:  # the first entry read
                self._check_contiguous(e.sequence)
            state, last = a.after, e.sequence
            if a.admitted:
                descriptors.append(BatchDescriptor.of(e, self._queue.manifest.key))
            else:
                skipped.append(e.sequence)
        return _Scan(descriptors, skipped, last, state)

    def _commit(self, scan: _Scan) -> None:
        """Moves the read cursor past everything ``scan`` read (skipped copies included)."""
        self._last_handed_out = scan.last
        while self._buffer_start < len(self._buffer) and (
            scan.last is not None and self._buffer[self._buffer_start].sequence <= scan.last
        ):
            self._buffer_start += 1
        self._delivered = scan.delivered
        self._skipped.extend(scan.skipped)
        self._metrics.counter(m.DUPLICATE_COPIES_SKIPPED).inc(len(scan.skipped))
        self._absorb_skipped()

    def _absorb_skipped(self) -> None:
        """Skipped copies count as acked: the frontier moves over those right after it (the
        next dequeue removes them), so ``ack`` expects the next delivered sequence."""
        skipped, lost = self._skipped, self._lost
        moved = True
        while moved:
            moved = False
            while skipped and skipped[0] < self._next_ack:
                skipped.popleft()
            while skipped and self._last_acked is not None and skipped[0] == self._next_ack:
                self._last_acked = skipped.popleft()
                self._next_ack = self._last_acked + 1
            while lost and lost[0][0] <= self._next_ack:  # a lost range is passed as if acked (never delivered)
                end = lost.popleft()[1]
                if end > self._next_ack:
                    self._last_acked, self._next_ack, moved = end - 1, end, True

    def _report_loss(self, first: int, end: int) -> None:
        """Reports the range ``[first, end)`` retention removed, once, and moves the read cursor (and the
        ack frontier, when it reaches the range) past it; raises it when ``fail_on_data_loss``."""
        if self._last_handed_out is None or self._last_handed_out < end - 1:
            self._last_handed_out = end - 1
        self._lost.append((first, end))
        self._absorb_skipped()
        self._metrics.counter(m.DATA_LOSS_EVENTS).inc()
        self._metrics.counter(m.DROPPED_ENTRIES).inc(end - first)
        error = DataLossError(self._queue.subscription, first, end - first)
        if self._on_data_loss is not None:
            self._on_data_loss(error)
        if self._fail_on_data_loss:
            raise error

    def _check_contiguous(self, first: int) -> None:
        expected = self._last_handed_out + 1 if self._last_handed_out is not None else self._next_ack
        if first != expected:
            raise ResumePointError(
                f"the next entry of the queue is sequence {first}, but this consumer expected {expected}: "
                "entries were removed behind its back"
            )

    # -- serial path ----------------------------------------------------------------------------

    def next_batch(self) -> ConsumedBatch | None:
        """Reads the manifest and fetches the entry after the last one handed out.

        The read cursor moves only when the fetch succeeds, so a failed call can be retried.

        Returns:
            The batch, or None when the queue holds nothing new.

        Raises:
            FencedError: Another consumer initialized the queue.
            BatchNotFoundError: The entry's batch object is missing.
            CorruptBatchError: The entry's batch does not decode.
        """
        with self._lock:
            self._check_usable()
            self._write_due_acks()
            scan = self._scan(1)
            # Only skipped copies (if any) were left in what was read. With a segmented manifest that is
            # the end of one segment, not of the queue: read on rather than report an empty queue.
            while not scan.descriptors and scan.skipped:
                self._commit(scan)
                scan = self._scan(1)
            if not scan.descriptors:
                self._commit(scan)
                return None
            batch = self._fetch(scan.descriptors[0])
            self._commit(scan)
            return batch

    def ack(self, sequence: int) -> None:
        """Acknowledges ``sequence``, which must follow the last ack and have been handed out.

        Every 100th ack dequeues the acknowledged entries (one manifest write).

        Raises:
            IllegalQueueStateError: Out of order, or not handed out yet.
            FencedError: The consumer was fenced (known, or found by the dequeue).
        """
        with self._lock:
            self._check_usable()
            if sequence != self._next_ack:
                raise IllegalQueueStateError(f"out-of-order ack: expected sequence {self._next_ack}, got {sequence}")
            if self._last_handed_out is None or sequence > self._last_handed_out:
                raise IllegalQueueStateError(f"cannot ack sequence {sequence}: it was not handed out yet")
            self._last_acked = sequence
            self._next_ack = sequence + 1
            self._absorb_skipped()
            self._acks_since_dequeue += 1
            self._metrics.counter(m.ACKS).inc()
            if self._ack_interval > 0:
                self._write_due_acks()
            elif self._acks_since_dequeue >= ACK_DEQUEUE_INTERVAL:
                self._dequeue_acked()

    def _dequeue_acked(self) -> None:
        assert self._last_acked is not None
        self._queue.dequeue_through(self._last_acked)
        self._last_dequeued = self._last_acked
        self._acks_since_dequeue = 0
        self._last_ack_write = self._clock.monotonic()
        self._ack_writes.inc()

    def _write_due_acks(self) -> None:
        """With ``ack_interval``: writes the pending acks once an interval has passed since the
        last ack write (at most one manifest write per interval; docs/adr/0005)."""
        if (
            self._ack_interval > 0
            and self._last_acked is not None
            and self._last_acked != self._last_dequeued
            and self._clock.monotonic() - self._last_ack_write >= self._ack_interval
        ):
            self._dequeue_acked()

    def flush(self) -> None:
        """Dequeues everything acknowledged now (checking the epoch even when there is
        nothing to remove; writes nothing then).

        Raises:
            FencedError: Another consumer initialized the queue.
        """
        with self._lock:
            self._check_usable()
            if self._last_acked is None:
                self._queue.read_head()  # the epoch check: no segment read
                return
            self._dequeue_acked()

    # -- read-ahead path ------------------------------------------------------------------------

    def next_descriptors(self, max_count: int) -> list[BatchDescriptor]:
        """Hands out up to ``max_count`` entries after the last one handed out, no fetch: those
        already read while any are left (possibly fewer than ``max_count``), else from one manifest
        read. The cursor moves at handout: a descriptor is never handed out twice.

        Raises:
            FencedError: Another consumer initialized the queue.
        """
        if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 0:
            raise InvalidConfigError("max_count", max_count, "use a count >= 0")
        with self._lock:
            self._check_usable()
            if max_count == 0:
                return []
            self._write_due_acks()
            scan = self._scan(max_count)
            self._commit(scan)
            while not scan.descriptors and scan.skipped:  # read on past a segment's end (see next_batch)
                scan = self._scan(max_count)
                self._commit(scan)
            if scan.descriptors:
                self._metrics.counter(m.DESCRIPTORS_HANDED_OUT).inc(len(scan.descriptors))
            return scan.descriptors

    def fetch_handle(self) -> FetchHandle:
        """A thread-safe fetcher for descriptors (no epoch check, no cursor)."""
        return self._fetcher

    def fetch(self, descriptor: BatchDescriptor) -> ConsumedBatch:
        """Fetches a descriptor's batch and updates the consumer's metrics."""
        return self._fetch(descriptor)

    def _fetch(self, d: BatchDescriptor) -> ConsumedBatch:
        batch = self._fetcher.fetch(d)
        self._metrics.counter(m.BATCHES_COLLECTED).inc()
        self._metrics.counter(m.ENTRIES_COLLECTED).inc(len(batch.entries))
        self._metrics.counter(m.BYTES_COLLECTED).inc(sum(len(e) for e in batch.entries))
        if batch.metadata:
            newest = max(item.ingestion_time_ms for item in batch.metadata)
            self._metrics.gauge(m.CONSUMER_LAG).set(max(0.0, (self._clock.now_ms() - newest) / 1000.0))
        return batch

    def ack_through(self, sequence: int) -> None:
        """Moves the ack frontier to ``sequence`` with one dequeue write.

        The caller must have processed every sequence up to it. The dequeue runs first; the
        consumer's state changes only when it succeeds, so the call is safe to retry. With
        ``ack_interval``, the write is coalesced as :meth:`ack`'s: the frontier moves at once and
        the write carries it when due (a failure of that write is raised by a later call).

        Raises:
            IllegalQueueStateError: ``sequence`` does not move the frontier forward, or is past
                the end of the queue.
            FencedError: Another consumer initialized the queue.
        """
        with self._lock:
            self._check_usable()
            if sequence < self._next_ack:
                raise IllegalQueueStateError(
                    f"non-monotonic ack_through({sequence}): the frontier is already at {self._next_ack - 1}"
                )
            if self._last_handed_out is None or sequence > self._last_handed_out:
                # As on the JVM (docs/format.md §5): acking what was never handed out would dequeue it unread.
                raise IllegalQueueStateError(f"cannot ack_through({sequence}): it was not handed out yet")
            coalesce = self._ack_interval > 0
            if not coalesce:
                self._queue.dequeue_through(sequence)
            acked = sequence - self._next_ack + 1
            self._last_acked = sequence
            self._next_ack = sequence + 1
            if not coalesce:
                self._last_dequeued = sequence
                self._acks_since_dequeue = 0
                self._last_ack_write = self._clock.monotonic()
                self._ack_writes.inc()
            if self._last_handed_out is None or self._last_handed_out < sequence:
                self._last_handed_out = sequence
            self._absorb_skipped()
            self._metrics.counter(m.ACKS).inc(acked)
            if coalesce:
                self._write_due_acks()

    # -- lifecycle ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[ConsumedBatch]:
        """Yields :meth:`next_batch` results until the queue holds nothing new."""
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            yield batch

    def close(self) -> None:
        """Dequeues what was acknowledged, stops GC and releases the store. Idempotent.

        Raises:
            FencedError: The final dequeue found the consumer fenced (everything is still
                released).
        """
        with self._lock:
            if self._closed:
                return
            try:
                if (
                    self._queue.fenced is None
                    and self._last_acked is not None
                    and self._last_acked != self._last_dequeued
                ):
                    self._dequeue_acked()
            finally:
                self._closed = True
                if self._gc is not None:
                    self._gc.stop()
                if self._owns_store:
                    self._store.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.close()
        except Exception:
            if exc is None:
                raise
