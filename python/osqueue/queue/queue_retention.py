"""A queue's retention and size caps: set, clear, and the caps an append applies (docs/format.md §2.3,
ADR 0005 "Retention and size caps"; the JVM's ``queue/QueueRetention.scala`` is its mirror).

The policy lives in the head's retention section (type 3) with ``queued_bytes``, the running sum of the
retained entries' ``byte_length`` (their integrity records, §2.1 type 3). Every writer keeps that sum:
an append adds its entries' lengths (``manifest_head.with_added_bytes``), every cut subtracts the removed
ones (``RawHead.with_sections(removed_bytes=...)``). Setting the policy computes it once.

Size caps, per policy:

- ``backpressure`` (0, the default): an append that would leave more than ``max_entries`` entries or
  ``max_bytes`` queued writes nothing and raises :class:`QueueFullError` from its CAS step; the
  producer's group committer retries every ``queue_full_retry_interval`` up to ``queue_full_timeout``
  (:class:`QueueFullWait`), then fails the group's handles with it. Nothing is dropped.
- ``drop_oldest`` (1): the appending CAS also moves ``low_water`` past the oldest entries until the caps
  hold (the new entries themselves are never cut). Readers whose ``next`` is below the new ``low_water``
  report ``[next, low_water)`` as data loss on their next read.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from osqueue import metrics as m
from osqueue.clock import Clock
from osqueue.errors import IllegalQueueStateError, InvalidConfigError, QueueFullError, StoreError
from osqueue.format.dequeue_receipts import MAX_RECEIPTS, DequeueReceipts
from osqueue.format.head_sections import BACKPRESSURE, DROP_OLDEST, Retention
from osqueue.format.incarnation import incarnation_of
from osqueue.format.manifest_head import RawHead, entry_byte_length, parse_head
from osqueue.queue.cas_loop import CasStep, Done, PreviousAttempt, Write, admin_loop
from osqueue.queue.cas_object import Snapshot
from osqueue.queue.manifest_store import DEFAULT_MANIFEST_PATH, ManifestStore
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.queue.segment_tree import SegmentTree
from osqueue.store.object_store import ObjectStore

if TYPE_CHECKING:
    from osqueue.format.intent_codec import Intent
    from osqueue.queue.manifest_appender import PendingLocation

T = TypeVar("T")

_log = logging.getLogger(__name__)

POLICIES = {"backpressure": BACKPRESSURE, "drop_oldest": DROP_OLDEST}
"""A retention policy's name -> its byte in the retention section."""
POLICY_NAMES = {v: k for k, v in POLICIES.items()}


