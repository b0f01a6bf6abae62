"""The consumer's side of the manifest protocol: takeover, reads, dequeue (JVM: ``QueueConsumer``)."""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field, replace
from functools import partial

from osqueue import metrics as m
from osqueue.clock import Clock, SystemClock
from osqueue.errors import FencedError, IllegalQueueStateError, InvalidConfigError, ResumePointError, StoreError
from osqueue.format.batch_integrity import EntryIntegrity, verify_entry
from osqueue.format.dequeue_receipts import MAX_RECEIPTS, DequeueReceipts
from osqueue.format.head_sections import HeadSections, UnnamedReader
from osqueue.format.incarnation import incarnation_of, new_incarnation_epoch, next_epoch
from osqueue.format.manifest import Manifest, ManifestEntry, MetadataItem
from osqueue.format.manifest_codec import empty_manifest
from osqueue.format.manifest_head import RawHead, parse_head
from osqueue.format.segment_ref import SegmentRef
from osqueue.queue.cas_loop import CasCounters, CasLoop, CasStep, Done, PreviousAttempt, Write
from osqueue.queue.cas_object import Snapshot
from osqueue.queue.manifest_store import DEFAULT_MANIFEST_PATH, ManifestStore
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.queue.segment_tree import SegmentTree
from osqueue.queue.subscriptions import check_subscription_name, next_subscription_epoch, with_new_subscription
from osqueue.store.object_store import ObjectStore

_log = logging.getLogger(__name__)


# Consumer side


@dataclass(frozen=True)
class BatchDescriptor:
    """A manifest entry handed to a consumer, before its batch is fetched.

    Attributes:
        sequence: The entry's sequence.
        location: The batch key.
        metadata: The entry's metadata items.
        integrity: The entry's integrity record (docs/format.md §2.1), None when it has none.
    """

    sequence: int
    location: str
    metadata: list[MetadataItem] = field(default_factory=list)
    integrity: EntryIntegrity | None = None

    @staticmethod
    def of(entry: ManifestEntry, manifest_key: str) -> BatchDescriptor:
        """The descriptor of an entry taken for delivery: its ``entry_crc32`` is checked here.

        Raises:
            CorruptManifestError: The entry's own CRC does not match (naming ``manifest_key`` and
                the sequence).
        """
        return BatchDescriptor(entry.sequence, entry.location, list(entry.metadata), verify_entry(entry, manifest_key))


