"""The producer's side of the manifest protocol: upload a batch, append its location (JVM: ``QueueProducer``)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from osqueue import metrics as m
from osqueue.clock import Clock
from osqueue.errors import IllegalQueueStateError, InvalidConfigError
from osqueue.format.manifest import MetadataItem
from osqueue.format.manifest_codec import encode_entry
from osqueue.format.manifest_head import DEFAULT_SEGMENT_ENTRIES, MAX_SEGMENT_ENTRIES
from osqueue.queue.cooperative_commit import SOLO, check_commit_mode
from osqueue.queue.group_committers import acquire_committer, release_committer
from osqueue.queue.manifest_appender import EnqueueResult, PendingLocation
from osqueue.queue.manifest_store import DEFAULT_MANIFEST_PATH
from osqueue.queue.queue_retention import QueueFullWait
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.store.object_store import ObjectStore, validate_key


def check_segment_entries(value: object) -> int:
    """``manifest_segment_entries`` (K) is a count >= 1; InvalidConfigError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SEGMENT_ENTRIES:
        raise InvalidConfigError("manifest_segment_entries", value, f"use a count from 1 to {MAX_SEGMENT_ENTRIES}")
    return value


class QueueProducer:
    """Appends batch locations to a queue manifest.

    The ``QueueProducer`` instances of a process that share a store object, a manifest key and
    the committer's settings (clock, random source, retry policy, metrics registry and K) share
    one group committer: locations submitted while a manifest write is in flight go into the
    next write, in submission order, as consecutive entries. One whose settings differ gets its
    own committer, so its settings apply to its writes.

    Args:
        store: The object store.
        manifest_key: The manifest's key.
        clock: Time seam (default: the system clock).
        rng: Jitter source (default: an OS-seeded ``random.Random``).
        retry: Backoff and budget of conflicting writes.
        metrics: Where ``buffer.manifest_writes``/``_conflicts{role=producer}`` are counted.
        manifest_segment_entries: K: a write that would grow the manifest's tail past this many
            entries first seals the tail into a segment object (docs/format.md §2.2), so a write
            costs the same at any depth. 2048 by default, as on the JVM; ``MAX_SEGMENT_ENTRIES``
            (2147483647) never seals, keeping the queue RFC v1 (a segmented manifest is refused by
            RFC v1 readers).
        commit_mode: ``"solo"`` or ``"cooperative"`` (docs/adr/0007 part 1, :func:`check_commit_mode`).
        queue_full_wait: How long an append waits for room under a ``backpressure`` size cap (§2.3).
    """

    def __init__(
        self,
        store: ObjectStore,
        manifest_key: str = DEFAULT_MANIFEST_PATH,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        retry: RetryPolicy | None = None,
        metrics: m.MetricsRegistry | None = None,
        manifest_segment_entries: int = DEFAULT_SEGMENT_ENTRIES,
        commit_mode: str = SOLO,
        queue_full_wait: QueueFullWait | None = None,
    ) -> None:
        validate_key(manifest_key)
        check_segment_entries(manifest_segment_entries)
        check_commit_mode(commit_mode, manifest_segment_entries)
        self._key = manifest_key
        self._committer = acquire_committer(
            store,
            manifest_key,
            clock,
            rng,
            retry or RetryPolicy(),
            metrics or m.REGISTRY,
            manifest_segment_entries,
            queue_full_wait or QueueFullWait(),
            commit_mode,
        )
        # PUT start times are compared with the committer's clock: take its (the same one when given).
        self._clock = self._committer.clock
        self._closed = False
        self._lock = threading.Lock()

    @property
    def manifest_key(self) -> str:
        return self._key

    def enqueue_async(
        self,
        location: str,
        metadata: Sequence[MetadataItem] = (),
        *,
        reupload: Callable[[], str] | None = None,
        max_age_ms: int | None = None,
        put_started: float | None = None,
        extension: bytes = b"",
    ) -> Future[EnqueueResult]:
        """Submits a location for the next manifest write.

        Args:
            location: The batch key.
            metadata: The entry's metadata items.
            reupload: Uploads the batch again under a fresh ULID and returns the new key; called
                when the location's PUT started ``max_age_ms`` ago or more before a write starts.
            max_age_ms: See ``reupload`` (``gc_grace_period / 2``).
            put_started: When the location's PUT started, by this producer's clock's ``monotonic()``;
                without it the location's ULID time is its start, which trusts the uploader's wall
                clock to agree with this one (docs/format.md §6).
            extension: The entry's extension records (docs/format.md §2.1), e.g. the batch's
                integrity record (``osqueue.format.batch_integrity.record``).

        Returns:
            A future of the entry's sequence and final location.
        """
        validate_key(location)
        metadata = list(metadata)
        encode_entry(0, location, metadata, extension)  # fails here, not in a shared group write
        with self._lock:
            if self._closed:
                raise IllegalQueueStateError("this QueueProducer is closed")
            future: Future[EnqueueResult] = Future()
            self._committer.submit(
                PendingLocation(location, metadata, future, reupload, max_age_ms, put_started, self._clock, extension)
            )
            return future

    def enqueue(
        self, location: str, metadata: Sequence[MetadataItem] = (), timeout: float | None = None
    ) -> EnqueueResult:
        """Like :meth:`enqueue_async`, but waits for the manifest write."""
        return self.enqueue_async(location, metadata).result(timeout)

    def close(self) -> None:
        """Stops accepting locations; those already submitted are still written."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        release_committer(self._committer)

    def __enter__(self) -> QueueProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
