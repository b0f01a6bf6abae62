"""The producer: buffers ``produce()`` calls, flushes batches, enqueues their locations.

``produce(entries, metadata)`` puts one input into a bounded buffer (``max_buffered_inputs``;
a full buffer blocks the caller) and returns a :class:`WriteHandle`. One daemon thread,
``osqueue-producer-flush``, moves inputs into the open batch and flushes it when it reaches
``flush_size_bytes``, when ``flush_interval`` has passed since its first input (measured on the
real monotonic clock; the injected clock gives ingestion times and batch names), with ``eager_flush``
as soon as none of its batches is in flight, on
:meth:`Producer.flush` and on :meth:`Producer.close`. A flush uploads the batch under a fresh
``<data_path_prefix>/<ULID>.batch`` key and hands the location to the process's group committer
(:class:`osqueue.queue.QueueProducer`: shared by the producers whose committer settings are the same, so each
producer's K, retry policy, clock and metrics apply); its handles complete when the manifest write lands, or all fail.
"""

from __future__ import annotations

import collections
import functools
import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any

from osqueue import metrics as m
from osqueue.clock import Clock, SystemClock
from osqueue.errors import IllegalQueueStateError, InvalidConfigError, InvalidObjectKeyError, QueueFullError
from osqueue.format.batch_codec import Compression, encode_batch
from osqueue.format.batch_integrity import record as integrity_record
from osqueue.format.batch_names import new_batch_key
from osqueue.format.manifest import MetadataItem
from osqueue.format.manifest_head import DEFAULT_SEGMENT_ENTRIES
from osqueue.producer.shared_stores import SHARED_STORES
from osqueue.producer.spool import DEFAULT_SPOOL_FULL_TIMEOUT, DEFAULT_SPOOL_MAX_BYTES, Spool
from osqueue.producer.spool_log import EntriesRecord
from osqueue.producer.spool_uploader import SpoolUploader
from osqueue.producer.write_handle import DurableWrite, WriteHandle
from osqueue.queue.cooperative_commit import check_commit_mode
from osqueue.queue.data_prefix_owner import DEFAULT_GC_GRACE_PERIOD_MS, claim_data_prefix
from osqueue.queue.manifest_appender import EnqueueResult, ManifestAppender
from osqueue.queue.manifest_store import DEFAULT_DATA_PATH_PREFIX, DEFAULT_MANIFEST_PATH, ManifestStore
from osqueue.queue.queue_producer import QueueProducer, check_segment_entries
from osqueue.queue.queue_retention import QueueFullWait
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.store.object_store import ObjectStore, validate_key

_MAX_UNCOMMITTED_BATCHES = 8
"""Uploaded batches that may wait for their manifest write before the flush thread pauses."""


@dataclass(eq=False)
class _Input:
    entries: list[bytes]
    metadata: bytes
    time_ms: int
    handle: WriteHandle
    call_no: int = -1  # its ENTRIES record in the spool (-1: no spool)


@dataclass(eq=False)
class _Batch:
    records: list[bytes] = field(default_factory=list)
    metadata: list[MetadataItem] = field(default_factory=list)
    handles: list[tuple[WriteHandle, int]] = field(default_factory=list)
    inputs: list[_Input] = field(default_factory=list)
    raw_bytes: int = 0
    deadline: float = 0.0

    def add(self, item: _Input, interval: float) -> None:
        if not self.records and not self.handles:
            self.deadline = time.monotonic() + interval
        self.inputs.append(item)
        start = len(self.records)
        self.metadata.append(MetadataItem(start, item.time_ms, item.metadata))
        self.handles.append((item.handle, start))
        self.records.extend(item.entries)
        self.raw_bytes += sum(len(e) for e in item.entries) + len(item.metadata)

    def __bool__(self) -> bool:
        return bool(self.handles)