class QueueConsumer:
    """The single consumer's view of the manifest: epoch fencing, resume point, dequeues.

    Args:
        store: The object store.
        manifest_key: The manifest's key.
        clock: Time seam.
        rng: Jitter source.
        retry: Backoff and budget of conflicting writes.
        metrics: Where ``buffer.manifest_writes``/``_conflicts{role=consumer}`` are counted.
        subscription: Read as this named subscription (docs/format.md §2.3): its record's epoch is
            this reader's fence and its ``next`` its position; None: the queue's unnamed consumer.
        create_subscription: Create the subscription (at the queue's first entry) if it is missing;
            otherwise a missing one is :class:`IllegalQueueStateError`.
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
        subscription: str | None = None,
        create_subscription: bool = False,
    ) -> None:
        self.subscription = None if subscription is None else check_subscription_name(subscription)
        if create_subscription and subscription is None:
            raise InvalidConfigError("create_subscription", create_subscription, "needs a subscription name")
        self._create_subscription = create_subscription
        self._start: int | None = None
        self.initial_loss: tuple[int, int] | None = None  # (first, count) retention cut before initialize (§2.3)
        self.manifest = ManifestStore(store, manifest_key)
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._policy = retry or RetryPolicy()
        self._metrics = metrics or m.REGISTRY
        self._loop = CasLoop(
            self.manifest.cas_object,
            self._policy,
            self._clock,
            self._rng,
            CasCounters.manifest(self._metrics, "consumer"),
        )
        self._epoch: int | None = None
        self._fenced: FencedError | None = None
        self._receipts: DequeueReceipts | None = None
        # The last two segments read (oldest first): the one handed out from and the one before it.
        self._segments: dict[str, list[ManifestEntry]] = {}
        self._segment_lock = threading.Lock()
        # The consumer's reader's tree: its cached index objects also serve the dequeue's expansion.
        self.segment_tree = SegmentTree(self.manifest)

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
        if self.subscription is not None:
            return self._initialize_subscription(self.subscription, last_acked, incarnation)
        key = self.manifest.key
        recorded = self.manifest.read_recorded_incarnation()

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[tuple[int, bytes, int, int]]:
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
            if not current.sections.is_empty:  # the unnamed reader's record moves, not the queue (§2.3)
                reader = current.sections.unnamed_reader or UnnamedReader(current.first_sequence, 0)
                nxt = reader.next if last_acked is None else max(reader.next, last_acked + 1)
                unnamed = UnnamedReader(nxt, self._clock.now_ms() if nxt != reader.next else reader.last_ack_ms)
                written = self._sections_edit(current, replace(current.sections, unnamed_reader=unnamed), new_epoch)
                wanted = nxt if last_acked is None else last_acked + 1
                start = max(parse_head(written, key).first_sequence, wanted)
                return Write(written, lambda: (new_epoch, written, start, wanted))
            if last_acked is not None and last_acked >= current.first_sequence:
                self._record_receipts(current, last_acked)
            written, _ = current.with_epoch(new_epoch, last_acked, self.segment_tree.children)
            first = current.first_sequence if last_acked is None else last_acked + 1
            return Write(written, lambda: (new_epoch, written, first, first))

        new_epoch, written, self._start, wanted = self._loop.run(step)
        self.initial_loss = None if self._start <= wanted else (wanted, self._start - wanted)
        self._epoch = new_epoch
        self._fenced = None
        if recorded != incarnation_of(new_epoch):
            try:
                self.manifest.record_incarnation(incarnation_of(new_epoch))
            except StoreError as e:  # only weakens the check of resume points given without one
                _log.warning("could not record the incarnation of '%s': %s", key, e)
        return parse_head(written, key)

    def _initialize_subscription(self, name: str, last_acked: int | None, incarnation: int | None) -> RawHead:
        """Takes over the subscription ``name`` (docs/format.md §2.3, ADR 0005 step 2): one CAS adds 1 to
        its record's epoch, fencing its earlier reader only, and moves its ``next`` past a resume point."""
        key = self.manifest.key

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[tuple[int, bytes, int, int]]:
            raw = snapshot.raw
            head = parse_head(empty_manifest(new_incarnation_epoch()) if raw is None else raw, key)
            sections = head.sections
            record = sections.subscription(name)
            if record is None:
                if not self._create_subscription:
                    raise IllegalQueueStateError(
                        f"no subscription '{name}' in queue '{key}': create it (osqueue subscriptions create) "
                        "or pass create_subscription=True"
                    )
                sections = with_new_subscription(head, name, "earliest", new_incarnation_epoch(), self._clock.now_ms())
                record = sections.subscription(name)
                assert record is not None
            if last_acked is not None:
                if incarnation is not None and incarnation != record.incarnation:
                    raise ResumePointError(
                        f"resume point {last_acked} belongs to incarnation {incarnation} of subscription '{name}' "
                        f"in '{key}', which is now incarnation {record.incarnation}: subscription dropped and recreated"
                    )
                if last_acked >= head.next_sequence:
                    raise ResumePointError(
                        f"resume point {last_acked} of subscription '{name}' is ahead of the queue in '{key}' "
                        f"(next sequence {head.next_sequence})"
                    )
            nxt = record.next if last_acked is None else max(record.next, last_acked + 1)
            new_epoch = next_subscription_epoch(record.epoch)
            sections = sections.with_subscription(replace(record, epoch=new_epoch, next=nxt))
            written = self._sections_edit(head, sections, None)
            wanted = nxt if last_acked is None else last_acked + 1
            start = max(parse_head(written, key).first_sequence, wanted)
            return Write(written, lambda: (new_epoch, written, start, wanted))

        self._epoch, written, self._start, wanted = self._loop.run(step)
        # Retention cut [wanted, start) before this reader read it (ADR 0005 step 3): its consumer reports it.
        self.initial_loss = None if self._start <= wanted else (wanted, self._start - wanted)
        self._fenced = None
        return parse_head(written, key)

    def _sections_edit(self, head: RawHead, sections: HeadSections, epoch: int | None) -> bytes:
        """``head`` with ``sections`` (and ``epoch``), cut to the slowest reader; the receipts of the
        range the cut removes are written first (§5.1)."""
        written, removed = head.with_sections(
            sections, self.segment_tree.children, epoch, removed_bytes=partial(self.segment_tree.bytes_between, head)
        )
        if removed:
            self._record_receipts(head, head.first_sequence + removed - 1)
        return written

    @property
    def start_sequence(self) -> int | None:
        """Where this reader's delivery starts after :meth:`initialize` (its resume point + 1, its
        record's ``next`` on a head with sections, else the queue's first sequence)."""
        return self._start

    def reader_epoch(self, head: RawHead) -> int:
        """The epoch this reader is fenced by in ``head``: its subscription's record's (-1 when the
        subscription was dropped), else the footer's."""
        if self.subscription is None:
            return head.epoch
        record = head.sections.subscription(self.subscription)
        return -1 if record is None else record.epoch

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
            for r in self.segment_tree.leaves(head, start, last + 1)
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
            updated = self._receipts.extended(removed, incarnation_of(head.epoch))
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
            if self.subscription is not None:
                self._fenced.args = (
                    f"reader of subscription '{self.subscription}' with epoch {self._epoch} was fenced: "
                    + ("the subscription was dropped" if current_epoch < 0 else f"its epoch is now {current_epoch}")
                    + " (another reader took it over, or it was dropped)",
                )
            raise self._fenced

    def read(self) -> Manifest:
        """The manifest, after checking that this consumer still owns the queue.

        Raises:
            FencedError: Another consumer initialized the queue since.
        """
        raw, _ = self.manifest.read_raw()
        current = self.manifest.decode(raw)
        self._check(current.epoch if self.subscription is None else self.reader_epoch(self.manifest.head(raw)))
        return current

    def read_head(self) -> RawHead:
        """The manifest head (tail and segment refs, no segment read), after the epoch check.

        Raises:
            FencedError: Another consumer initialized the queue since.
        """
        raw, _ = self.manifest.read_raw()
        head = self.manifest.head(raw)
        self._check(self.reader_epoch(head))
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
                out.append(BatchDescriptor.of(e, self.manifest.key))
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

        def check_assigned(head: RawHead) -> None:
            if sequence >= head.next_sequence:
                raise IllegalQueueStateError(
                    f"cannot dequeue through sequence {sequence}: queue '{key}' has only reached "
                    f"sequence {head.next_sequence - 1}"
                )

        # The receipts are written once, before the loop: written inside each attempt, between the
        # read and the conditional write, they widened the window in which a producer's append makes
        # the write lose (as on the JVM). A failed first read leaves them to the loop's first attempt.
        receipts_written = False
        try:
            before_raw, _ = self.manifest.read_raw()
        except StoreError:
            before_raw = None
        if before_raw is not None:
            before = parse_head(before_raw, key)
            self._check(self.reader_epoch(before))
            check_assigned(before)
            if self._reader_moved(before, sequence) is not None:
                receipts_written = True  # a v3 head's edit writes the receipts of what its cut removes
            elif before.dequeued_through(sequence, self.segment_tree.children) is None:
                return 0
            else:
                self._record_receipts(before, sequence)
                receipts_written = True

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[int]:
            nonlocal receipts_written
            raw = snapshot.raw
            if raw is None:
                self._check(0)
                raise IllegalQueueStateError(f"cannot dequeue through sequence {sequence}: queue '{key}' is empty")
            head = parse_head(raw, key)
            self._check(self.reader_epoch(head))
            check_assigned(head)
            sections = self._reader_moved(head, sequence)
            if sections is not None:
                written = self._sections_edit(head, sections, None)
                return Write(written, lambda: parse_head(written, key).first_sequence - head.first_sequence)
            if self.subscription is not None or not head.sections.is_empty:
                return Done(0)  # the reader's next is already past sequence
            edited = head.dequeued_through(sequence, self.segment_tree.children)
            if edited is None:
                return Done(0)
            new_raw, removed = edited
            if not receipts_written:
                self._record_receipts(head, sequence)
                receipts_written = True
            return Write(new_raw, lambda: removed)

        return self._loop.run(step)

    def _reader_moved(self, head: RawHead, sequence: int) -> HeadSections | None:
        """On a head with sections (or for a subscription), the sections with this reader's ``next`` moved
        past ``sequence``; None when it is already there or the head has no section and the reader is unnamed
        (a segmented head is version 3 without sections since docs/adr/0006 item 3: it dequeues as v2 did)."""
        now = self._clock.now_ms()
        if self.subscription is not None:
            record = head.sections.subscription(self.subscription)
            if record is None or record.next > sequence:
                return None
            return head.sections.with_subscription(replace(record, next=sequence + 1, last_ack_ms=now))
        if head.sections.is_empty:
            return None
        reader = head.sections.unnamed_reader
        if reader is not None and reader.next > sequence:
            return None
        return replace(head.sections, unnamed_reader=UnnamedReader(sequence + 1, now))
