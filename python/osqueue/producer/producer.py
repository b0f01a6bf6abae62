"""The producer: buffers ``produce()`` calls, flushes batches, enqueues their locations.

``produce(entries, metadata)`` puts one input into a bounded buffer (``max_buffered_inputs``;
a full buffer blocks the caller) and returns a :class:`WriteHandle`. One daemon thread,
``osqueue-producer-flush``, moves inputs into the open batch and flushes it when it reaches
``flush_size_bytes``, when ``flush_interval`` has passed since its first input (measured on the
real monotonic clock; the injected clock gives ingestion times and batch names), on
:meth:`Producer.flush` and on :meth:`Producer.close`. A flush uploads the batch under a fresh
``<data_path_prefix>/<ULID>.batch`` key and hands the location to the process's group
committer (:class:`osqueue.queue.QueueProducer`: shared by the producers whose committer settings
are the same, so each producer's K, retry policy, clock and metrics apply); the handles of the batch complete when the
manifest write lands, or all fail with the same error.
"""

from __future__ import annotations

import collections
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
from osqueue.errors import IllegalQueueStateError, InvalidConfigError, InvalidObjectKeyError
from osqueue.format.batch_codec import Compression, encode_batch
from osqueue.format.batch_integrity import record as integrity_record
from osqueue.format.batch_names import new_batch_key
from osqueue.format.manifest import MetadataItem
from osqueue.format.manifest_head import DEFAULT_SEGMENT_ENTRIES
from osqueue.producer.write_handle import DurableWrite, WriteHandle
from osqueue.queue.data_prefix_owner import DEFAULT_GC_GRACE_PERIOD_MS, claim_data_prefix
from osqueue.queue.manifest_appender import EnqueueResult
from osqueue.queue.manifest_store import DEFAULT_DATA_PATH_PREFIX, DEFAULT_MANIFEST_PATH
from osqueue.queue.queue_producer import QueueProducer, check_segment_entries
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.store.object_store import ObjectStore, validate_key
from osqueue.store.object_stores import open_store

_MAX_UNCOMMITTED_BATCHES = 8
"""Uploaded batches that may wait for their manifest write before the flush thread pauses."""


@dataclass(eq=False)
class _Input:
    entries: list[bytes]
    metadata: bytes
    time_ms: int
    handle: WriteHandle


@dataclass(eq=False)
class _Batch:
    records: list[bytes] = field(default_factory=list)
    metadata: list[MetadataItem] = field(default_factory=list)
    handles: list[tuple[WriteHandle, int]] = field(default_factory=list)
    raw_bytes: int = 0
    deadline: float = 0.0

    def add(self, item: _Input, interval: float) -> None:
        if not self.records and not self.handles:
            self.deadline = time.monotonic() + interval
        start = len(self.records)
        self.metadata.append(MetadataItem(start, item.time_ms, item.metadata))
        self.handles.append((item.handle, start))
        self.records.extend(item.entries)
        self.raw_bytes += sum(len(e) for e in item.entries) + len(item.metadata)

    def __bool__(self) -> bool:
        return bool(self.handles)


