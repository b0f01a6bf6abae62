"""The queue protocol on the manifest (docs/format.md §5).

* :class:`ManifestStore` reads and compare-and-swaps the manifest object.
* :class:`QueueProducer` appends batch locations through a *group committer*: one background
  thread per (store, manifest key) in the process, which puts every location that became ready
  while a manifest write was in flight into the next write. Writes that fail with an unknown
  outcome are resolved by re-reading the manifest, so a producer never leaves a duplicate entry.
* :class:`QueueConsumer` owns the consumer side: the epoch bump that fences older consumers,
  the resume point, epoch-checked reads and dequeues.

Time and randomness come from an injectable :class:`Clock` and ``random.Random``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from osqueue import metrics as m
from osqueue.cas_loop import CasLoop, CasStep, Done, PreviousAttempt, Snapshot, Unknown, Write
from osqueue.errors import (
    AmbiguousCommitError,
    CorruptManifestError,
    FencedError,
    IllegalQueueStateError,
    InvalidConfigError,
    ResumePointError,
    StoreError,
)
from osqueue.format import (
    INCARNATION_SUFFIX,
    MAX_RECEIPTS,
    RECEIPTS_SUFFIX,
    DequeueReceipts,
    Manifest,
    ManifestEntry,
    MetadataItem,
    SegmentRef,
    SupportsRandBits,
    decode_manifest,
    decode_segment,
    empty_manifest,
    encode_entry,
    incarnation_of,
    new_incarnation_epoch,
    next_epoch,
    parse_batch_ulid_ms,
)
from osqueue.manifest_head import DEFAULT_SEGMENT_ENTRIES, RawHead, SealedTail, parse_head
from osqueue.segment_names import new_key as new_segment_key
from osqueue.segment_names import ulid_time_ms as segment_ulid_time_ms
from osqueue.store import CasOutcome, ObjectStore, ObjectVersion, Written, validate_key

_log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MANIFEST_PATH",
    "DEFAULT_DATA_PATH_PREFIX",
    "Clock",
    "SystemClock",
    "RetryPolicy",
    "ManifestStore",
    "EnqueueResult",
    "QueueProducer",
    "BatchDescriptor",
    "QueueConsumer",
]

DEFAULT_MANIFEST_PATH = "ingest/manifest"
DEFAULT_DATA_PATH_PREFIX = "ingest"
SEGMENT_READS_IN_FLIGHT = 8
"""Segment GETs in flight at once when a whole segmented manifest is read (as on the JVM)."""


class Clock(Protocol):
    """The time seam: wall clock for ULIDs and ages, monotonic clock and sleep for waits."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    def sleep(self, seconds: float) -> None:
        """Waits ``seconds``."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff and budget of manifest compare-and-swap retries.

    The n-th retry waits a uniformly random time in ``[0, min(max_delay, base_delay * 2^(n-1))]``
    (full jitter). Retrying stops after ``max_attempts`` attempts or ``max_elapsed`` seconds.
    """

    base_delay: float = 0.010
    max_delay: float = 1.0
    max_elapsed: float = 30.0
    max_attempts: int = 1000

    def __post_init__(self) -> None:
        if self.base_delay < 0 or self.max_delay < 0:
            raise InvalidConfigError("base_delay/max_delay", f"{self.base_delay}/{self.max_delay}", "must be >= 0")
        if self.max_attempts < 1:
            raise InvalidConfigError("max_attempts", self.max_attempts, "must be at least 1")
        if self.max_elapsed <= 0:
            raise InvalidConfigError("max_elapsed", self.max_elapsed, "must be > 0")

    def delay(self, retry: int, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (1-based)."""
        cap = min(self.max_delay, self.base_delay * (2 ** min(retry - 1, 62)))
        return rng.uniform(0.0, cap)


class _Budget:
    """Counts attempts and sleeps between them."""

    def __init__(self, policy: RetryPolicy, clock: Clock, rng: random.Random) -> None:
        self.policy = policy
        self.clock = clock
        self.rng = rng
        self.start = clock.monotonic()
        self.attempts = 0

    def elapsed_ms(self) -> int:
        return int((self.clock.monotonic() - self.start) * 1000)

    def retry(self) -> bool:
        """Records a failed attempt; sleeps and returns True if another one is allowed."""
        self.attempts += 1
        if self.attempts >= self.policy.max_attempts:
            return False
        if self.clock.monotonic() - self.start >= self.policy.max_elapsed:
            return False
        self.clock.sleep(self.policy.delay(self.attempts, self.rng))
        return True


class ManifestStore:
    """Reads and compare-and-swaps one manifest object.

    Args:
        store: The object store.
        key: The manifest's key (default ``ingest/manifest``).
    """

    def __init__(self, store: ObjectStore, key: str = DEFAULT_MANIFEST_PATH) -> None:
        self.store = store
        self.key = validate_key(key)

    def read_raw(self) -> tuple[bytes | None, ObjectVersion | None]:
        """The manifest's bytes and version; ``(None, None)`` when it does not exist."""
        obj = self.store.get(self.key)
        return (None, None) if obj is None else (obj.data, obj.version)

    def decode(self, raw: bytes | None) -> Manifest:
        """Decodes raw bytes; None is the empty manifest. A segmented head's segments are all read
        (memory grows with the queue: lazy readers use :meth:`head` and :meth:`read_segment`),
        ``SEGMENT_READS_IN_FLIGHT`` at a time."""
        if raw is None:
            return Manifest([], 0, 0)
        head = self.head(raw)
        if not head.segments:
            return decode_manifest(raw, self.key)
        with ThreadPoolExecutor(SEGMENT_READS_IN_FLIGHT, thread_name_prefix="osqueue-segment-reader") as pool:
            sealed = [e for entries in pool.map(self.read_segment, head.segments) for e in entries]
        queued = [e for e in sealed if e.sequence >= head.low_water] + head.tail_entries()
        return Manifest(queued, head.next_sequence, head.epoch)

    def head(self, raw: bytes | None) -> RawHead:
        """The manifest as writers and lazy readers see it (docs/format.md §2.2); None is the empty manifest."""
        return parse_head(empty_manifest() if raw is None else raw, self.key)

    def read_segment(self, ref: SegmentRef) -> list[ManifestEntry]:
        """A listed segment's entries, checked against its ref.

        Raises:
            CorruptManifestError: The segment is missing ("listed but missing") or differs from its ref.
        """
        data = self.read_segment_bytes(ref)
        if data is None:
            raise CorruptManifestError(
                ref.key,
                f"segment of '{self.key}' (sequences {ref.first_sequence} to {ref.last_sequence}) is listed but missing",
            )
        return decode_segment(data, ref)

    def read_segment_bytes(self, ref: SegmentRef) -> bytes | None:
        """The segment's bytes, None if it is gone (a reader racing the dequeue that dropped it, and GC)."""
        obj = self.store.get(ref.key)
        return None if obj is None else obj.data

    def write_segment(self, sealed: SealedTail, now_ms: int, rng: SupportsRandBits) -> SegmentRef:
        """Stores a sealed tail under a fresh segment name (before any head lists it, docs/format.md §2.2)."""
        ref = sealed.ref(new_segment_key(self.key, now_ms, rng))
        self.store.put(ref.key, sealed.data)
        return ref

    def read(self) -> tuple[Manifest, ObjectVersion | None]:
        """The decoded manifest (empty when missing) and its version."""
        raw, version = self.read_raw()
        return self.decode(raw), version

    def write(self, data: bytes, expected: ObjectVersion | None) -> CasOutcome:
        """Create-if-absent when ``expected`` is None, else put-if-version-matches."""
        if expected is None:
            return self.store.put_if_absent(self.key, data)
        return self.store.put_if_version_matches(self.key, data, expected)

    @property
    def receipts_key(self) -> str:
        """``<manifest>.dequeued``: the dequeue receipts (docs/format.md §5.1)."""
        return self.key + RECEIPTS_SUFFIX

    def read_receipts(self) -> DequeueReceipts | None:
        """The dequeue receipts; None when absent or not receipts v1. Raises ``StoreError``."""
        obj = self.store.get(self.receipts_key)
        return None if obj is None else DequeueReceipts.decode(obj.data)

    def write_receipts(self, receipts: DequeueReceipts) -> None:
        self.store.put(self.receipts_key, receipts.encode())

    @property
    def incarnation_key(self) -> str:
        """``<manifest>.incarnation``: the incarnation the last consumer initialized (§5.2)."""
        return self.key + INCARNATION_SUFFIX

    def read_recorded_incarnation(self) -> int | None:
        """The recorded incarnation; None when absent or not a decimal number."""
        obj = self.store.get(self.incarnation_key)
        if obj is None:
            return None
        text = obj.data.decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None

    def record_incarnation(self, incarnation: int) -> None:
        self.store.put(self.incarnation_key, str(incarnation).encode("ascii"))


OWNER_NAME = "osqueue.owner"
"""``<data_path_prefix>/osqueue.owner``: which manifest owns the batch files under the prefix."""

DEFAULT_GC_GRACE_PERIOD_MS = 600_000
"""The default GC grace period; GC never records a shorter one for its queue (docs/format.md §6)."""


@dataclass(frozen=True)
class QueueOwner:
    """``<data_path_prefix>/osqueue.owner`` (docs/format.md §6).

    Attributes:
        manifest: The manifest whose queue owns the data prefix.
        claimed_at_ms: When it was claimed (informational).
        gc_grace_period_ms: The queue's one GC grace period: producers re-upload a batch older than
            half of it (or of their own, if shorter) and GC never uses a shorter one.
    """

    manifest: str
    claimed_at_ms: int
    gc_grace_period_ms: int


def claim_data_prefix(
    store: ObjectStore,
    manifest_key: str,
    data_prefix: str,
    clock: Clock | None = None,
    *,
    create_with_grace_ms: int | None = None,
    retry: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> QueueOwner | None:
    """Proves ``data_prefix`` holds this queue's batches and reads the queue's grace period.

    ``<data_prefix>/osqueue.owner`` (JSON ``{"version":1,"manifest":…,"claimedAtMs":…,
    "gcGracePeriodMs":…}``) names the one manifest whose producers may write there and whose GC may
    delete there, and the grace period every producer and GC of the queue uses. The first
    producer or GC of the queue creates it (create-if-absent).

    Args:
        create_with_grace_ms: Create the record with this grace period when there is none (None:
            only check an existing one).
        retry: The budget for a failing store (default :class:`RetryPolicy`); a create whose
            reply was lost is settled by the re-read, which finds this queue's own record.

    Returns:
        The record (None when there is none and ``create_with_grace_ms`` is None).

    Raises:
        InvalidConfigError: Another manifest owns the prefix (two queues sharing a data prefix),
            or the record is not readable.
        StoreError: The store kept failing.
    """
    clock = clock or SystemClock()
    budget = _Budget(retry or RetryPolicy(), clock, rng or random.Random())
    while True:
        try:
            return _claim_data_prefix_once(store, manifest_key, data_prefix, clock, create_with_grace_ms)
        except StoreError:
            if not budget.retry():
                raise


def _claim_data_prefix_once(
    store: ObjectStore, manifest_key: str, data_prefix: str, clock: Clock, create_with_grace_ms: int | None
) -> QueueOwner | None:
    prefix = data_prefix.rstrip("/")
    key = validate_key(f"{prefix}/{OWNER_NAME}")
    for _ in range(2):  # a lost create race is settled by reading the winner's record
        obj = store.get(key)
        if obj is None:
            if create_with_grace_ms is None:
                return None
            created = QueueOwner(manifest_key, clock.now_ms(), create_with_grace_ms)
            record = {
                "version": 1,
                "manifest": created.manifest,
                "claimedAtMs": created.claimed_at_ms,
                "gcGracePeriodMs": created.gc_grace_period_ms,
            }
            if isinstance(store.put_if_absent(key, json.dumps(record, separators=(",", ":")).encode()), Written):
                return created
            continue
        try:
            found = json.loads(obj.data.decode("utf-8"))
            owner = QueueOwner(found["manifest"], found["claimedAtMs"], found["gcGracePeriodMs"])
            if not isinstance(owner.manifest, str) or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0
                for v in (owner.claimed_at_ms, owner.gc_grace_period_ms)
            ):
                raise ValueError
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise InvalidConfigError(
                "data_path_prefix",
                prefix,
                f"its owner record '{key}' is not osqueue's (expected JSON with "
                "manifest, claimedAtMs and gcGracePeriodMs); GC will not delete there and producers will not write there",
            ) from None
        if owner.manifest == manifest_key:
            return owner
        raise InvalidConfigError(
            "data_path_prefix",
            prefix,
            f"holds the batches of the queue whose manifest is '{owner.manifest}' (per '{key}'), not of "
            f"'{manifest_key}': two queues sharing a data prefix would delete each other's batches in GC; give each "
            "queue its own",
        )
    raise IllegalQueueStateError(f"could not create or read '{key}'")


# ---------------------------------------------------------------------------------------------
# Producer side: group commit


@dataclass(frozen=True)
class EnqueueResult:
    """Where an enqueued batch ended up.

    Attributes:
        sequence: The manifest entry's sequence.
        location: The batch key in the entry (differs from the submitted one when the batch
            had to be re-uploaded under a fresh ULID, see docs/format.md §6).
    """

    sequence: int
    location: str


@dataclass(eq=False)
class _Pending:
    location: str
    metadata: list[MetadataItem]
    future: Future[EnqueueResult]
    reupload: Callable[[], str] | None = None
    max_age_ms: int | None = None


class _GroupCommitter:
    """One background thread appending everything submitted for one (store, manifest key)."""

    def __init__(
        self,
        manifest: ManifestStore,
        clock: Clock,
        rng: random.Random,
        policy: RetryPolicy,
        metrics: m.MetricsRegistry,
        segment_entries: int = DEFAULT_SEGMENT_ENTRIES,
    ) -> None:
        self.manifest = manifest
        self.clock = clock
        self.rng = rng
        self.policy = policy
        self.metrics = metrics
        self.segment_entries = segment_entries
        self.loop = CasLoop(manifest, policy, clock, rng, metrics, "producer")
        self.refs = 0
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._thread: threading.Thread | None = None
        # Data prefixes proven to be this queue's, with the queue's grace period (None: no record yet).
        self._claimed: dict[str, int | None] = {}

    def submit(self, pending: _Pending) -> None:
        with self._cond:
            self._queue.append(pending)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"osqueue-manifest-committer[{self.manifest.key}]", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._thread = None
                    return
                group, self._queue = self._queue, []
            try:
                results = self._commit(group)
            except BaseException as e:  # every future of the group gets the same error
                for p in group:
                    if not p.future.done():
                        p.future.set_exception(e)
                continue
            for p, r in zip(group, results):
                p.future.set_result(r)

    # -- one group ------------------------------------------------------------------------

    def _max_age_ms(self, p: _Pending) -> int | None:
        """Half the queue's grace period if it is shorter than the one the caller was given (§6)."""
        grace = self._claimed.get(p.location.rpartition("/")[0])
        if grace is None:
            return p.max_age_ms
        return grace // 2 if p.max_age_ms is None else min(p.max_age_ms, grace // 2)

    def _refresh_stale(self, group: Sequence[_Pending]) -> None:
        for p in group:
            max_age_ms = self._max_age_ms(p)
            if max_age_ms is None or p.reupload is None:
                continue
            # The fresh copy is named before its upload, so a slow re-upload is stale too: check again.
            reuploads = 0
            while True:
                created = parse_batch_ulid_ms(p.location)
                if created is None or self.clock.now_ms() - created < max_age_ms:
                    break
                if reuploads == MAX_REUPLOADS:
                    raise StoreError(
                        f"batch '{p.location}': {reuploads + 1} uploads in a row took longer than half the GC "
                        f"grace period ({max_age_ms} ms), so GC could delete it before it is enqueued; "
                        "increase gc_grace_period or make uploads faster"
                    )
                p.location = p.reupload()
                self.metrics.counter(m.BATCHES_REUPLOADED).inc()
                reuploads += 1

    def _seal(self, sealed: SealedTail, group: Sequence[_Pending]) -> SegmentRef:
        """Stores a sealed tail as a new segment, named right before the head CAS that lists it; a
        name already half a grace period old (a slow PUT) could be GC'd before it is listed, so the
        segment is written again under a fresh name, as stale batches are (docs/format.md §2.2)."""
        max_age_ms = self._segment_max_age_ms(group)
        tries = 0
        while True:
            ref = self.manifest.write_segment(sealed, self.clock.now_ms(), self.rng)
            self.metrics.counter(m.SEGMENTS_SEALED).inc()
            named = segment_ulid_time_ms(self.manifest.key, ref.key)
            assert named is not None
            if self.clock.now_ms() - named < max_age_ms:
                return ref
            tries += 1
            if tries > MAX_REUPLOADS:
                raise StoreError(
                    f"segment of '{self.manifest.key}': {tries} writes in a row took longer than half the GC grace "
                    f"period ({max_age_ms} ms); increase gc_grace_period or make writes faster"
                )

    def _segment_max_age_ms(self, group: Sequence[_Pending]) -> int:
        """Half the shortest grace period known: the callers' and the queue's (GC of segments uses the queue's)."""
        known = [p.max_age_ms for p in group if p.max_age_ms is not None]
        known += [g // 2 for g in self._claimed.values() if g is not None]
        return min(known, default=DEFAULT_GC_GRACE_PERIOD_MS // 2)

    def _receipts_from(self, min_sequence: int) -> dict[int, str]:
        """Dequeued ``sequence -> location`` from ``min_sequence`` on, per the receipts ({} if none)."""
        try:
            receipts = self.manifest.read_receipts()
        except StoreError:
            return {}
        if receipts is None:
            return {}
        start = max(min_sequence, receipts.first)
        return {
            q: receipts.locations[q - receipts.first] for q in range(start, receipts.first + len(receipts.locations))
        }

    def _find_landed(
        self, raw: bytes | None, tried: list[tuple[str, ...]], min_base: int, history: Mapping[int, str] | None = None
    ) -> list[EnqueueResult] | None:
        """The sequences of an earlier attempt if it is found to have landed.

        One CAS write is atomic, so an attempt with *any* location present landed as a whole
        (the consumer may already have dequeued a prefix of it): its entries are consecutive,
        so a location at index ``i`` found at sequence ``s`` puts the attempt at ``s - i``.
        Retries may carry some of the same locations at other sequences, so the attempt whose
        every still-present slot holds its own location is the one that landed. ``history``
        (dequeue receipts) tells where already-dequeued sequences pointed.
        """
        if raw is None:
            return None
        wanted = {loc for attempt in tried for loc in attempt}
        at = self._queued_locations_from(self.manifest.head(raw), min_base)
        first_present = min(at, default=self.manifest.head(raw).next_sequence)
        for sequence, location in (history or {}).items():
            at.setdefault(sequence, location)
        found = {location: sequence for sequence, location in at.items() if location in wanted}
        if not found:
            return None
        for attempt in reversed(tried):
            present = [(i, loc) for i, loc in enumerate(attempt) if loc in found]
            if not present:
                continue
            base = found[present[0][1]] - present[0][0]
            # A slot is checked where it is known: in the manifest, or in the receipts.
            if all(
                at.get(base + i) == loc if base + i >= first_present or base + i in at else True
                for i, loc in enumerate(attempt)
            ):
                return [EnqueueResult(base + i, loc) for i, loc in enumerate(attempt)]
        raise AmbiguousCommitError(
            f"manifest '{self.manifest.key}' holds locations of this producer's writes ({sorted(found)}) "
            "in an arrangement none of its writes produced; refusing to append them again"
        )

    def _queued_locations_from(self, head: RawHead, min_sequence: int) -> dict[int, str]:
        """``sequence -> location`` of the queued entries from ``min_sequence`` on: the tail, and the
        segments holding such sequences (sealed since our write; one GET each, usually none or one).
        A segment gone since the head was read was dropped by a dequeue: the receipts tell."""
        start = max(min_sequence, head.first_sequence)
        at: dict[int, str] = {}
        for r in head.segments:
            if r.last_sequence < start:
                continue
            data = self.manifest.read_segment_bytes(r)
            if data is not None:
                at.update((e.sequence, e.location) for e in decode_segment(data, r) if e.sequence >= start)
        at.update((q, loc) for q, loc in head.tail_locations() if q >= start)
        return at

    def _judge_unknown(self, raw: bytes | None, base: int) -> str:
        """For a write at sequence ``base`` whose outcome is unknown and whose locations are
        absent: ``"pending"`` (not landed, may still), ``"lost"`` (can never land) or
        ``"undecidable"`` (landed-and-dequeued cannot be told from not landed)."""
        if raw is None:
            return "pending" if base == 0 else "undecidable"
        head = self.manifest.head(raw)
        if head.next_sequence == base:
            return "pending"
        if head.next_sequence < base:
            return "undecidable"
        return "lost" if head.first_sequence <= base else "undecidable"

    def _resolve(self, raw: bytes | None, attempts: Sequence[_Attempt]) -> list[EnqueueResult] | None:
        """Did one of our earlier writes land? Its results if so; None if none is known to have
        (safe to write again: a conditional write on the current version cannot duplicate one
        still in flight, which could only land on the version it was sent against);
        ``AmbiguousCommitError`` if a write of unknown outcome can no longer be checked
        (JVM: ``ManifestAppender.resolve``)."""
        if not attempts:
            return None
        tried = [a.locations for a in attempts]
        min_base = min(a.base for a in attempts)
        landed = self._find_landed(raw, tried, min_base)
        if landed is not None:
            return landed
        history: dict[int, str] | None = None
        for a in attempts:
            if not a.unknown_outcome or a.resolved_not_landed:
                continue
            verdict = self._judge_unknown(raw, a.base)
            if verdict == "undecidable":
                # Read after the manifest: a consumer writes receipts before it dequeues (§5.1).
                if history is None:
                    history = self._receipts_from(min_base)
                landed = self._find_landed(raw, tried, min_base, history) if history else None
                if landed is not None:
                    self.metrics.counter(m.AMBIGUITIES_RESOLVED_BY_RECEIPTS).inc()
                    return landed
                if a.base in history:  # that sequence went to another write
                    self.metrics.counter(m.AMBIGUITIES_RESOLVED_BY_RECEIPTS).inc()
                    verdict = "lost"
            if verdict == "undecidable":
                raise AmbiguousCommitError(
                    f"a write to manifest '{self.manifest.key}' at sequence {a.base} had an unknown outcome "
                    "and the entries from that sequence on were already dequeued; it cannot be told "
                    "whether it landed, so it is not appended again"
                )
            if verdict == "lost":
                a.resolved_not_landed = True
        return None

    def _claim_prefixes(self, group: Sequence[_Pending]) -> None:
        """Refuses to enqueue into a data prefix another queue owns (docs/format.md §6)."""
        for p in group:
            prefix = p.location.rpartition("/")[0]
            if prefix and prefix not in self._claimed:
                # Only checked here: producers and GC create the record (no extra conditional write per queue).
                owner = claim_data_prefix(self.manifest.store, self.manifest.key, prefix, self.clock)
                self._claimed[prefix] = None if owner is None else owner.gc_grace_period_ms

    def _commit(self, group: list[_Pending]) -> list[EnqueueResult]:
        """Appends the group in one write through the CAS loop (JVM: ``ManifestAppender.append``)."""
        self._claim_prefixes(group)
        key = self.manifest.key
        attempts: list[_Attempt] = []
        last_sent: _Attempt | None = None

        def register(previous: PreviousAttempt | None) -> None:
            """Records how the last sent write ended, once (the loop may report it to more than one callback)."""
            nonlocal last_sent
            if previous is not None and last_sent is not None:
                last_sent.unknown_outcome = isinstance(previous, Unknown)
                attempts.append(last_sent)
                last_sent = None

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[list[EnqueueResult]]:
            nonlocal last_sent
            register(previous)
            landed = self._resolve(snapshot.raw, attempts)
            if landed is not None:
                return Done(landed)
            self._refresh_stale(group)
            locations = tuple(p.location for p in group)
            # Creating the manifest starts a new incarnation (docs/format.md §5.2).
            raw = empty_manifest(new_incarnation_epoch()) if snapshot.raw is None else snapshot.raw
            new_raw, base = parse_head(raw, key).appended(
                [(p.location, p.metadata) for p in group], self.segment_entries, lambda t: self._seal(t, group)
            )
            last_sent = _Attempt(base, locations)
            return Write(new_raw, lambda: [EnqueueResult(base + i, loc) for i, loc in enumerate(locations)])

        return self.loop.run(step, _AppendSettle(lambda raw: self._resolve(raw, attempts), register, attempts))


@dataclass(eq=False)
class _Attempt:
    """One sent write: the sequence it would have started at and its locations."""

    base: int
    locations: tuple[str, ...]
    unknown_outcome: bool = False
    resolved_not_landed: bool = False


class _AppendSettle:
    """How a group commit settles its writes of unknown outcome when the CAS loop gives up."""

    def __init__(
        self,
        resolve: Callable[[bytes | None], list[EnqueueResult] | None],
        register: Callable[[PreviousAttempt | None], None],
        attempts: list[_Attempt],
    ) -> None:
        self._resolve = resolve
        self._register = register
        self._attempts = attempts

    def landed(self, snapshot: Snapshot, previous: PreviousAttempt | None) -> list[EnqueueResult] | None:
        self._register(previous)
        return self._resolve(snapshot.raw)

    def still_unknown(self, previous: PreviousAttempt | None) -> str | None:
        self._register(previous)
        for a in self._attempts:
            if a.unknown_outcome and not a.resolved_not_landed:
                return f"a write of {len(a.locations)} entries at sequence {a.base}"
        return None


_committers: dict[tuple[int, str], tuple[ObjectStore, _GroupCommitter]] = {}
_committers_lock = threading.Lock()


def _acquire_committer(
    store: ObjectStore,
    key: str,
    clock: Clock,
    rng: random.Random,
    policy: RetryPolicy,
    metrics: m.MetricsRegistry,
    segment_entries: int,
) -> _GroupCommitter:
    with _committers_lock:
        found = _committers.get((id(store), key))
        if found is None or found[0] is not store:
            committer = _GroupCommitter(ManifestStore(store, key), clock, rng, policy, metrics, segment_entries)
            _committers[(id(store), key)] = (store, committer)
        else:
            committer = found[1]
        committer.refs += 1
        return committer


def _release_committer(store: ObjectStore, key: str, committer: _GroupCommitter) -> None:
    with _committers_lock:
        committer.refs -= 1
        found = _committers.get((id(store), key))
        if committer.refs <= 0 and found is not None and found[1] is committer:
            del _committers[(id(store), key)]


# Re-uploads of one stale batch before giving up (each copy took longer than half the grace period).
MAX_REUPLOADS = 3


def check_segment_entries(value: object) -> int:
    """``manifest_segment_entries`` (K) is a count >= 1; InvalidConfigError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= DEFAULT_SEGMENT_ENTRIES:
        raise InvalidConfigError("manifest_segment_entries", value, f"use a count from 1 to {DEFAULT_SEGMENT_ENTRIES}")
    return value


class QueueProducer:
    """Appends batch locations to a queue manifest.

    All ``QueueProducer`` instances of a process that share a store object and a manifest key
    share one group committer (the settings of the first one apply): locations submitted while
    a manifest write is in flight go into the next write, in submission order, as consecutive
    entries.

    Args:
        store: The object store.
        manifest_key: The manifest's key.
        clock: Time seam (default: the system clock).
        rng: Jitter source (default: an OS-seeded ``random.Random``).
        retry: Backoff and budget of conflicting writes.
        metrics: Where ``buffer.manifest_writes``/``_conflicts{role=producer}`` are counted.
        manifest_segment_entries: K: a write that would grow the manifest's tail past this many
            entries first seals the tail into a segment object (docs/format.md §2.2), so a write
            costs the same at any depth. Off by default, as on the JVM.
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
    ) -> None:
        validate_key(manifest_key)
        check_segment_entries(manifest_segment_entries)
        self._store = store
        self._key = manifest_key
        self._committer = _acquire_committer(
            store,
            manifest_key,
            clock or SystemClock(),
            rng or random.Random(),
            retry or RetryPolicy(),
            metrics or m.REGISTRY,
            manifest_segment_entries,
        )
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
    ) -> Future[EnqueueResult]:
        """Submits a location for the next manifest write.

        Args:
            location: The batch key.
            metadata: The entry's metadata items.
            reupload: Uploads the batch again under a fresh ULID and returns the new key; called
                when the location's ULID is ``max_age_ms`` old before a write starts.
            max_age_ms: See ``reupload`` (``gc_grace_period / 2``).

        Returns:
            A future of the entry's sequence and final location.
        """
        validate_key(location)
        metadata = list(metadata)
        encode_entry(0, location, metadata)  # fails here, not in a shared group write
        with self._lock:
            if self._closed:
                raise IllegalQueueStateError("this QueueProducer is closed")
            future: Future[EnqueueResult] = Future()
            self._committer.submit(_Pending(location, metadata, future, reupload, max_age_ms))
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
        _release_committer(self._store, self._key, self._committer)

    def __enter__(self) -> QueueProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# Consumer side


@dataclass(frozen=True)
class BatchDescriptor:
    """A manifest entry handed to a consumer, before its batch is fetched.

    Attributes:
        sequence: The entry's sequence.
        location: The batch key.
        metadata: The entry's metadata items.
    """

    sequence: int
    location: str
    metadata: list[MetadataItem] = field(default_factory=list)


class QueueConsumer:
    """The single consumer's view of the manifest: epoch fencing, resume point, dequeues.

    Args:
        store: The object store.
        manifest_key: The manifest's key.
        clock: Time seam.
        rng: Jitter source.
        retry: Backoff and budget of conflicting writes.
        metrics: Where ``buffer.manifest_writes``/``_conflicts{role=consumer}`` are counted.
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
    ) -> None:
        self.manifest = ManifestStore(store, manifest_key)
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._policy = retry or RetryPolicy()
        self._metrics = metrics or m.REGISTRY
        self._loop = CasLoop(self.manifest, self._policy, self._clock, self._rng, self._metrics, "consumer")
        self._epoch: int | None = None
        self._fenced: FencedError | None = None
        self._receipts: DequeueReceipts | None = None
        # The last two segments read (oldest first): the one handed out from and the one before it.
        self._segments: dict[str, list[ManifestEntry]] = {}
        self._segment_lock = threading.Lock()

    @property
    def epoch(self) -> int | None:
        """The epoch this consumer wrote at :meth:`initialize` (None before)."""
        return self._epoch

    @property
    def fenced(self) -> FencedError | None:
        """The fence this consumer ran into, if any."""
        return self._fenced

    def initialize(self, last_acked: int | None = None, incarnation: int | None = None) -> RawHead:
        """Bumps the epoch (fencing every older consumer) and applies the resume point.

        With ``first`` the first entry's sequence (or ``next_sequence`` when empty):
        ``last_acked >= next_sequence`` or ``last_acked + 1 < first`` raise
        :class:`ResumePointError`; otherwise entries ``<= last_acked`` are dequeued in the same
        write as the epoch bump.

        A resume point belongs to one incarnation of the manifest (docs/format.md §5.2): with
        ``incarnation`` given it must be the manifest's; without it, the one recorded in
        ``<manifest>.incarnation`` by the last consumer must be (no record: not checked).
        Either mismatch means the queue was reset since: :class:`ResumePointError`.

        Returns:
            The manifest head as written (no segment read).
        """
        if last_acked is not None and last_acked < 0:
            raise InvalidConfigError("last_acked_sequence", last_acked, "sequences are >= 0")
        if incarnation is not None and last_acked is None:
            raise InvalidConfigError("incarnation", incarnation, "is only meaningful with a resume point")
        key = self.manifest.key
        recorded = self.manifest.read_recorded_incarnation()

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[tuple[int, bytes]]:
            # After an unknown outcome we bump again rather than guess: the epoch only grows, and
            # fencing our own earlier try is harmless.
            raw = snapshot.raw
            # A missing manifest is created as a new incarnation (§5.2).
            current = parse_head(empty_manifest(new_incarnation_epoch()) if raw is None else raw, key)
            base_epoch = current.epoch
            if last_acked is not None:
                self._check_incarnation(last_acked, incarnation, recorded, incarnation_of(base_epoch), raw is None)
                first = current.first_sequence
                if last_acked >= current.next_sequence:
                    raise ResumePointError(
                        f"resume point {last_acked} is ahead of the queue in '{key}' (next sequence "
                        f"{current.next_sequence}): wrong queue, or the queue was recreated"
                    )
                if last_acked + 1 < first:
                    raise ResumePointError(
                        f"resume point {last_acked} is behind the queue in '{key}': entries "
                        f"{last_acked + 1}..{first - 1} were removed without being acknowledged by this "
                        "resume point (data loss)"
                    )
            new_epoch = next_epoch(base_epoch)
            if last_acked is not None and last_acked >= current.first_sequence:
                self._record_receipts(current, last_acked)
            written, _ = current.with_epoch(new_epoch, last_acked)
            return Write(written, lambda: (new_epoch, written))

        new_epoch, written = self._loop.run(step)
        self._epoch = new_epoch
        self._fenced = None
        if recorded != incarnation_of(new_epoch):
            try:
                self.manifest.record_incarnation(incarnation_of(new_epoch))
            except StoreError as e:  # only weakens the check of resume points given without one
                _log.warning("could not record the incarnation of '%s': %s", key, e)
        return parse_head(written, key)

    def _check_incarnation(
        self, last_acked: int, given: int | None, recorded: int | None, current: int, missing: bool
    ) -> None:
        key = self.manifest.key
        if given is not None and given != current:
            raise ResumePointError(
                f"resume point {last_acked} belongs to incarnation {given} of '{key}', but the manifest is "
                f"incarnation {current}{' (missing, so it would be created anew)' if missing else ''}: the queue "
                "was reset or recreated since, and its entries are not the ones this resume point acknowledged"
            )
        if given is None and recorded is not None and recorded != current:
            raise ResumePointError(
                f"resume point {last_acked} was given without an incarnation, and '{key}' was reset or recreated "
                f"since the last consumer ran (recorded incarnation {recorded}, manifest incarnation {current}"
                f"{', missing' if missing else ''}); pass the incarnation the resume point belongs to, or start "
                "without a resume point to read the new queue from its first entry"
            )

    @property
    def incarnation(self) -> int | None:
        """The incarnation of the manifest this consumer owns (None before :meth:`initialize`)."""
        return None if self._epoch is None else incarnation_of(self._epoch)

    def _removed_locations(self, head: RawHead, through: int) -> list[tuple[int, str]]:
        """The last receipts' worth of ``(sequence, location)`` a dequeue through ``through``
        removes, from segments and tail (JVM: ``QueueConsumer.removedLocations``)."""
        last = min(through, head.next_sequence - 1)
        start = max(head.first_sequence, last - MAX_RECEIPTS + 1)
        if last < start:
            return []
        removed = [
            (e.sequence, e.location)
            for r in head.segments
            if r.last_sequence >= start and r.first_sequence <= last
            for e in self.read_segment(r)
            if start <= e.sequence <= last
        ]
        return removed + [(q, loc) for q, loc in head.tail_locations_through(last) if q >= start]

    def _record_receipts(self, head: RawHead, through: int) -> None:
        """Before a dequeue: which location held each sequence it removes (docs/format.md §5.1),
        so a producer whose write had an unknown outcome can still tell whether it landed.
        Best effort: without receipts such a producer reports ``AmbiguousCommitError``."""
        removed = self._removed_locations(head, through)
        if not removed:
            return
        try:
            if self._receipts is None:
                self._receipts = self.manifest.read_receipts() or DequeueReceipts()
            updated = self._receipts.extended(removed)
            self.manifest.write_receipts(updated)
            self._receipts = updated
        except StoreError as e:
            self._metrics.counter(m.RECEIPT_WRITE_FAILURES).inc()
            _log.warning("could not write the dequeue receipts of '%s': %s", self.manifest.key, e)

    def _check(self, current_epoch: int) -> None:
        if self._epoch is None:
            raise IllegalQueueStateError("the consumer is not initialized: call initialize() first")
        if current_epoch != self._epoch:
            self._fenced = FencedError(self._epoch, current_epoch)
            raise self._fenced

    def read(self) -> Manifest:
        """The manifest, after checking that this consumer still owns the queue.

        Raises:
            FencedError: Another consumer initialized the queue since.
        """
        raw, _ = self.manifest.read_raw()
        current = self.manifest.decode(raw)
        self._check(current.epoch)
        return current

    def read_head(self) -> RawHead:
        """The manifest head (tail and segment refs, no segment read), after the epoch check.

        Raises:
            FencedError: Another consumer initialized the queue since.
        """
        raw, _ = self.manifest.read_raw()
        head = self.manifest.head(raw)
        self._check(head.epoch)
        return head

    def read_segment(self, ref: SegmentRef) -> list[ManifestEntry]:
        """A listed segment's entries; the last two read are kept (a consumer reads one, then
        dequeues it and writes receipts from it)."""
        with self._segment_lock:
            entries = self._segments.pop(ref.key, None)
            if entries is None:
                entries = self.manifest.read_segment(ref)
            self._segments[ref.key] = entries
            while len(self._segments) > 2:
                del self._segments[next(iter(self._segments))]
            return entries

    def descriptors_after(self, after: int | None, max_count: int) -> tuple[list[BatchDescriptor], Manifest]:
        """Up to ``max_count`` entries with ``sequence > after`` (all from the first when None)."""
        current = self.read()
        out: list[BatchDescriptor] = []
        for e in current.entries:
            if len(out) >= max_count:
                break
            if after is None or e.sequence > after:
                out.append(BatchDescriptor(e.sequence, e.location, list(e.metadata)))
        return out, current

    def dequeue_through(self, sequence: int) -> int:
        """Removes the entries ``<= sequence``, checking the epoch on every try.

        A dequeue that would remove nothing writes nothing.

        Returns:
            The number of entries this call removed (0 when a write's outcome was unknown and
            a re-read found the entries already gone).

        Raises:
            FencedError: Another consumer initialized the queue.
            IllegalQueueStateError: ``sequence`` is at or past ``next_sequence`` (it was never
                appended).
        """
        key = self.manifest.key

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[int]:
            raw = snapshot.raw
            if raw is None:
                self._check(0)
                raise IllegalQueueStateError(f"cannot dequeue through sequence {sequence}: queue '{key}' is empty")
            head = parse_head(raw, key)
            self._check(head.epoch)
            if sequence >= head.next_sequence:
                raise IllegalQueueStateError(
                    f"cannot dequeue through sequence {sequence}: queue '{key}' has only reached "
                    f"sequence {head.next_sequence - 1}"
                )
            edited = head.dequeued_through(sequence)
            if edited is None:
                return Done(0)
            new_raw, removed = edited
            self._record_receipts(head, sequence)
            return Write(new_raw, lambda: removed)

        return self._loop.run(step)