def _positive(option: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise InvalidConfigError(option, value, "must be a positive number")
    return value


def _non_negative(option: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise InvalidConfigError(option, value, "must be a number >= 0 (the linger)")
    return value


def _compression(value: object) -> Compression:
    if value is None:
        return Compression.NONE
    if isinstance(value, Compression):
        return value
    if isinstance(value, str) and value.lower() in ("none", "zstd"):
        return Compression.ZSTD if value.lower() == "zstd" else Compression.NONE
    raise InvalidConfigError("compression", value, "use None, 'none' or 'zstd'")


class Producer:
    """Buffers entries and flushes them as batches into a queue.

    Args:
        path: The queue's store root (see :func:`osqueue.store.open_store`); or pass ``store``.
        flush_interval: Seconds after a batch's first input before it is flushed (0.1): the
            producer's linger (Kafka's ``linger.ms``). 0 flushes each batch as soon as the flush
            thread has it; inputs that arrive meanwhile form the next batch.
        eager_flush: Flush the open batch as soon as none of this producer's batches is uploading
            or waiting for its manifest write (False): a lone ``produce()`` costs no linger, and
            inputs that arrive while a batch is in flight wait until it lands or ``flush_interval``
            ends, whichever is first, so a busy producer still batches. It adds requests for a
            producer whose inputs come further apart than one upload and manifest write but closer
            than ``flush_interval`` (each then goes alone).
        flush_size_bytes: A batch whose entry and metadata bytes reach this is flushed (64 MiB).
        max_buffered_inputs: ``produce()`` calls that may wait for the flush thread before it blocks (1000).
        compression: ``None``/``"none"`` or ``"zstd"``.
        manifest_path: The manifest's key (``ingest/manifest``).
        data_path_prefix: Batches are ``<data_path_prefix>/<ULID>.batch`` (``ingest``).
        gc_grace_period: The consumer's GC grace period in seconds (600); a batch whose ULID
            is ``gc_grace_period / 2`` old before its manifest write is uploaded again under a
            fresh name.
        manifest_segment_entries: K (the JVM's ``manifestSegmentEntries``): a manifest write
            that would grow the manifest's tail past K entries first seals the tail into an
            immutable segment object, so appends cost the same at any depth (docs/format.md §2.2).
            2048 by default; 2147483647 never seals, keeping the queue RFC v1 (RFC v1 readers refuse segments).
        commit_mode: ``"solo"`` or ``"cooperative"`` (docs/adr/0007 part 1; not with a spool or K 2147483647).
        store_options: Store settings, e.g. the ``fs.s3a.*`` keys.
        store: A ready store (not closed by the producer).
        clock: Time seam for ingestion times and ULIDs.
        rng: Random source for ULIDs and jitter (default: OS randomness).
        retry: Manifest retry policy.
        metrics: Metrics registry.
        spool_dir: A local directory for the producer's spool (docs/adr/0006 part 2; None: no spool).
            Every ``produce()`` call is written to a log there first; batches are named in it
            before their PUT and marked landed after their manifest write, so a producer started
            again on the same directory (after a crash or kill -9) appends what had not landed,
            each entry exactly once. One producer owns a directory at a time. With a spool, uploads
            and manifest writes are retried without a budget: an outage only delays delivery.
        durability: ``"queue"`` (``produce()`` returns at once; the handle completes when the
            entries are in the manifest) or ``"local"`` (needs ``spool_dir``: ``produce()`` returns
            once its entries are fsync'd to the spool).
        spool_max_bytes: The cap on the spooled bytes not yet in the queue (1 GiB).
        spool_full_policy: ``"backpressure"`` (``produce()`` blocks, then raises ``QueueFullError``
            after ``spool_full_timeout``) or ``"drop_oldest"`` (the oldest calls in no batch are
            dropped, counted in ``buffer.spool_dropped_entries``; their handles fail with ``QueueFullError``).
        spool_full_timeout: Seconds ``backpressure`` waits (30).
        queue_full_timeout, queue_full_retry_interval: Seconds an append waits for room under a queue's
            ``backpressure`` cap (§2.3), reading the head every interval, before ``QueueFullError`` (30, 1).

    Raises:
        InvalidConfigError: An option is invalid.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        flush_interval: float = 0.1,
        eager_flush: bool = False,
        flush_size_bytes: int = 64 * 1024 * 1024,
        max_buffered_inputs: int = 1000,
        compression: str | Compression | None = None,
        manifest_path: str = DEFAULT_MANIFEST_PATH,
        data_path_prefix: str = DEFAULT_DATA_PATH_PREFIX,
        gc_grace_period: float = DEFAULT_GC_GRACE_PERIOD_MS / 1000,
        manifest_segment_entries: int = DEFAULT_SEGMENT_ENTRIES,
        store_options: Mapping[str, Any] | None = None,
        store: ObjectStore | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        retry: RetryPolicy | None = None,
        metrics: m.MetricsRegistry | None = None,
        spool_dir: str | None = None,
        durability: str = "queue",
        spool_max_bytes: int = DEFAULT_SPOOL_MAX_BYTES,
        spool_full_policy: str = "backpressure",
        spool_full_timeout: float = DEFAULT_SPOOL_FULL_TIMEOUT,
        commit_mode: str = "solo",
        queue_full_timeout: float = 30.0,
        queue_full_retry_interval: float = 1.0,
    ) -> None:
        check_commit_mode(commit_mode, manifest_segment_entries, spooled=spool_dir is not None)
        if durability not in ("queue", "local"):
            raise InvalidConfigError("durability", durability, "use 'queue' or 'local'")
        if durability == "local" and spool_dir is None:
            raise InvalidConfigError("durability", durability, "'local' needs a spool_dir")
        self._durable_local = durability == "local"
        self._flush_interval = _non_negative("flush_interval", flush_interval)
        if not isinstance(eager_flush, bool):
            raise InvalidConfigError("eager_flush", eager_flush, "must be True or False")
        self._eager_flush = eager_flush
        if not isinstance(flush_size_bytes, int) or flush_size_bytes <= 0:
            raise InvalidConfigError("flush_size_bytes", flush_size_bytes, "must be a positive number of bytes")
        self._flush_size = flush_size_bytes
        if not isinstance(max_buffered_inputs, int) or max_buffered_inputs <= 0:
            raise InvalidConfigError("max_buffered_inputs", max_buffered_inputs, "must be a positive integer")
        self._max_buffered = max_buffered_inputs
        self._compression = _compression(compression)
        self._grace_ms = int(_positive("gc_grace_period", gc_grace_period) * 1000)
        full_wait = QueueFullWait.of(queue_full_timeout, queue_full_retry_interval)
        check_segment_entries(manifest_segment_entries)
        for option, value in (("manifest_path", manifest_path), ("data_path_prefix", data_path_prefix)):
            try:
                validate_key(value)
            except InvalidObjectKeyError as e:
                raise InvalidConfigError(option, value, str(e)) from e
        self._prefix = data_path_prefix
        if (path is None) == (store is None):
            raise InvalidConfigError("path", path, "give either a path or a store")
        self._path = path
        self._store_options = store_options
        self._owns_store = store is None
        self._store: ObjectStore = store if store is not None else SHARED_STORES.acquire(path or "", store_options)
        self._clock = clock or SystemClock()
        self._rng = rng
        self._metrics = metrics or m.REGISTRY
        try:
            # Claimed before the first upload, so GC can prove this producer's files are its queue's (§6);
            # a spooled producer claims from its upload thread (retried: it starts in an outage, issue 28).
            claim = functools.partial(
                claim_data_prefix, self._store, manifest_path, data_path_prefix, self._clock,
                create_with_grace_ms=self._grace_ms, retry=retry, rng=rng,
            )  # fmt: skip
            if spool_dir is None:
                owner = claim()
                assert owner is not None
                # The queue's grace period is the one GC uses: a longer option of ours must not count (§6).
                self._grace_ms = min(self._grace_ms, owner.gc_grace_period_ms)
            self._queue = QueueProducer(
                self._store,
                manifest_path,
                clock=self._clock,
                rng=rng,
                retry=retry,
                metrics=self._metrics,
                manifest_segment_entries=manifest_segment_entries,
                commit_mode=commit_mode,
                queue_full_wait=full_wait,
            )
            self._spool: Spool | None = None
            self._uploader: SpoolUploader | None = None
            if spool_dir is not None:
                self._spool = Spool(
                    spool_dir,
                    max_bytes=spool_max_bytes,
                    full_policy=spool_full_policy,
                    full_timeout=spool_full_timeout,
                    clock=self._clock,
                    rng=rng,
                    metrics=self._metrics,
                    on_drop=self._dropped,
                )
                policy = retry or RetryPolicy()
                # Its own appender, written to from the flush thread: each write is resolved against the
                # spool's ATTEMPT records (a shared group write could not be).
                appender = ManifestAppender(
                    ManifestStore(self._store, manifest_path),
                    self._clock,
                    rng or random.Random(),
                    policy,
                    self._metrics,
                    manifest_segment_entries,
                )
                appender.queue_full_wait = full_wait
                self._uploader = SpoolUploader(
                    self._store,
                    self._spool,
                    appender,
                    prefix=data_path_prefix,
                    compression=self._compression,
                    grace_ms=self._grace_ms,
                    claim=claim,
                    clock=self._clock,
                    rng=rng,
                    retry=policy,
                    metrics=self._metrics,
                )
        except BaseException:
            spool = getattr(self, "_spool", None)
            if spool is not None:
                spool.close()
            self._release_store()
            raise

        self._cond = threading.Condition()
        self._inputs: collections.deque[_Input] = collections.deque()
        self._outstanding: set[WriteHandle] = set()
        self._flush_requested = False
        self._closed = False
        self._uncommitted = 0
        self._by_call: dict[int, WriteHandle] = {}
        self._replay_error: BaseException | None = None  # a spooled batch replay could not append
        self._replayed = threading.Event()
        if self._spool is None:
            self._replayed.set()
        self._spool_order = threading.Lock()  # call numbers enter the buffer in their order
        if self._spool is not None:
            for record in self._spool.unbatched_calls():  # replay: batched again with the new calls
                handle = WriteHandle(record.ingestion_time_ms)
                self._inputs.append(
                    _Input(list(record.entries), record.metadata, record.ingestion_time_ms, handle, record.call_no)
                )
                self._outstanding.add(handle)
                self._by_call[record.call_no] = handle
        self._thread = threading.Thread(target=self._run, name="osqueue-producer-flush", daemon=True)
        self._thread.start()

    # -- public API ---------------------------------------------------------------------------

    @property
    def store(self) -> ObjectStore:
        """The store the producer writes to."""
        return self._store

    def produce(self, entries: Sequence[bytes], metadata: bytes = b"") -> WriteHandle:
        """Buffers entries (one batch range with one metadata item) for the next flush.

        Blocks while ``max_buffered_inputs`` inputs wait for the flush thread.

        Args:
            entries: The records, at least one (empty records are allowed).
            metadata: Opaque metadata for these entries.

        Returns:
            The handle that completes when the entries are durable.

        Raises:
            InvalidConfigError: ``entries`` is empty or holds something that is not bytes.
            IllegalQueueStateError: The producer is closed.
        """
        if isinstance(entries, (bytes, bytearray, memoryview, str)):
            raise InvalidConfigError("entries", type(entries).__name__, "pass a sequence of bytes records")
        records = []
        for e in entries:
            if not isinstance(e, (bytes, bytearray, memoryview)):
                raise InvalidConfigError("entries", type(e).__name__, "every record must be bytes")
            records.append(bytes(e))
        if not records:
            raise InvalidConfigError("entries", "[]", "produce() needs at least one entry")
        if not isinstance(metadata, (bytes, bytearray, memoryview)):
            raise InvalidConfigError("metadata", type(metadata).__name__, "metadata must be bytes")
        handle = WriteHandle(self._clock.now_ms())
        if self._spool is not None:
            return self._produce_spooled(records, bytes(metadata), handle)
        with self._cond:
            while not self._closed and len(self._inputs) >= self._max_buffered:
                self._cond.wait()
            if self._closed:
                raise IllegalQueueStateError("produce() called on a closed Producer")
            self._inputs.append(_Input(records, bytes(metadata), handle.ingestion_time_ms, handle))
            self._outstanding.add(handle)
            self._cond.notify_all()
        return handle

    def _produce_spooled(self, records: list[bytes], metadata: bytes, handle: WriteHandle) -> WriteHandle:
        """Step 1: the call goes to the spool's log (fsync'd before returning with durability local)."""
        assert self._spool is not None
        with self._spool_order:  # not bounded by max_buffered_inputs: spool_max_bytes bounds it
            with self._cond:
                if self._closed:
                    raise IllegalQueueStateError("produce() called on a closed Producer")
            call_no, ticket = self._spool.append_entries(records, metadata, handle.ingestion_time_ms)
            with self._cond:
                self._inputs.append(_Input(records, metadata, handle.ingestion_time_ms, handle, call_no))
                self._outstanding.add(handle)
                self._by_call[call_no] = handle
                self._cond.notify_all()
        if self._durable_local:
            self._spool.sync(ticket)
        return handle

    def _dropped(self, call_nos: list[int]) -> None:
        """``drop_oldest`` dropped these calls (none in a batch): their handles fail."""
        error = QueueFullError(
            f"dropped by drop_oldest: calls {call_nos[0]}..{call_nos[-1]} of the full producer spool "
            f"'{self._spool.directory if self._spool else ''}'"
        )
        for n in call_nos:
            handle = self._by_call.pop(n, None)
            if handle is not None and not handle.done():
                handle.set_exception(error)

    def flush(self, timeout: float | None = None) -> None:
        """Flushes the open batch and waits until every input produced before is durable.

        Raises:
            The first error of a waited-for input, if one failed.
            TimeoutError: Not done within ``timeout`` seconds.
        """
        with self._cond:
            waiting = list(self._outstanding)
            self._flush_requested = True
            self._cond.notify_all()
        self._wait(waiting, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flushes everything and stops; later ``produce()`` calls raise. Idempotent.

        Raises:
            The first error of an input that failed while closing.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            waiting = list(self._outstanding)
            self._cond.notify_all()
        try:
            self._thread.join(timeout)
            self._wait(waiting, timeout)
        finally:
            self._queue.close()
            if self._uploader is not None and self._spool is not None and not self._thread.is_alive():
                if self._uploader.idle(timeout):  # nothing on its way writes to the spool any more
                    self._uploader.close()
                    self._spool.close()
            self._release_store()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.close()
        except Exception:
            if exc is None:
                raise

    # -- internals ----------------------------------------------------------------------------

    def _release_store(self) -> None:
        if self._owns_store:
            self._owns_store = False
            SHARED_STORES.release(self._path or "", self._store_options)

    def _wait(self, handles: list[WriteHandle], timeout: float | None) -> None:
        if not self._replayed.wait(timeout):
            raise TimeoutError(f"the spool's replay did not finish within {timeout} s")
        if self._replay_error is not None:
            raise self._replay_error
        if not handles:
            return
        done, not_done = wait_futures(handles, timeout)
        if not_done:
            raise TimeoutError(f"{len(not_done)} produced inputs were not durable within {timeout} s")
        for h in handles:
            error = h.exception()
            if error is not None:
                raise error

    def _run(self) -> None:
        if self._uploader is not None:
            try:
                self._uploader.replay()
            except BaseException as e:  # the spool keeps them; flush() and close() raise it
                logging.getLogger("osqueue.producer").error("spool replay failed: %s", e)
                self._replay_error = e
            self._replayed.set()
        batch = _Batch()
        while True:
            with self._cond:
                while True:
                    while self._inputs and (self._spool is None or batch.raw_bytes < self._flush_size):
                        batch.add(self._inputs.popleft(), self._flush_interval)
                    self._cond.notify_all()  # room in the buffer
                    if batch and (
                        batch.raw_bytes >= self._flush_size
                        or self._flush_requested
                        or self._closed
                        or time.monotonic() >= batch.deadline
                        or (self._eager_flush and self._uncommitted == 0)  # nothing in flight: no linger
                    ):
                        break
                    if not batch:
                        self._flush_requested = False
                        if self._closed:
                            return
                    self._cond.wait(None if not batch else max(0.0, batch.deadline - time.monotonic()))
                if not self._inputs:
                    self._flush_requested = False
                while self._uncommitted >= _MAX_UNCOMMITTED_BATCHES:
                    self._cond.wait()
                self._uncommitted += 1
            if self._spool is not None:
                self._flush_spooled(batch)
            else:
                self._flush(batch)
            batch = _Batch()

    def _flush_spooled(self, batch: _Batch) -> None:
        """Steps 2-6: name the batch in the spool here; the uploader PUTs it and appends it with others (ATTEMPT
        before each CAS), then LANDED, in the background (at most _MAX_UNCOMMITTED_BATCHES on their way)."""
        assert self._spool is not None and self._uploader is not None
        started = self._clock.monotonic()
        first, last = batch.inputs[0].call_no, batch.inputs[-1].call_no
        gone = set(self._spool.claim_batch(first, last))
        if gone:  # drop_oldest took the oldest of them meanwhile (their handles failed then)
            with self._cond:
                for item in batch.inputs:
                    if item.call_no in gone:
                        self._outstanding.discard(item.handle)
            kept = _Batch()
            for item in batch.inputs:
                if item.call_no not in gone:
                    kept.add(item, 0)
            batch = kept
        if not batch:
            self._finish(batch, None, None, started, 0)
            return
        try:
            calls = [EntriesRecord(i.call_no, i.time_ms, i.metadata, tuple(i.entries)) for i in batch.inputs]
            shipped = self._uploader.submit(calls)  # named here; PUT and appended in the background
        except BaseException as e:
            self._finish(batch, None, e, started, 0)
            return

        def landed(f: Future[tuple[EnqueueResult, int]]) -> None:
            error = f.exception()
            if error is not None:
                self._finish(batch, None, error, started, 0)
                return
            result, size = f.result()
            done: Future[EnqueueResult] = Future()
            done.set_result(result)
            self._finish(batch, done, None, started, size)

        shipped.add_done_callback(landed)

    def _upload(self, data: bytes) -> str:
        key = new_batch_key(self._prefix, self._clock, self._rng)
        self._store.put(key, data)
        return key

    def _flush(self, batch: _Batch) -> None:
        started = self._clock.monotonic()
        try:
            data = encode_batch(batch.records, self._compression)
            put_started = self._clock.monotonic()  # its age is the PUT's, by this clock's rate (§6)
            key = self._upload(data)
            future = self._queue.enqueue_async(
                key,
                batch.metadata,
                reupload=lambda: self._upload(data),
                max_age_ms=self._grace_ms // 2,
                put_started=put_started,
                extension=integrity_record(data),
            )
        except BaseException as e:
            self._finish(batch, None, e, started, 0)
            return
        size = len(data)
        future.add_done_callback(lambda f: self._finish(batch, f, None, started, size))

    def _finish(
        self,
        batch: _Batch,
        future: Future[EnqueueResult] | None,
        error: BaseException | None,
        started: float,
        written: int,
    ) -> None:
        result: EnqueueResult | None = None
        if error is None and future is not None:
            error = future.exception()
            if error is None:
                result = future.result()
        for handle, start in batch.handles:
            if result is not None:
                handle.set_result(DurableWrite(result.sequence, result.location, start))
            else:
                assert error is not None
                handle.set_exception(error)
        if result is not None:
            self._metrics.counter(m.BATCHES_FLUSHED).inc()
            self._metrics.counter(m.ENTRIES_FLUSHED).inc(len(batch.records))
            self._metrics.counter(m.BYTES_FLUSHED).inc(batch.raw_bytes)
            self._metrics.counter(m.BYTES_WRITTEN).inc(written)
            self._metrics.histogram(m.FLUSH_DURATION).observe(self._clock.monotonic() - started)
        with self._cond:
            self._uncommitted -= 1
            for handle, _ in batch.handles:
                self._outstanding.discard(handle)
            for item in batch.inputs:
                self._by_call.pop(item.call_no, None)
            self._cond.notify_all()
