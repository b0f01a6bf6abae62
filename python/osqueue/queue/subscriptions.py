"""Named subscriptions of a queue: create, list, drop (docs/format.md §2.3, ADR 0005; JVM: ``Subscriptions``).

Each operation is one CAS on the manifest head through :class:`~osqueue.queue.cas_loop.CasLoop`. A
subscription's record lives in the head's subscriptions section: its epoch (the subscription's own
fence), its ``next`` (the first sequence it has not acknowledged) and its times. The queue keeps an
entry while any reader record's ``next`` has not passed it (``low_water`` = the slowest reader).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from osqueue import metrics as m
from osqueue.clock import Clock, SystemClock
from osqueue.errors import IllegalQueueStateError, InvalidConfigError
from osqueue.format.head_sections import HeadSections, Subscription, UnnamedReader, valid_subscription_name
from osqueue.format.incarnation import new_incarnation_epoch
from osqueue.format.manifest_codec import empty_manifest
from osqueue.format.manifest_head import RawHead, parse_head
from osqueue.queue.cas_loop import CasStep, Done, PreviousAttempt, Write, admin_loop
from osqueue.queue.cas_object import Snapshot
from osqueue.queue.manifest_store import DEFAULT_MANIFEST_PATH, ManifestStore
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.queue.segment_tree import SegmentTree
from osqueue.store.object_store import ObjectStore

STARTING_POSITIONS = ("earliest", "latest")
"""Where a new subscription starts: the queue's first retained entry, or after its last entry."""


def check_subscription_name(name: object, option: str = "subscription") -> str:
    """``name`` if it is a valid subscription name (1 to 128 of ``[A-Za-z0-9._-]``).

    Raises:
        InvalidConfigError: Naming ``option``.
    """
    if not isinstance(name, str) or not valid_subscription_name(name):
        raise InvalidConfigError(option, name, "a subscription name is 1 to 128 characters of [A-Za-z0-9._-]")
    return name


def next_subscription_epoch(epoch: int) -> int:
    """A subscription's epoch after a takeover: the low 32 bits (takeovers) + 1, wrapping within them,
    so the high 32 bits stay the subscription's incarnation."""
    return (epoch & ~0xFFFFFFFF) | ((epoch + 1) & 0xFFFFFFFF)


def with_new_subscription(head: RawHead, name: str, start: str, epoch: int, now_ms: int) -> HeadSections:
    """The head's sections with a new record for ``name`` at ``start``. A head without sections (v1, v2, or v3 since
    docs/adr/0006 item 3) whose footer epoch shows a takeover (its unnamed consumer took part) also gets the unnamed reader's record,
    at the queue's first sequence (what that consumer had left)."""
    sections = head.sections
    if sections.is_empty and head.epoch & 0xFFFFFFFF:
        sections = replace(sections, unnamed_reader=UnnamedReader(head.first_sequence, now_ms))
    nxt = head.first_sequence if start == "earliest" else head.next_sequence
    return sections.with_subscription(Subscription(name, epoch, nxt, now_ms, now_ms))


@dataclass(frozen=True)
class SubscriptionPosition:
    """A subscription's record and where it stands in the queue.

    Attributes:
        subscription: Its record.
        lag_entries: Entries it has still to acknowledge (``next_sequence - max(next, low_water)``).
        dropped_entries: Entries removed before it acknowledged them (``max(0, low_water - next)``).
    """

    subscription: Subscription
    lag_entries: int
    dropped_entries: int


def positions(head: RawHead) -> list[SubscriptionPosition]:
    """Every subscription of ``head`` with its lag, in name order."""
    low = head.first_sequence
    return [
        SubscriptionPosition(s, head.next_sequence - max(s.next, low), max(0, low - s.next))
        for s in head.sections.subscriptions
    ]


class Subscriptions:
    """Creates, lists and drops a queue's subscriptions (one CAS each).

    Args:
        store: The object store.
        manifest_key: The manifest's key.
        clock: Time seam (``created_ms``).
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
        self._clock = clock or SystemClock()
        self._loop = admin_loop(self.manifest.cas_object, self._clock, rng, retry, metrics)
        self._tree = SegmentTree(self.manifest)

    def create(self, name: str, start: str = "earliest") -> Subscription:
        """Adds the subscription ``name`` starting at ``start`` (``earliest`` or ``latest``), with a fresh
        random incarnation. A missing queue is created (a new incarnation, §5.2). Entries are never
        removed by a create. After a write of unknown outcome the head is re-read: our record there
        means created.

        Raises:
            IllegalQueueStateError: The subscription exists.
            InvalidConfigError: A bad name or start.
        """
        check_subscription_name(name)
        if start not in STARTING_POSITIONS:
            raise InvalidConfigError("startingPosition", start, "use earliest or latest")
        epoch = new_incarnation_epoch()
        key = self.manifest.key

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[Subscription]:
            head = parse_head(empty_manifest(new_incarnation_epoch()) if snapshot.raw is None else snapshot.raw, key)
            existing = head.sections.subscription(name)
            if existing is not None:
                if previous is not None and existing.incarnation == epoch >> 32:
                    return Done(existing)  # our write landed before its reply was lost
                raise IllegalQueueStateError(f"subscription '{name}' exists in queue '{key}'")
            sections = with_new_subscription(head, name, start, epoch, self._clock.now_ms())
            written, _ = head.with_sections(sections, self._tree.children, cut=False)
            created = sections.subscription(name)
            assert created is not None
            return Write(written, lambda: created)

        return self._loop.run(step)

    def _removed(self, head: RawHead) -> Callable[[int, int], int]:
        return partial(self._tree.bytes_between, head)

    def list(self) -> list[SubscriptionPosition]:
        """The queue's subscriptions with their positions (none for a missing queue)."""
        return positions(self.head())

    def head(self) -> RawHead:
        raw, _ = self.manifest.read_raw()
        return self.manifest.head(raw)

    def drop(self, name: str) -> bool:
        """Removes the subscription ``name``; ``low_water`` moves to the slowest remaining reader. The
        last section gone, the head is written as v2 or v1 again. Its readers fail their next ack
        (fenced). Returns whether it existed (False also when a lost reply's write had landed).
        """
        check_subscription_name(name)
        key = self.manifest.key

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[bool]:
            if snapshot.raw is None:
                return Done(False)
            head = parse_head(snapshot.raw, key)
            if head.sections.subscription(name) is None:
                return Done(False)
            written, _ = head.with_sections(
                head.sections.without_subscription(name), self._tree.children, removed_bytes=self._removed(head)
            )
            return Write(written, lambda: True)

        return self._loop.run(step)

    def drop_unnamed(self) -> bool:
        """Removes the unnamed reader's record (so a queue read only by subscriptions is not pinned by
        an RFC consumer that left). Returns whether it existed."""
        key = self.manifest.key

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[bool]:
            head = None if snapshot.raw is None else parse_head(snapshot.raw, key)
            if head is None or head.sections.unnamed_reader is None:
                return Done(False)
            written, _ = head.with_sections(
                replace(head.sections, unnamed_reader=None), self._tree.children, removed_bytes=self._removed(head)
            )
            return Write(written, lambda: True)

        return self._loop.run(step)
