"""Ships a producer spool's batches: PUT, manifest CAS with ATTEMPT records, LANDED; replay (JVM: ``SpoolUploader``).

Steps 2-6 of docs/adr/0006 part 2, pipelined as an unspooled producer's group commit is (issue 28): up to
``PARALLEL_PUTS`` batch files are PUT at once while one thread appends the uploaded ones, in batch order,
several per manifest write (one ATTEMPT record names them all; one LANDED record settles them all). The uploader retries PUTs and manifest writes without a budget
(backoff up to the retry policy's ``max_delay``), so an outage only delays delivery. Each CAS is
preceded by an ATTEMPT record, and every later write of the batch (a retry, or a replay after a
crash) is seeded with all of them, so a write of unknown outcome is resolved as docs/format.md §5
does (the locations at their bases, the segments, the receipts) before anything is appended again.

Resolution here is §5's rule for queues without a writers section: a spooled producer commits solo
and records no writer sequence (cooperative commit refuses a spool), so the exact ``batch_no <=
last_batch`` rule of the writers section (§5.4) is not used.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from osqueue import metrics as m
from osqueue.clock import Clock
from osqueue.errors import AmbiguousCommitError, ConflictRetriesExhaustedError, StoreError
from osqueue.format.batch_codec import Compression, encode_batch
from osqueue.format.batch_integrity import record as integrity_record
from osqueue.format.batch_names import new_batch_key
from osqueue.format.manifest import MetadataItem
from osqueue.producer.spool import Spool, SpooledBatch
from osqueue.producer.spool_log import BatchRecord, EntriesRecord
from osqueue.queue.data_prefix_owner import DataPrefixOwner
from osqueue.queue.manifest_appender import EnqueueResult, ManifestAppender, PendingLocation
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.store.object_store import ObjectStore

_log = logging.getLogger("osqueue.producer.spool")

# A store error is retried; so is a CAS loop that ran out of budget against other writers.
_RETRIED = (StoreError, ConflictRetriesExhaustedError)
_T = TypeVar("_T")

# Batch files PUT at once, and batches appended per manifest write at most (an ATTEMPT record's count is a u16).
PARALLEL_PUTS = 4
MAX_GROUP = 64


def assemble(calls: Sequence[EntriesRecord]) -> tuple[list[bytes], list[MetadataItem]]:
    """A batch's records and metadata items from its calls, as the producer builds them."""
    records: list[bytes] = []
    metadata: list[MetadataItem] = []
    for c in calls:
        metadata.append(MetadataItem(len(records), c.ingestion_time_ms, c.metadata))
        records.extend(c.entries)
    return records, metadata


@dataclass(eq=False)
class Shipment:
    """One named batch on its way: its PUT (resolving to when it started, by ``clock.monotonic()``) and
    the future its landing resolves with (its result and size)."""

    batch_no: int
    data: bytes
    location: str
    metadata: list[MetadataItem]
    put: Future[float]
    done: Future[tuple[EnqueueResult, int]]


def replay_groups(pending: Sequence[SpooledBatch]) -> list[list[SpooledBatch]]:
    """The pending batches cut into manifest writes, in batch order: a batch with ATTEMPT records goes with
    the batches its write carried (so each earlier write is resolved as the group it was); runs of batches
    never sent go MAX_GROUP at a time."""
    by_no = {b.record.batch_no: b for b in pending}
    placed: set[int] = set()
    groups: list[list[SpooledBatch]] = []
    run: list[SpooledBatch] = []
    for b in pending:
        n = b.record.batch_no
        if n in placed:
            continue
        if not b.attempts:
            run.append(b)
            placed.add(n)
            if len(run) == MAX_GROUP:
                groups.append(run)
                run = []
            continue
        if run:
            groups.append(run)
            run = []
        members = sorted({k for a in b.attempts for k in a.batch_nos if k in by_no and k not in placed} | {n})
        placed.update(members)
        groups.append([by_no[m] for m in members])
    if run:
        groups.append(run)
    return groups


