"""Group commit of producers' appends to the manifest through the CAS loop (JVM: ``ManifestAppender``)."""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from osqueue import metrics as m
from osqueue.clock import Clock
from osqueue.errors import AmbiguousCommitError, CorruptManifestError, StoreError
from osqueue.format.batch_names import parse_batch_ulid_ms
from osqueue.format.head_sections import HeadSections
from osqueue.format.incarnation import incarnation_of, new_incarnation_epoch
from osqueue.format.index_object import decode_segment, fold_index
from osqueue.format.manifest import MetadataItem, NewEntry
from osqueue.format.manifest_codec import empty_manifest
from osqueue.format.manifest_head import (
    DEFAULT_SEGMENT_ENTRIES,
    SealedTail,
    entry_byte_length,
    parse_head,
)
from osqueue.format.segment_chunks import PARALLEL_PUTS
from osqueue.format.segment_ref import SegmentRef
from osqueue.queue.cas_loop import CasCounters, CasLoop, CasStep, Done, PreviousAttempt, Unknown, Write
from osqueue.queue.cas_object import Snapshot
from osqueue.queue.cooperative_commit import COOPERATIVE, SOLO, CooperativeCommitter
from osqueue.queue.data_prefix_owner import DEFAULT_GC_GRACE_PERIOD_MS, claim_data_prefix
from osqueue.queue.manifest_store import ManifestStore
from osqueue.queue.queue_retention import QueueFullWait, check_room, drop_oldest
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.queue.segment_tree import SegmentTree

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
class PendingLocation:
    """A batch waiting for the manifest: its location, metadata and the future its append resolves
    (JVM: ``PendingLocation``)."""

    location: str
    metadata: list[MetadataItem]
    future: Future[EnqueueResult]
    reupload: Callable[[], str] | None = None
    max_age_ms: int | None = None
    # When its PUT started, by ``clock.monotonic()`` (None: uploaded elsewhere; its ULID time is used).
    put_started: float | None = None
    clock: Clock | None = None
    # The entry's extension records (docs/format.md §2.1): the batch's integrity record.
    extension: bytes = b""