class _SharedStores:
    """Stores opened from a path, shared by the producers of a process (so those with the same
    committer settings also share one group committer) and closed with the last of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stores: dict[tuple[str, tuple[tuple[str, str], ...]], list[Any]] = {}

    @staticmethod
    def _key(path: str, options: Mapping[str, Any] | None) -> tuple[str, tuple[tuple[str, str], ...]]:
        return path, tuple(sorted((str(k).lower(), str(v)) for k, v in (options or {}).items()))

    def acquire(self, path: str, options: Mapping[str, Any] | None) -> ObjectStore:
        key = self._key(path, options)
        with self._lock:
            found = self._stores.get(key)
            if found is None:
                found = self._stores[key] = [open_store(path, options), 0]
            found[1] += 1
            store: ObjectStore = found[0]
            return store

    def release(self, path: str, options: Mapping[str, Any] | None) -> None:
        key = self._key(path, options)
        with self._lock:
            found = self._stores.get(key)
            if found is None:
                return
            found[1] -= 1
            if found[1] > 0:
                return
            del self._stores[key]
        found[0].close()


_SHARED_STORES = _SharedStores()


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
        flush_size_bytes: A batch whose entry and metadata bytes reach this is flushed (64 MiB).
        max_buffered_inputs: ``produce()`` calls that may wait for the flush thread before
            ``produce()`` blocks (1000).
        compression: ``None``/``"none"`` or ``"zstd"``.
        manifest_path: The manifest's key (``ingest/manifest``).
        data_path_prefix: Batches are ``<data_path_prefix>/<ULID>.batch`` (``ingest``).
        gc_grace_period: The consumer's GC grace period in seconds (600); a batch whose ULID
            is ``gc_grace_period / 2`` old before its manifest write is uploaded again under a
            fresh name.
        manifest_segment_entries: K (the JVM's ``manifestSegmentEntries``): a manifest write
            that would grow the manifest's tail past K entries first seals the tail into an
            immutable segment object, so appends cost the same at any depth (docs/format.md §2.2).
            2048 by default; 2147483647 never seals, keeping the queue RFC v1 (a segmented
            manifest is refused by RFC v1 readers).
        store_options: Store settings, e.g. the ``fs.s3a.*`` keys.
        store: A ready store (not closed by the producer).
        clock: Time seam for ingestion times and ULIDs.
        rng: Random source for ULIDs and jitter (default: OS randomness).
        retry: Manifest retry policy.
        metrics: Metrics registry.

    Raises:
        InvalidConfigError: An option is invalid.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        flush_interval: float = 0.1,
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
    ) -> None:
        self._flush_interval = _non_negative("flush_interval", flush_interval)
        if not isinstance(flush_size_bytes, int) or flush_size_bytes <= 0:
            raise InvalidConfigError("flush_size_bytes", flush_size_bytes, "must be a positive number of bytes")
        self._flush_size = flush_size_bytes
        if not isinstance(max_buffered_inputs, int) or max_buffered_inputs <= 0:
            raise InvalidConfigError("max_buffered_inputs", max_buffered_inputs, "must be a positive integer")
        self._max_buffered = max_buffered_inputs
        self._compression = _compression(compression)
        self._grace_ms = int(_positive("gc_grace_period", gc_grace_period) * 1000)
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
        self._store: ObjectStore = store if store is not None else _SHARED_STORES.acquire(path or "", store_options)
        self._clock = clock or SystemClock()
        self._rng = rng
        self._metrics = metrics or m.REGISTRY
        try:
            # Claimed before the first upload, so GC can prove this producer's files are its queue's (§6).
            owner = claim_data_prefix(
                self._store,
                manifest_path,
                data_path_prefix,
                self._clock,
                create_with_grace_ms=self._grace_ms,
                retry=retry,
                rng=rng,
            )
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
            )
        except BaseException:
            self._release_store()
            raise

        self._cond = threading.Condition()
        self._inputs: collections.deque[_Input] = collections.deque()
        self._outstanding: set[WriteHandle] = set()
        self._flush_requested = False
        self._closed = False
        self._uncommitted = 0
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
        with self._cond:
            while not self._closed and len(self._inputs) >= self._max_buffered:
                self._cond.wait()
            if self._closed:
                raise IllegalQueueStateError("produce() called on a closed Producer")
            self._inputs.append(_Input(records, bytes(metadata), handle.ingestion_time_ms, handle))
            self._outstanding.add(handle)
            self._cond.notify_all()
        return handle

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
            _SHARED_STORES.release(self._path or "", self._store_options)

    @staticmethod
    def _wait(handles: list[WriteHandle], timeout: float | None) -> None:
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
        batch = _Batch()
        while True:
            with self._cond:
                while True:
                    while self._inputs:
                        batch.add(self._inputs.popleft(), self._flush_interval)
                    self._cond.notify_all()  # room in the buffer
                    if batch and (
                        batch.raw_bytes >= self._flush_size
                        or self._flush_requested
                        or self._closed
                        or time.monotonic() >= batch.deadline
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
            self._flush(batch)
            batch = _Batch()

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
            self._cond.notify_all()