class SpoolUploader:
    """PUTs named batches a few at a time and appends them in batch order, several per manifest write,
    recording each step in the spool."""

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
        self._puts = ThreadPoolExecutor(PARALLEL_PUTS, thread_name_prefix="osqueue-spool-put")
        self._cond = threading.Condition()
        self._in_flight: list[Shipment] = []  # submitted, not yet taken by the committer, in batch order
        self._committer: threading.Thread | None = None
        self._unsettled: list[
            tuple[int, list[int]]
        ] = []  # LANDED records written, not yet fsync'd: (ticket, batch_nos)

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

    def _put(self, key: str, data: bytes) -> float:
        started = self._clock.monotonic()
        self._forever(f"PUT {key}", lambda: self._store.put(key, data))
        return started

    def _reupload(self, data: bytes) -> str:
        key = new_batch_key(self._prefix, self._clock, self._rng)
        self._put(key, data)
        return key

    def _shipment(self, batch_no: int, data: bytes, location: str, metadata: list[MetadataItem]) -> Shipment:
        """Starts the PUT of a batch its BATCH record already named (step 3)."""
        return Shipment(batch_no, data, location, metadata, self._puts.submit(self._put, location, data), Future())

    def submit(self, calls: Sequence[EntriesRecord]) -> Future[tuple[EnqueueResult, int]]:
        """Steps 2-6 for calls that are in no batch yet: encode and BATCH record in this thread, then in the
        background the PUT (no fsync first: the ATTEMPT's covers the BATCH record) and the append. The future
        resolves once the batch's manifest CAS landed (before its LANDED record is fsync'd), with its result and size, or fails with what retrying cannot fix (e.g. ``AmbiguousCommitError``; the batch
        stays in the spool)."""
        data, metadata = self.encode(calls)
        key = new_batch_key(self._prefix, self._clock, self._rng)
        batch_no = self._spool.name_batch(calls[0].call_no, calls[-1].call_no, len(data), zlib.crc32(data), key)
        # No fsync of the BATCH record before its PUT: the ATTEMPT record's fsync before the CAS covers it
        # (tickets are synced in order, a rotation syncs the file it closes), so a name that is not durable is
        # never in the manifest; after a crash replay re-batches its calls under a fresh name, and the orphan
        # object is unreferenced garbage that GC deletes (docs/adr/0006 part 2).
        shipment = Shipment(batch_no, data, key, metadata, self._puts.submit(self._put, key, data), Future())
        with self._cond:
            self._in_flight.append(shipment)
            if self._committer is None:
                self._committer = threading.Thread(target=self._run, name="osqueue-spool-commit", daemon=True)
                self._committer.start()
            self._cond.notify_all()
        return shipment.done

    def _run(self) -> None:
        """The committer: waits for the oldest PUT, then appends it with every later one already uploaded."""
        while True:
            with self._cond:
                idle = not self._in_flight
            if idle:
                self._settle_landed(sync=True)  # the last LANDED records: fsync'd off the callers' path
                with self._cond:
                    if self._in_flight:
                        continue
                    self._committer = None
                    self._cond.notify_all()
                    return
            with self._cond:
                first = self._in_flight[0]
            if not first.put.done():
                self._settle_landed(sync=True)  # nothing to coalesce with while the PUT is out: settle now
            try:
                first.put.result()
            except BaseException as e:  # not a store error (those are retried): this batch fails alone
                with self._cond:
                    self._in_flight.pop(0)
                first.done.set_exception(e)
                continue
            with self._cond:
                n = 1
                while (
                    n < min(len(self._in_flight), MAX_GROUP)
                    and self._in_flight[n].put.done()
                    and self._in_flight[n].put.exception() is None
                ):
                    n += 1
                group, self._in_flight = self._in_flight[:n], self._in_flight[n:]
            try:
                results = self._commit(group)
            except BaseException as e:
                for s in group:
                    s.done.set_exception(e)
                continue
            for s, r in zip(group, results):
                s.done.set_result((r, len(s.data)))

    def _commit(self, group: Sequence[Shipment]) -> list[EnqueueResult]:
        """Steps 4-6 for uploaded batches: appended in one write (ATTEMPT before each CAS), then LANDED."""
        batch_nos = [s.batch_no for s in group]

        def record(base: int, locations: tuple[str, ...]) -> None:
            self._spool.record_attempt(base, batch_nos, locations)
            self._settle_landed(sync=False)  # that fsync covered every LANDED record written before it

        def commit() -> list[EnqueueResult]:
            seen: dict[int, tuple[int, tuple[str, ...]]] = {}  # an ATTEMPT record names every batch it carried
            for n in batch_nos:
                for a in self._spool.attempts_of(n):
                    seen.setdefault(id(a), (a.base, a.locations))
            prior = list(seen.values())
            pending = [
                PendingLocation(
                    s.location,
                    s.metadata,
                    Future(),
                    functools.partial(self._reupload, s.data),
                    self._grace_ms // 2,
                    s.put.result() if not prior else None,
                    self._clock,
                    integrity_record(s.data),
                )
                for s in group
            ]
            return self._appender.commit_many(pending, prior=prior, on_attempt=record)

        what = f"appending batch {batch_nos[0]}" + (f"..{batch_nos[-1]}" if len(group) > 1 else "")
        results = self._forever(what, commit)
        # The handles resolve once the CAS landed, before LANDED is durable (a crash in between is
        # an ATTEMPT without LANDED, which replay resolves as landed). The record is fsync'd by the next
        # ATTEMPT's fsync or when the uploader goes idle; only then are the batches settled (truncation).
        ticket = self._spool.append_landed(results[0].sequence, batch_nos)
        self._unsettled.append((ticket, batch_nos))
        return results

    def _settle_landed(self, *, sync: bool) -> None:
        """Settles the batches whose LANDED records are on disk (``sync``: fsyncs them first)."""
        if not self._unsettled:
            return
        if sync:
            self._spool.sync(self._unsettled[-1][0])
        done, self._unsettled = self._unsettled, []
        for _, batch_nos in done:
            self._spool.settle_landed(batch_nos)

    def encode(self, calls: Sequence[EntriesRecord]) -> tuple[bytes, list[MetadataItem]]:
        records, metadata = assemble(calls)
        return encode_batch(records, self._compression), metadata

    def replay(self) -> int:
        """Ships every batch the spool named but did not see land (step 2 on), in batch order and grouped
        as :func:`replay_groups` says; how many. The data prefix is claimed first (the queue's grace period,
        if shorter than ours, is the one kept)."""
        if self._claim is not None:
            owner = self._forever("claiming the data prefix", self._claim)
            if owner is not None:
                self._grace_ms = min(self._grace_ms, owner.gc_grace_period_ms)
        shipped = 0
        for group in replay_groups(self._spool.pending_batches()):
            shipments = []
            for b in group:
                r = b.record
                data, metadata = self.encode(self._spool.batch_calls(r.batch_no))
                location = r.location
                if len(data) != r.byte_length or zlib.crc32(data) != r.batch_crc32:
                    # Other bytes (another compression or zstd build): a fresh name, recorded before its PUT.
                    location = new_batch_key(self._prefix, self._clock, self._rng)
                    self._spool.rename_batch(
                        BatchRecord(r.batch_no, r.first_call, r.last_call, len(data), zlib.crc32(data), location)
                    )
                shipments.append(self._shipment(r.batch_no, data, location, metadata))
            for s in shipments:
                s.put.result()
            self._commit(shipments)
            self._settle_landed(sync=True)
            self._metrics.counter(m.SPOOL_REPLAYED_BATCHES).inc(len(group))
            shipped += len(group)
        return shipped

    def idle(self, timeout: float | None = None) -> bool:
        """Waits until nothing submitted is still on its way; whether that happened within ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._committer is None, timeout)

    def close(self) -> None:
        """Stops the PUT threads (call once :meth:`idle`)."""
        self._puts.shutdown(wait=False)