class ManifestAppender:
    """One background thread appending everything submitted for one (store, manifest key)."""

    def __init__(
        self,
        manifest: ManifestStore,
        clock: Clock,
        rng: random.Random,
        policy: RetryPolicy,
        metrics: m.MetricsRegistry,
        segment_entries: int = DEFAULT_SEGMENT_ENTRIES,
        commit_mode: str = SOLO,
        writer_id: bytes | None = None,
    ) -> None:
        self.manifest = manifest
        self.clock = clock
        self.rng = rng
        self.policy = policy
        self.metrics = metrics
        self.segment_entries = segment_entries
        # The first sequence known to be queued in the last snapshot whose locations were looked up.
        self._first_queued: tuple[bytes, int] | None = None
        # A lone producer appends against its own last write: one request per flush (CasLoop).
        self.loop = CasLoop(
            manifest.cas_object, policy, clock, rng, CasCounters.manifest(metrics, "producer"), reuse_own_write=True
        )
        self.segment_tree = SegmentTree(manifest)
        self.refs = 0
        self.shared_as: tuple[object, ...] | None = None  # its key in group_committers, once shared
        self._cond = threading.Condition()
        self._queue: list[PendingLocation] = []
        self._thread: threading.Thread | None = None
        # Data prefixes proven to be this queue's, with the queue's grace period (None: no record yet).
        self._claimed: dict[str, int | None] = {}
        # Within one commit: the chunks stored so far by last sequence (a retry reuses them), the alignment
        # of its seal of a v1 tail (first sequence, next_sequence then) and the oversized segments read.
        self._stored: dict[int, tuple[SealedTail, SegmentRef, float]] = {}
        self._align: tuple[int, int] | None = None
        self._resplit_read: dict[tuple[str, bytes], bytes] = {}
        # Cooperative commit (docs/adr/0007 part 1): the writer id is 16 random bytes drawn at start.
        self.cooperative: CooperativeCommitter | None = None
        if commit_mode == COOPERATIVE:
            wid = writer_id if writer_id is not None else rng.getrandbits(128).to_bytes(16, "big")
            self.cooperative = CooperativeCommitter(self, wid)
        self.queue_full_wait = QueueFullWait()  # set by the producer (its queue_full_* options)

    def submit(self, pending: PendingLocation) -> None:
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
            ahead = None if self.cooperative is None else self.cooperative.next_ahead()
            if ahead is not None:  # announced while an older group waited (cooperative_commit._take_ahead)
                group = ahead
            else:
                with self._cond:
                    if not self._queue:
                        self._thread = None
                        return
                    group, self._queue = self._queue, []
            try:
                results = self._commit(group) if self.cooperative is None else self._commit_cooperative(group)
            except BaseException as e:  # every future of the group gets the same error
                for p in group:
                    if not p.future.done():
                        p.future.set_exception(e)
                continue
            for p, r in zip(group, results):
                p.future.set_result(r)

    def take_queued(self) -> list[PendingLocation]:  # submitted since the last group taken (cooperative: ahead)
        with self._cond:
            group, self._queue = self._queue, []
        return group

    def _commit_cooperative(self, group: list[PendingLocation]) -> list[EnqueueResult]:
        assert self.cooperative is not None
        return [EnqueueResult(q, loc) for q, loc in self.cooperative.commit(group)]

    # -- one group ------------------------------------------------------------------------

    def _max_age_ms(self, p: PendingLocation) -> int | None:
        """Half the queue's grace period if it is shorter than the one the caller was given (§6)."""
        grace = self._claimed.get(p.location.rpartition("/")[0])
        if grace is None:
            return p.max_age_ms
        return grace // 2 if p.max_age_ms is None else min(p.max_age_ms, grace // 2)

    def _age_ms(self, p: PendingLocation) -> int | None:
        """Since its PUT started: by the producer's monotonic clock (its rate counts, never its offset)
        when known, else by its ULID time, which trusts the uploader's wall clock (docs/format.md §6)."""
        if p.put_started is not None:
            return int(((p.clock or self.clock).monotonic() - p.put_started) * 1000)
        created = parse_batch_ulid_ms(p.location)
        return None if created is None else self.clock.now_ms() - created

    def _is_stale(self, p: PendingLocation) -> bool:
        max_age_ms = self._max_age_ms(p)
        age_ms = self._age_ms(p)
        return max_age_ms is not None and p.reupload is not None and age_ms is not None and age_ms >= max_age_ms

    def _refresh_stale(self, group: Sequence[PendingLocation]) -> None:
        for p in group:
            max_age_ms = self._max_age_ms(p)
            if max_age_ms is None or p.reupload is None:
                continue
            # A slow re-upload is stale too: check again.
            reuploads = 0
            while True:
                if not self._is_stale(p):
                    break
                if reuploads == MAX_REUPLOADS:
                    raise StoreError(
                        f"batch '{p.location}': {reuploads + 1} uploads in a row took longer than half the GC "
                        f"grace period ({max_age_ms} ms), so GC could delete it before it is enqueued; "
                        "increase gc_grace_period or make uploads faster"
                    )
                started = (p.clock or self.clock).monotonic()
                p.location = p.reupload()
                p.put_started = started
                self.metrics.counter(m.BATCHES_REUPLOADED).inc()
                reuploads += 1

    def _appended(
        self,
        raw: bytes,
        group: Sequence[PendingLocation],
        *,
        sections: HeadSections | None = None,
        tagged: Callable[[], list[NewEntry]] | None = None,
        extra: Sequence[NewEntry] = (),
    ) -> tuple[bytes, int]:
        """The head with the group appended: sealing the tail into a segment and folding refs into
        index objects when it passes K. Each object is written right before the head CAS that lists it; if
        the first of their PUTs started half a grace period ago when the edit is done (slow PUTs, by this
        clock's monotonic time), GC could delete it before it is listed, so the edit is made again under
        fresh names, as stale batches are re-uploaded (docs/format.md §2.2). The batches are checked again
        too: slow PUTs age them as well. Cooperative commit (``osqueue.queue.cooperative_commit``) passes the
        head's new ``sections``, the group's entries with their writer sequences (``tagged``) and other
        writers' announced entries (``extra``), appended after the group."""
        max_age_ms = self._segment_max_age_ms(group)
        tries = 0
        while True:
            self._refresh_stale(group)
            entries: list[NewEntry] = (
                [(p.location, p.metadata, p.extension) for p in group] if tagged is None else tagged()
            )
            entries += extra
            put_started: list[float] = []
            head = parse_head(raw, self.manifest.key)
            if sections is not None:
                head.sections = sections
            align = None
            if self._align is not None and not head.refs and self._align[0] <= head.first_sequence < self._align[1]:
                align = self._align[0]  # a retry of a v1 seal keeps its chunk boundaries (ADR 0007)
            new_raw, base = head.appended(
                entries,
                self.segment_entries,
                partial(self._seal, put_started=put_started),
                partial(self._fold, put_started=put_started),
                seal_all=partial(self._seal_all, put_started=put_started, max_age_ms=max_age_ms),
                read_segment=self._read_oversized,
                align=align,
            )
            if not head.refs and head.tail_size + len(entries) > self.segment_entries and head.tail_size:
                self._align = (head.first_sequence if align is None else align, head.next_sequence)
            fresh = not put_started or (self.clock.monotonic() - min(put_started)) * 1000 < max_age_ms
            if fresh and not any(self._is_stale(p) for p in group):
                return new_raw, base
            self._stored.clear()
            tries += 1
            if tries > MAX_REUPLOADS:
                raise StoreError(
                    f"'{self.manifest.key}': {tries} seals or folds in a row took longer than half the GC grace "
                    f"period ({max_age_ms} ms); increase gc_grace_period or make writes faster"
                )

    def _seal_all(self, tails: Sequence[SealedTail], put_started: list[float], max_age_ms: int) -> list[SegmentRef]:
        """Stores chunks as segments, PARALLEL_PUTS at a time. A chunk this commit already stored (an attempt
        before a conflict) is reused while fresh: entries never change once appended, so its bytes are still
        right; a first chunk a dequeue took part of since is reused too (low_water then falls inside it)."""
        refs: list[SegmentRef | None] = [None] * len(tails)
        todo: list[int] = []
        now = self.clock.monotonic()
        for i, t in enumerate(tails):
            found = self._stored.get(t.first_sequence + t.entry_count - 1)
            if found is not None and (now - found[2]) * 1000 < max_age_ms:
                old, ref, started = found
                same = old.data == t.data
                if same or (i == 0 and old.first_sequence < t.first_sequence and old.data[:-22].endswith(t.data[:-22])):
                    refs[i] = ref
                    put_started.append(started)
                    continue
            todo.append(i)

        def store(i: int) -> None:
            started = self.clock.monotonic()
            ref = refs[i] = self._seal(tails[i], put_started)
            self._stored[tails[i].first_sequence + tails[i].entry_count - 1] = (tails[i], ref, started)

        if len(todo) <= 1:
            for i in todo:
                store(i)
        else:
            with ThreadPoolExecutor(min(PARALLEL_PUTS, len(todo)), thread_name_prefix="osqueue-seal") as pool:
                list(pool.map(store, todo))
        return [r for r in refs if r is not None]

    def _read_oversized(self, ref: SegmentRef) -> bytes:
        """An oversized segment's bytes, checked against its ref (once per commit), to be split into chunks."""
        data = self._resplit_read.get((ref.key, ref.sha256))
        if data is None:
            data = self.manifest.read_segment_bytes(ref)
            if data is None:
                raise CorruptManifestError(ref.key, f"segment of '{self.manifest.key}' is listed but missing")
            if len(data) != ref.byte_length or hashlib.sha256(data).digest() != ref.sha256:
                raise CorruptManifestError(ref.key, "segment: its length or SHA-256 differs from the head's ref")
            self._resplit_read[(ref.key, ref.sha256)] = data
            self.metrics.counter(m.SEGMENTS_RESPLIT).inc()
        return data

    def _seal(self, sealed: SealedTail, put_started: list[float]) -> SegmentRef:
        """Stores a sealed tail as a new segment (an unconditional PUT under a fresh name)."""
        put_started.append(self.clock.monotonic())
        ref = self.manifest.write_segment(sealed, self.clock.now_ms(), self.rng)
        self.metrics.counter(m.SEGMENTS_SEALED).inc()
        return ref

    def _fold(self, refs: Sequence[SegmentRef], put_started: list[float]) -> SegmentRef:
        """Stores refs folded into a new index object (an unconditional PUT under a fresh name)."""
        put_started.append(self.clock.monotonic())
        return self.manifest.write_index(fold_index(refs), self.clock.now_ms(), self.rng)

    def _segment_max_age_ms(self, group: Sequence[PendingLocation]) -> int:
        """Half the shortest grace period known: the callers' and the queue's (GC of segments uses the queue's)."""
        known = [p.max_age_ms for p in group if p.max_age_ms is not None]
        known += [g // 2 for g in self._claimed.values() if g is not None]
        return min(known, default=DEFAULT_GC_GRACE_PERIOD_MS // 2)

    def _receipts_from(self, min_sequence: int) -> tuple[dict[int, str], int | None]:
        """Dequeued ``sequence -> location`` from ``min_sequence`` on, per the receipts ({} if none), and
        the incarnation they are of (None: receipts v1, which do not say)."""
        try:
            receipts = self.manifest.read_receipts()
        except StoreError:
            return {}, None
        if receipts is None:
            return {}, None
        start = max(min_sequence, receipts.first)
        return {
            q: receipts.locations[q - receipts.first] for q in range(start, receipts.first + len(receipts.locations))
        }, receipts.incarnation

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
        at = self._queued_locations_from(raw, min_base)
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

    def _queued_locations_from(self, raw: bytes, min_sequence: int) -> dict[int, str]:
        """``sequence -> location`` of the queued entries from ``min_sequence`` on: the tail, and the
        segments holding such sequences (sealed since our write, possibly folded into index objects
        since; one GET each, usually none or one), found through the segment tree.

        A listed segment gone since the head was read was dropped by a dequeue (and collected): its
        sequences count as dequeued (:meth:`_judge_unknown` then asks the receipts, as the JVM does),
        never as someone else's. So do those of a head ref whose index object on the way down is gone
        (a dequeue expanded it, then GC): that can only make the verdict more cautious."""
        head = self.manifest.head(raw)
        start = max(min_sequence, head.first_sequence)
        first_queued = head.first_sequence
        at: dict[int, str] = {}
        sequence = start
        while sequence < head.tail_first_sequence:
            leaf = self.segment_tree.leaf_if_present(head, sequence)
            if leaf is None:  # an index object on the way is gone: skip its whole head ref
                top = next(r for r in head.refs if r.first_sequence <= sequence <= r.last_sequence)
                first_queued = max(first_queued, top.last_sequence + 1)
                sequence = top.last_sequence + 1
                continue
            data = self.manifest.read_segment_bytes(leaf)
            if data is None:
                first_queued = max(first_queued, leaf.last_sequence + 1)
            else:
                at.update((e.sequence, e.location) for e in decode_segment(data, leaf) if e.sequence >= start)
            sequence = leaf.last_sequence + 1
        at.update(head.tail_locations_from(start))
        self._first_queued = (raw, first_queued)
        return at

    def _judge_unknown(self, raw: bytes | None, base: int, incarnation: int | None) -> str:
        """For a write at sequence ``base`` of manifest incarnation ``incarnation`` whose outcome is
        unknown and whose locations are absent: ``"pending"`` (not landed, may still), ``"lost"`` (can
        never land) or ``"undecidable"`` (landed-and-dequeued cannot be told from not landed). A manifest
        of another incarnation (the queue was reset since the write was sent) says nothing about where
        the write's sequences went: undecidable then."""
        if raw is None:
            return "pending" if base == 0 else "undecidable"
        head = self.manifest.head(raw)
        if incarnation is not None and incarnation_of(head.epoch) != incarnation:
            return "undecidable"
        if head.next_sequence == base:
            return "pending"
        if head.next_sequence < base:
            return "undecidable"
        first = head.first_sequence
        if self._first_queued is not None and self._first_queued[0] is raw:
            first = self._first_queued[1]  # past a segment that vanished while we looked (see above)
        return "lost" if first <= base else "undecidable"

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
        history_incarnation: int | None = None
        for a in attempts:
            if not a.unknown_outcome or a.resolved_not_landed:
                continue
            verdict = self._judge_unknown(raw, a.base, a.incarnation)
            if verdict == "undecidable":
                # Read after the manifest: a consumer writes receipts before it dequeues (§5.1).
                if history is None:
                    history, history_incarnation = self._receipts_from(min_base)
                landed = self._find_landed(raw, tried, min_base, history) if history else None
                if landed is not None:
                    self.metrics.counter(m.AMBIGUITIES_RESOLVED_BY_RECEIPTS).inc()
                    return landed
                # That sequence went to another write, in the incarnation ours was sent to: receipts of
                # another incarnation (or v1, which do not say) name another queue's sequence (§5.1).
                sent_to = a.incarnation
                if sent_to is None and raw is not None:  # a create: the incarnation it would have made
                    sent_to = incarnation_of(self.manifest.head(raw).epoch)
                if a.base in history and history_incarnation is not None and history_incarnation == sent_to:
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

    def _claim_prefixes(self, group: Sequence[PendingLocation]) -> None:
        """Refuses to enqueue into a data prefix another queue owns (docs/format.md §6)."""
        for p in group:
            prefix = p.location.rpartition("/")[0]
            if prefix and prefix not in self._claimed:
                # Only checked here: producers and GC create the record (no extra conditional write per queue).
                owner = claim_data_prefix(self.manifest.store, self.manifest.key, prefix, self.clock)
                self._claimed[prefix] = None if owner is None else owner.gc_grace_period_ms

    def seal(self) -> int:
        """A CAS that only seals (``osqueue seal``): a tail of more than K entries into segments of K, and
        segments of more than 2K entries into their chunks (docs/format.md §2.2). Returns how many entries it
        moved (0: nothing to seal, nothing written). Sealing never changes what is queued, so a write of
        unknown outcome is simply tried again on what the head then holds."""
        self._stored, self._align, self._resplit_read = {}, None, {}
        k = self.segment_entries

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[int]:
            if snapshot.raw is None:
                return Done(0)
            head = parse_head(snapshot.raw, self.manifest.key)
            moved = sum(r.entry_count for r in head.refs if r.level == 0 and r.entry_count > 2 * k)
            moved += head.tail_size if head.tail_size > k else 0
            if moved == 0:
                return Done(0)
            new_raw, _ = self._appended(snapshot.raw, [])
            return Write(new_raw, lambda: moved)

        return self.loop.run(step)

    def commit_many(
        self,
        group: Sequence[PendingLocation],
        *,
        prior: Sequence[tuple[int, Sequence[str]]] = (),
        on_attempt: Callable[[int, tuple[str, ...]], None] | None = None,
    ) -> list[EnqueueResult]:
        """Appends the group now, in one write in the calling thread, through the CAS loop (a spool's uploader).

        Args:
            prior: ``(base, locations)`` of earlier writes of this group whose outcome is unknown (a
                spool's ATTEMPT records, possibly of a process that died; each carried the whole group):
                resolved as §5 does before anything is written again, so a write that landed is found,
                never appended twice.
            on_attempt: Told ``(base, locations)`` right before each CAS is sent (the spool records it).
        """
        seeded = [_Attempt(base, tuple(locs), None, unknown_outcome=True) for base, locs in prior]
        return self._commit(list(group), seeded, on_attempt)

    def _commit(
        self,
        group: list[PendingLocation],
        seeded: Sequence[_Attempt] = (),
        on_attempt: Callable[[int, tuple[str, ...]], None] | None = None,
    ) -> list[EnqueueResult]:
        """Appends the group in one write through the CAS loop (JVM: ``ManifestAppender.append``)."""
        self._claim_prefixes(group)
        self._stored, self._align, self._resplit_read = {}, None, {}
        attempts: list[_Attempt] = list(seeded)
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
            # Creating the manifest starts a new incarnation (docs/format.md §5.2).
            raw = empty_manifest(new_incarnation_epoch()) if snapshot.raw is None else snapshot.raw
            check_room(self.manifest.head(raw), len(group), sum(entry_byte_length(p.extension) for p in group))
            new_raw, base = self._appended(raw, group)
            cut = drop_oldest(new_raw, self.manifest.key, base, self.segment_tree)
            new_raw = new_raw if cut is None else cut.raw
            locations = tuple(p.location for p in group)
            # A create is judged against whichever incarnation it finds: it made that one if it landed.
            incarnation = None if snapshot.raw is None else incarnation_of(self.manifest.head(raw).epoch)
            last_sent = _Attempt(base, locations, incarnation)
            if on_attempt is not None:
                on_attempt(base, locations)

            def on_landed() -> list[EnqueueResult]:
                if cut is not None:
                    cut.count(self.metrics)
                return [EnqueueResult(base + i, loc) for i, loc in enumerate(locations)]

            return Write(new_raw, on_landed)

        settle = _AppendSettle(lambda raw: self._resolve(raw, attempts), register, attempts)
        return self.queue_full_wait.run(lambda: self.loop.run(step, settle), self.clock, self.metrics)


@dataclass(eq=False)
class _Attempt:
    """One sent write: the sequence it would have started at, its locations, and the incarnation of the
    manifest it was sent to (the only one it can land in, docs/format.md §5.2; None for a create, which
    would have made the incarnation it finds)."""

    base: int
    locations: tuple[str, ...]
    incarnation: int | None
    unknown_outcome: bool = False
    resolved_not_landed: bool = False


@dataclass(eq=False)
class _AppendSettle:
    """How a group commit settles its writes of unknown outcome when the CAS loop gives up."""

    resolve: Callable[[bytes | None], list[EnqueueResult] | None]
    register: Callable[[PreviousAttempt | None], None]
    attempts: list[_Attempt]

    def landed(self, snapshot: Snapshot, previous: PreviousAttempt | None) -> list[EnqueueResult] | None:
        self.register(previous)
        return self.resolve(snapshot.raw)

    def still_unknown(self, previous: PreviousAttempt | None) -> str | None:
        self.register(previous)
        for a in self.attempts:
            if a.unknown_outcome and not a.resolved_not_landed:
                return f"a write of {len(a.locations)} entries at sequence {a.base}"
        return None


# Re-uploads of one stale batch before giving up (each copy took longer than half the grace period).
MAX_REUPLOADS = 3
