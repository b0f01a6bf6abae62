"""The one CAS loop (osqueue.queue.cas_loop, JVM: osqueue.queue.CasLoop) and its callers: the producers'
group commit and the consumer's takeover and dequeue all run through it, with the same rules."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from helpers import ManualClock, WrappedStore, lost_reply_hook

from osqueue.errors import AmbiguousCommitError, ConflictRetriesExhaustedError, StoreError
from osqueue.format import Manifest, ManifestEntry, encode_manifest
from osqueue.metrics import MetricsRegistry
from osqueue.queue import ManifestStore, QueueConsumer, QueueProducer, RetryPolicy
from osqueue.queue.cas_loop import CONFLICT, CasCounters, CasLoop, Done, PreviousAttempt, Unknown, Write
from osqueue.queue.cas_object import CasObject, Snapshot
from osqueue.store import PRECONDITION_FAILED, CasOutcome, InMemoryStore, ObjectVersion, VersionedObject

KEY = "ingest/manifest"
FAST = RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=5)


class FailingReads(WrappedStore):
    """Fails the next ``failures`` reads of the manifest with a StoreError."""

    def __init__(self, inner: InMemoryStore, failures: int) -> None:
        super().__init__(inner)
        self.failures = failures

    def get(self, key: str) -> VersionedObject | None:
        if key == KEY and self.failures > 0:
            self.failures -= 1
            raise StoreError("503 on GET (test)")
        return super().get(key)


def _loop(store: object, metrics: MetricsRegistry, policy: RetryPolicy = FAST) -> CasLoop:
    obj = CasObject(store, KEY)  # type: ignore[arg-type]
    return CasLoop(obj, policy, ManualClock(), random.Random(7), CasCounters.manifest(metrics, "test"))


def test_a_failed_manifest_read_is_retried_within_the_budget_by_every_caller() -> None:
    mem = InMemoryStore("reads")
    store = FailingReads(mem, failures=2)
    producer = QueueProducer(store, KEY, retry=FAST)
    assert producer.enqueue("ingest/a.batch", timeout=10).sequence == 0
    producer.close()
    consumer = QueueConsumer(store, KEY, retry=FAST)
    store.failures = 2
    consumer.initialize()
    store.failures = 2
    assert consumer.dequeue_through(0) == 1
    store.failures = 10
    with pytest.raises(StoreError, match="503 on GET"):  # the budget (5 tries) is spent
        consumer.dequeue_through(0)


def test_the_consumer_takes_a_last_look_when_its_budget_ends_on_an_unknown_outcome() -> None:
    """The dequeue landed but its reply was lost, with no retry left: a last read finds the entries
    gone, so the dequeue is done (0 removed by this call), not reported as failed."""
    mem = InMemoryStore("last-look")
    mem.put(KEY, encode_manifest(Manifest([ManifestEntry(0, "ingest/a.batch", [])], 1, 0)))
    store = WrappedStore(mem)
    consumer = QueueConsumer(store, KEY, retry=RetryPolicy(max_attempts=1))
    consumer.initialize()
    store.on_conditional = lost_reply_hook(lambda: True)
    assert consumer.dequeue_through(0) == 0
    assert store.conditional_calls == 2  # the takeover and the dequeue, once each


def test_conflicts_spend_the_budget_and_are_counted() -> None:
    mem = InMemoryStore("conflicts")
    store = WrappedStore(mem)
    store.on_conditional = lambda key, data, expected, apply: PRECONDITION_FAILED
    metrics = MetricsRegistry()
    loop = _loop(store, metrics)
    with pytest.raises(ConflictRetriesExhaustedError):
        loop.run(lambda snapshot, previous: Write(b"x", lambda: 1))
    assert store.conditional_calls == 5
    assert metrics.counter("buffer.manifest_conflicts", role="test").value == 5
    assert metrics.counter("buffer.manifest_writes", role="test").value == 0


def test_the_step_sees_how_its_previous_write_ended() -> None:
    mem = InMemoryStore("previous")
    store = WrappedStore(mem)
    outcomes: list[Callable[[], CasOutcome]] = []
    seen: list[PreviousAttempt | None] = []

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        if store.conditional_calls == 1:
            return PRECONDITION_FAILED
        if store.conditional_calls == 2:
            raise StoreError("timeout (test)")
        outcomes.append(apply)
        return apply()

    store.on_conditional = hook
    metrics = MetricsRegistry()

    def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> Write[str]:
        seen.append(previous)
        return Write(b"data", lambda: "written")

    assert _loop(store, metrics).run(step) == "written"
    assert seen[0] is None and seen[1] is CONFLICT and isinstance(seen[2], Unknown)
    assert metrics.counter("buffer.manifest_ambiguous_writes", role="test").value == 1
    assert metrics.counter("buffer.manifest_writes", role="test").value == 1


def test_an_outcome_known_store_error_is_raised_at_once() -> None:
    store = WrappedStore(InMemoryStore("known"))

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        raise StoreError("403 (test)", outcome_known=True)

    store.on_conditional = hook
    with pytest.raises(StoreError, match="403"):
        _loop(store, MetricsRegistry()).run(lambda snapshot, previous: Write(b"x", lambda: 1))
    assert store.conditional_calls == 1


class _OneUnknown:
    """A caller that knows its first write had an unknown outcome and never finds it landed."""

    def landed(self, snapshot: Snapshot, previous: PreviousAttempt | None) -> int | None:
        return None

    def still_unknown(self, previous: PreviousAttempt | None) -> str | None:
        return "the first write"


def test_a_step_failing_while_a_write_is_undecided_is_ambiguous() -> None:
    store = WrappedStore(InMemoryStore("step-fails"))

    def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> Done[int]:
        raise ValueError("re-upload failed (test)")

    with pytest.raises(AmbiguousCommitError, match="the first write had an unknown outcome") as raised:
        _loop(store, MetricsRegistry()).run(step, _OneUnknown())
    assert isinstance(raised.value.__cause__, ValueError)
    # Without a write of unknown outcome the step's own error is what the caller gets.
    with pytest.raises(ValueError):
        _loop(store, MetricsRegistry()).run(step)


def test_a_failed_read_after_an_undecided_write_ends_ambiguous_when_the_budget_is_spent() -> None:
    store = FailingReads(InMemoryStore("read-fails"), failures=100)
    with pytest.raises(AmbiguousCommitError, match="503 on GET"):
        _loop(store, MetricsRegistry()).run(lambda snapshot, previous: Write(b"x", lambda: 1), _OneUnknown())


class ManifestReads(WrappedStore):
    """Counts the manifest's reads (other keys: the data prefix's owner record, not counted)."""

    def __init__(self, inner: InMemoryStore) -> None:
        super().__init__(inner)
        self.manifest_reads = 0

    def get(self, key: str) -> VersionedObject | None:
        if key == KEY:
            self.manifest_reads += 1
        return super().get(key)


def test_a_lone_producer_writes_the_manifest_once_per_flush_without_reading_it() -> None:
    """Each append after the first is conditional on the bytes and version its previous write left."""
    store = ManifestReads(InMemoryStore("lone"))
    producer = QueueProducer(store, KEY, retry=FAST)
    assert [producer.enqueue(f"ingest/{i}.batch", timeout=10).sequence for i in range(5)] == [0, 1, 2, 3, 4]
    producer.close()
    assert store.manifest_reads == 1  # the first append's: there was no manifest yet
    assert store.conditional_calls == 5
    raw, _ = ManifestStore(store.inner, KEY).read_raw()
    assert [e.location for e in ManifestStore(store.inner, KEY).decode(raw).entries] == [
        f"ingest/{i}.batch" for i in range(5)
    ]


def test_a_producer_whose_last_write_is_stale_rereads_after_the_conflict_and_lands_once() -> None:
    mem = InMemoryStore("stale")
    store = ManifestReads(mem)
    metrics = MetricsRegistry()
    producer = QueueProducer(store, KEY, retry=FAST, metrics=metrics)
    assert producer.enqueue("ingest/a.batch", timeout=10).sequence == 0
    other = QueueProducer(mem, KEY, retry=FAST, metrics=MetricsRegistry())  # another store object: its own committer
    assert other.enqueue("ingest/b.batch", timeout=10).sequence == 1
    other.close()
    assert producer.enqueue("ingest/c.batch", timeout=10).sequence == 2
    producer.close()
    assert metrics.counter("buffer.manifest_conflicts", role="producer").value == 1
    assert store.manifest_reads == 2  # the first append's, and the one after the conflict
    assert store.conditional_calls == 3  # create, the try on the stale snapshot (412), the landed retry
    raw, _ = ManifestStore(mem, KEY).read_raw()
    assert [e.location for e in ManifestStore(mem, KEY).decode(raw).entries] == [
        "ingest/a.batch",
        "ingest/b.batch",
        "ingest/c.batch",
    ]


def test_a_step_that_would_not_write_on_the_reused_snapshot_is_asked_again_on_a_fresh_read() -> None:
    store = ManifestReads(InMemoryStore("done"))
    loop = CasLoop(
        CasObject(store, KEY),  # type: ignore[arg-type]
        FAST,
        ManualClock(),
        random.Random(7),
        CasCounters.uncounted(),
        reuse_own_write=True,
    )
    assert loop.run(lambda snapshot, previous: Write(b"x", lambda: 1)) == 1
    seen: list[bytes | None] = []

    def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> Done[int]:
        seen.append(snapshot.raw)
        return Done(2)

    assert loop.run(step) == 2
    assert store.manifest_reads == 2 and seen == [b"x", b"x"]  # the reused snapshot, then a fresh read


def test_a_write_of_unknown_outcome_leaves_nothing_to_reuse() -> None:
    """The reply of the second append is lost after it landed: it is resolved on a fresh read, and
    the third append reads again (no snapshot of a write whose outcome was unknown is reused)."""
    store = ManifestReads(InMemoryStore("unknown"))
    producer = QueueProducer(store, KEY, retry=FAST)
    assert producer.enqueue("ingest/a.batch", timeout=10).sequence == 0
    store.on_conditional = lost_reply_hook(lambda: store.conditional_calls == 2)
    assert producer.enqueue("ingest/b.batch", timeout=10).sequence == 1
    assert store.manifest_reads == 2  # the first append's, and the look after the lost reply
    assert producer.enqueue("ingest/c.batch", timeout=10).sequence == 2
    producer.close()
    assert store.manifest_reads == 3
    raw, _ = ManifestStore(store.inner, KEY).read_raw()
    assert [e.location for e in ManifestStore(store.inner, KEY).decode(raw).entries] == [
        "ingest/a.batch",
        "ingest/b.batch",
        "ingest/c.batch",
    ]