@dataclass(frozen=True)
class QueueFullWait:
    """How long a producer's append waits for room under ``backpressure`` before ``QueueFullError``.

    Attributes:
        timeout_ms: ``queueFullTimeout`` (0: fail at once).
        retry_interval_ms: ``queueFullRetryInterval``: how often the head is read again meanwhile.
    """

    timeout_ms: int = 30_000
    retry_interval_ms: int = 1_000

    @staticmethod
    def of(timeout_s: float, retry_interval_s: float) -> QueueFullWait:
        """From the producer's options in seconds.

        Raises:
            InvalidConfigError: A negative timeout or a retry interval that is not positive.
        """
        for option, value, least in (
            ("queue_full_timeout", timeout_s, 0.0),
            ("queue_full_retry_interval", retry_interval_s, 1e-9),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least:
                raise InvalidConfigError(option, value, "use a number of seconds" + (" > 0" if least else " >= 0"))
        return QueueFullWait(int(timeout_s * 1000), max(1, int(retry_interval_s * 1000)))

    def run(self, attempt: Callable[[], T], clock: Clock, metrics: m.MetricsRegistry) -> T:
        """``attempt()``, run again every retry interval while it raises ``QueueFullError`` (backpressure:
        each run reads the head again), until the timeout; then that error."""
        waited_since = clock.monotonic()
        while True:
            try:
                return attempt()
            except QueueFullError:
                if (clock.monotonic() - waited_since) * 1000 >= self.timeout_ms:
                    raise
                metrics.counter(m.QUEUE_FULL_WAITS).inc()
                clock.sleep(self.retry_interval_ms / 1000)


def policy_of(name: object) -> int:
    """The policy byte of ``name``.

    Raises:
        InvalidConfigError: Neither ``backpressure`` nor ``drop_oldest``.
    """
    if not isinstance(name, str) or name not in POLICIES:
        raise InvalidConfigError("policy", name, "use backpressure or drop_oldest")
    return POLICIES[name]


def over_cap(r: Retention, entries: int, queued_bytes: int) -> str | None:
    """Which size cap ``entries`` / ``queued_bytes`` exceed (a sentence), or None."""
    if r.max_entries and entries > r.max_entries:
        return f"{entries} entries would exceed max_entries {r.max_entries}"
    if r.max_bytes and queued_bytes > r.max_bytes:
        return f"{queued_bytes} bytes would exceed max_bytes {r.max_bytes}"
    return None


def check_room(head: RawHead, added_entries: int, added_bytes: int) -> None:
    """Refuses an append that would break a ``backpressure`` cap of ``head``.

    Raises:
        QueueFullError: Naming the queue, the cap and the size.
    """
    r = head.sections.retention
    if r is None or r.policy != BACKPRESSURE:
        return
    why = over_cap(r, head.depth + added_entries, r.queued_bytes + added_bytes)
    if why is not None:
        raise QueueFullError(f"queue '{head.key}' is full (retention policy backpressure): {why}")


@dataclass(frozen=True)
class Cut:
    """What a ``drop_oldest`` append cut: the head's new bytes, and how many entries and bytes it removed."""

    raw: bytes
    entries: int
    byte_count: int

    def count(self, metrics: m.MetricsRegistry) -> None:
        metrics.counter(m.ENTRIES_DROPPED).inc(self.entries)
        metrics.counter(m.BYTES_DROPPED).inc(self.byte_count)


def drop_oldest(appended: bytes, key: str, base: int, tree: SegmentTree) -> Cut | None:
    """The appended head ``appended`` cut to its ``drop_oldest`` caps (never past ``base``, the first new
    entry); None when nothing is cut (no such policy, or the caps hold). Reads the segments it cuts into
    for their entries' ``byte_length``."""
    head = parse_head(appended, key)
    r = head.sections.retention
    if r is None or r.policy != DROP_OLDEST or over_cap(r, head.depth, r.queued_bytes) is None:
        return None
    first = head.first_sequence
    new_first = max(first, head.next_sequence - r.max_entries) if r.max_entries else first
    new_first = min(new_first, base)
    bytes_left = r.queued_bytes - (tree.bytes_between(head, first, new_first) if new_first > first else 0)
    if r.max_bytes and bytes_left > r.max_bytes:
        for e in tree.entries(head, new_first):
            if bytes_left <= r.max_bytes or e.sequence >= base:
                break
            bytes_left -= entry_byte_length(e.extension)
            new_first = e.sequence + 1
    if new_first <= first:
        return None
    write_cut_receipts(tree, head, new_first - 1)
    raw, removed = head.with_sections(
        head.sections,
        tree.children,
        cut=False,
        through=new_first - 1,
        removed_bytes=partial(tree.bytes_between, head),
    )
    return Cut(raw, removed, r.queued_bytes - bytes_left)


def write_cut_receipts(tree: SegmentTree, head: RawHead, through: int) -> None:
    """Before a retention cut through ``through``: the receipts of what it removes (docs/format.md §5.1, the last
    ``MAX_RECEIPTS``), so a producer whose write had an unknown outcome can still tell whether it landed. Best
    effort, as a dequeue's: without them such a producer reports ``AmbiguousCommitError``, never a duplicate."""
    start = max(head.first_sequence, through - MAX_RECEIPTS + 1)
    removed = []
    for e in tree.entries(head, start):
        if e.sequence > through:
            break
        removed.append((e.sequence, e.location))
    if not removed:
        return
    try:
        receipts = tree.manifest.read_receipts() or DequeueReceipts()
        tree.manifest.write_receipts(receipts.extended(removed, incarnation_of(head.epoch)))
    except StoreError as e:
        _log.warning("could not write the dequeue receipts of a retention cut of '%s': %s", head.key, e)


def age_cut(store: ObjectStore, tree: SegmentTree, head: RawHead, head_modified_ms: int) -> int:
    """The first sequence ``max_age`` keeps: entries are expired from the first on while their batch object's
    last-modified is more than ``max_age_ms`` before the head's (``head_modified_ms``), both by the STORE's clock
    (docs/format.md §6: never a writer's clock). One listing per batch prefix."""
    r = head.sections.retention
    first = head.first_sequence
    if r is None or not r.max_age_ms:
        return first
    listed: dict[str, dict[str, int]] = {}
    cut = first
    for e in tree.entries(head, first):
        prefix = e.location.rpartition("/")[0]
        if prefix not in listed:
            listed[prefix] = {i.key: i.last_modified_ms for i in store.list(prefix + "/" if prefix else "")}
        modified = listed[prefix].get(e.location)
        if modified is None or head_modified_ms - modified <= r.max_age_ms:
            break
        cut = e.sequence + 1
    return cut


class QueueRetention:
    """Sets and clears a queue's retention policy (one CAS each).

    Args:
        store: The object store.
        manifest_key: The manifest's key.
        clock: Time seam of the CAS loop.
        rng: Jitter source of the CAS loop.
        retry: Backoff and budget of conflicting writes.
        metrics: Where the manifest writes are counted (role ``consumer``).
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
        self._loop = admin_loop(self.manifest.cas_object, clock, rng, retry, metrics)
        self._tree = SegmentTree(self.manifest)

    def get(self) -> Retention | None:
        """The queue's retention section (None: no policy, or no queue)."""
        raw, _ = self.manifest.read_raw()
        return None if raw is None else self.manifest.head(raw).sections.retention

    def set(
        self, *, max_age_ms: int = 0, max_bytes: int = 0, max_entries: int = 0, policy: str = "backpressure"
    ) -> Retention:
        """Writes the retention section (replacing one there), with ``queued_bytes`` computed from the
        retained entries (reading their segments). 0 means no limit. Nothing is cut by this write: the
        next append applies the caps. The queue must exist.

        Raises:
            InvalidConfigError: A negative limit or an unknown policy.
            IllegalQueueStateError: No queue.
        """
        for option, value in (("max_age", max_age_ms), ("max_bytes", max_bytes), ("max_entries", max_entries)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
                raise InvalidConfigError(option, value, "use a number >= 0 (0: no limit)")
        code = policy_of(policy)
        key = self.manifest.key

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[Retention]:
            if snapshot.raw is None:
                raise IllegalQueueStateError(f"no queue at '{key}': produce to it first")
            head = parse_head(snapshot.raw, key)
            queued = self._tree.bytes_between(head, head.first_sequence, head.next_sequence)
            r = Retention(max_age_ms, max_bytes, max_entries, code, queued)
            if head.sections.retention == r:
                return Done(r)
            written, _ = head.with_sections(replace(head.sections, retention=r), self._tree.children, cut=False)
            return Write(written, lambda: r)

        return self._loop.run(step)

    def enforce(self) -> int:
        """Applies ``max_age`` now (``osqueue retention enforce``, e.g. from cron): one CAS that removes the
        entries whose batch is older than ``max_age`` by the store's clock, measured against the head's
        last-modified as listed before the CAS (so never early: the head only gets newer). Readers that had
        not read them report the range as data loss. Returns how many entries it removed."""
        key = self.manifest.key
        store = self.manifest.store
        head_modified = next((i.last_modified_ms for i in store.list(key) if i.key == key), None)
        if head_modified is None:
            return 0

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[int]:
            if snapshot.raw is None:
                return Done(0)
            head = parse_head(snapshot.raw, key)
            cut = age_cut(store, self._tree, head, head_modified)
            if cut <= head.first_sequence:
                return Done(0)
            write_cut_receipts(self._tree, head, cut - 1)
            written, removed = head.with_sections(
                head.sections,
                self._tree.children,
                cut=False,
                through=cut - 1,
                removed_bytes=partial(self._tree.bytes_between, head),
            )
            return Write(written, lambda: removed)

        return self._loop.run(step)

    def clear(self) -> bool:
        """Removes the retention section (the head goes back to v2/v1 when it was the last section).
        Returns whether there was one."""
        key = self.manifest.key

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[bool]:
            head = None if snapshot.raw is None else parse_head(snapshot.raw, key)
            if head is None or head.sections.retention is None:
                return Done(previous is not None)
            written, _ = head.with_sections(replace(head.sections, retention=None), self._tree.children, cut=False)
            return Write(written, lambda: True)

        return self._loop.run(step)


def with_room(head: RawHead, own: Sequence[PendingLocation], others: list[Intent]) -> list[Intent]:
    """Under ``backpressure`` (§2.3): raises ``QueueFullError`` unless the own group fits, then keeps the other
    writers' runs, in order, while all of them fit (a prefix: each writer's run stays contiguous); the runs left
    out stay announced for their writers (``check_room`` decides, as on the solo path)."""
    added, added_bytes = len(own), sum(entry_byte_length(p.extension) for p in own)
    check_room(head, added, added_bytes)
    kept: list[Intent] = []
    for intent in others:
        added += len(intent.entries)
        added_bytes += sum(entry_byte_length(e[2]) for e in intent.entries if len(e) == 3)
        try:
            check_room(head, added, added_bytes)
        except QueueFullError:
            break
        kept.append(intent)
    return kept
