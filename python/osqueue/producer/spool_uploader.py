"""Ships a producer spool's batches: PUT, manifest CAS with ATTEMPT records, LANDED; replay (JVM: ``SpoolUploader``).

Steps 2-6 of docs/adr/0006 part 2. The uploader retries PUTs and manifest writes without a budget
(backoff up to the retry policy's ``max_delay``), so an outage only delays delivery. Each CAS is
preceded by an ATTEMPT record, and every later write of the batch (a retry, or a replay after a
crash) is seeded with all of them, so a write of unknown outcome is resolved as docs/format.md §5
does (the locations at their bases, the segments, the receipts) before anything is appended again.

Resolution here is §5's rule for queues without a writers section: a spooled producer commits solo
and records no writer sequence (cooperative commit refuses a spool), so the exact ``batch_no <=
last_batch`` rule of the writers section (§5.4) is not used.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections.abc import Callable, Sequence
from typing import TypeVar

from osqueue import metrics as m
from osqueue.clock import Clock
from osqueue.errors import AmbiguousCommitError, ConflictRetriesExhaustedError, StoreError
from osqueue.format.batch_codec import Compression, encode_batch
from osqueue.format.batch_integrity import record as integrity_record
from osqueue.format.batch_names import new_batch_key
from osqueue.format.manifest import MetadataItem
from osqueue.producer.spool import Spool
from osqueue.producer.spool_log import BatchRecord, EntriesRecord
from osqueue.queue.data_prefix_owner import DataPrefixOwner
from osqueue.queue.manifest_appender import EnqueueResult, ManifestAppender
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.store.object_store import ObjectStore

_log = logging.getLogger("osqueue.producer.spool")

# A store error is retried; so is a CAS loop that ran out of budget against other writers.
_RETRIED = (StoreError, ConflictRetriesExhaustedError)
_T = TypeVar("_T")


def assemble(calls: Sequence[EntriesRecord]) -> tuple[list[bytes], list[MetadataItem]]:
    """A batch's records and metadata items from its calls, as the producer builds them."""
    records: list[bytes] = []
    metadata: list[MetadataItem] = []
    for c in calls:
        metadata.append(MetadataItem(len(records), c.ingestion_time_ms, c.metadata))
        records.extend(c.entries)
    return records, metadata


class SpoolUploader:
    """Uploads and appends one batch at a time, recording each step in the spool."""

    def __init__(
        self,
        store: ObjectStore,
        spool: Spool,
        appender: ManifestAppender,
        *,
        prefix: str,
        compression: Compression,
        grace_ms: int,
        clock: Clock,
        rng: random.Random | None,
        retry: RetryPolicy,
        metrics: m.MetricsRegistry,
        claim: Callable[[], DataPrefixOwner | None] | None = None,
    ) -> None:
        """``claim``: the data prefix's owner claim (docs/format.md §6), made by :meth:`replay` before any
        upload and retried like an upload, so a producer started while the store is unreachable starts."""
        self._claim = claim
        self._store = store
        self._spool = spool
        self._appender = appender
        self._prefix = prefix
        self._compression = compression
        self._grace_ms = grace_ms
        self._clock = clock
        self._rng = rng
        self._retry = retry
        self._metrics = metrics
        self._jitter = rng or random.Random(0)

    def _forever(self, what: str, action: Callable[[], _T]) -> _T:
        failures = 0
        while True:
            try:
                return action()
            except (*_RETRIED, AmbiguousCommitError) as e:
                # The CAS loop gave up while a write was undecided: its ATTEMPT record is kept, so the next
                # try resolves it. An ambiguity found by looking (no cause) is final: raised.
                if isinstance(e, AmbiguousCommitError) and not isinstance(e.__cause__, _RETRIED):
                    raise
                failures += 1
                if failures == 1 or failures % 50 == 0:
                    _log.warning(
                        "spool '%s': %s failed (%d times so far), retrying: %s",
                        self._spool.directory,
                        what,
                        failures,
                        e,
                    )
                self._clock.sleep(self._retry.delay(min(failures, 30), self._jitter))

    def _put(self, key: str, data: bytes) -> None:
        self._forever(f"PUT {key}", lambda: self._store.put(key, data))

    def _reupload(self, data: bytes) -> str:
        key = new_batch_key(self._prefix, self._clock, self._rng)
        self._put(key, data)
        return key

    def ship(self, batch_no: int, data: bytes, location: str, metadata: Sequence[MetadataItem]) -> EnqueueResult:
        """PUTs the batch (already named by a BATCH record) and appends it; LANDED when it is in.

        Raises:
            OsqueueError: A failure that retrying cannot fix (e.g. ``AmbiguousCommitError``); the
                batch stays in the spool.
        """
        put_started = self._clock.monotonic()
        self._put(location, data)

        def record(base: int, loc: str) -> None:
            self._spool.record_attempt(base, [batch_no], [loc])

        def commit() -> EnqueueResult:
            prior = [(a.base, a.locations) for a in self._spool.attempts_of(batch_no)]
            return self._appender.commit_one(
                location,
                metadata,
                prior=prior,
                on_attempt=record,
                reupload=lambda: self._reupload(data),
                max_age_ms=self._grace_ms // 2,
                put_started=put_started if not prior else None,
                extension=integrity_record(data),
            )

        result = self._forever(f"appending batch {batch_no}", commit)
        assert result is not None
        self._spool.record_landed(result.sequence, [batch_no])
        return result

    def ship_calls(self, calls: Sequence[EntriesRecord]) -> tuple[EnqueueResult, int]:
        """Steps 2-6 for calls that are in no batch yet: encode, BATCH record, :meth:`ship`; the result and size."""
        data, metadata = self.encode(calls)
        key = new_batch_key(self._prefix, self._clock, self._rng)
        batch_no = self._spool.record_batch(calls[0].call_no, calls[-1].call_no, len(data), zlib.crc32(data), key)
        return self.ship(batch_no, data, key, metadata), len(data)

    def encode(self, calls: Sequence[EntriesRecord]) -> tuple[bytes, list[MetadataItem]]:
        records, metadata = assemble(calls)
        return encode_batch(records, self._compression), metadata

    def replay(self) -> int:
        """Ships every batch the spool named but did not see land (step 2 on); how many. The data prefix
        is claimed first (the queue's grace period, if shorter than ours, is the one kept)."""
        if self._claim is not None:
            owner = self._forever("claiming the data prefix", self._claim)
            if owner is not None:
                self._grace_ms = min(self._grace_ms, owner.gc_grace_period_ms)
        shipped = 0
        for b in self._spool.pending_batches():
            r = b.record
            data, metadata = self.encode(self._spool.batch_calls(r.batch_no))
            location = r.location
            if len(data) != r.byte_length or zlib.crc32(data) != r.batch_crc32:
                # Other bytes (another compression or zstd build): a fresh name, recorded before its PUT.
                location = new_batch_key(self._prefix, self._clock, self._rng)
                self._spool.rename_batch(
                    BatchRecord(r.batch_no, r.first_call, r.last_call, len(data), zlib.crc32(data), location)
                )
            self.ship(r.batch_no, data, location, metadata)
            self._metrics.counter(m.SPOOL_REPLAYED_BATCHES).inc()
            shipped += 1
        return shipped
