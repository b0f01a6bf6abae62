"""The manifest protocol: group commit, ambiguous outcomes, retry budget, epochs, resume points."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from helpers import (
    ManualClock,
    WrappedStore,
    assert_well_formed,
    lost_reply_hook,
    lying_precondition_hook,
    manifest_locations,
)

from osqueue.errors import (
    AmbiguousCommitError,
    ConflictRetriesExhaustedError,
    FencedError,
    IllegalQueueStateError,
    ResumePointError,
    StoreError,
)
from osqueue.format import (
    RECEIPTS_SUFFIX,
    DequeueReceipts,
    Manifest,
    ManifestEntry,
    MetadataItem,
    append_entries,
    decode_manifest,
    dequeue_through,
    encode_manifest,
    new_batch_key,
    parse_batch_ulid_ms,
)
from osqueue.metrics import MetricsRegistry
from osqueue.queue import EnqueueResult, QueueConsumer, QueueProducer, RetryPolicy
from osqueue.store import PRECONDITION_FAILED, CasOutcome, InMemoryStore, ObjectVersion

KEY = "ingest/manifest"
FAST = RetryPolicy(base_delay=0.0005, max_delay=0.005)


def _producer(store: Any, **kw: Any) -> QueueProducer:
    kw.setdefault("retry", FAST)
    return QueueProducer(store, KEY, **kw)


# -- group commit -------------------------------------------------------------------------------


def test_locations_ready_during_a_write_go_into_the_next_write_in_order(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)
    entered, release = threading.Event(), threading.Event()
    writes: list[list[str]] = []

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        writes.append([e.location for e in decode_manifest(data, key).entries])
        if len(writes) == 1:
            entered.set()
            assert release.wait(10)
        return apply()

    store.on_conditional = hook
    qp = _producer(store)
    first = qp.enqueue_async("ingest/first.batch")
    assert entered.wait(10)
    later = [qp.enqueue_async(f"ingest/later-{i}.batch", [MetadataItem(0, i, b"m")]) for i in range(5)]
    release.set()
    assert first.result(10).sequence == 0
    assert [f.result(10).sequence for f in later] == [1, 2, 3, 4, 5]
    assert len(writes) == 2  # one write for the five that became ready while the first was in flight
    assert writes[1] == ["ingest/first.batch"] + [f"ingest/later-{i}.batch" for i in range(5)]
    qp.close()


def test_producers_sharing_a_store_share_one_committer(mem_store: InMemoryStore) -> None:
    a, b = _producer(mem_store), _producer(mem_store)
    assert a._committer is b._committer
    c = _producer(InMemoryStore("other"))
    assert c._committer is not a._committer
    for p in (a, b, c):
        p.close()
    with pytest.raises(IllegalQueueStateError):
        a.enqueue_async("ingest/x.batch")


@pytest.mark.parametrize("shared", [True, False], ids=["one-committer", "committer-per-thread"])
def test_eight_threads_append_to_one_manifest(any_store: Any, shared: bool) -> None:
    threads, per_thread = 8, 12
    errors: list[BaseException] = []
    shared_qp = _producer(any_store) if shared else None

    def work(t: int) -> None:
        # Separate committers: give each thread its own store object for the same location.
        store = any_store if shared else _same_place(any_store)
        qp = shared_qp or _producer(store)
        try:
            for i in range(per_thread):
                qp.enqueue(f"ingest/t{t}-{i}.batch", [MetadataItem(0, i, b"")], timeout=60)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            if qp is not shared_qp:
                qp.close()

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    locations = assert_well_formed(any_store)
    assert sorted(locations) == sorted(f"ingest/t{t}-{i}.batch" for t in range(threads) for i in range(per_thread))
    for t in range(threads):
        assert [loc for loc in locations if loc.startswith(f"ingest/t{t}-")] == [
            f"ingest/t{t}-{i}.batch" for i in range(per_thread)
        ]
    if shared_qp:
        shared_qp.close()


def _same_place(store: Any) -> Any:
    from osqueue.store import LocalFileSystemStore, S3Store

    if isinstance(store, LocalFileSystemStore):
        return LocalFileSystemStore(store.root)
    if isinstance(store, S3Store):
        return S3Store(store._bucket, store._prefix, client=store.client)
    return WrappedStore(store)  # a distinct object in front of the same memory


# -- ambiguous outcomes -------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["lost_reply", "lying_precondition"])
def test_write_that_landed_but_reported_failure_is_not_appended_twice(mem_store: InMemoryStore, fault: str) -> None:
    store = WrappedStore(mem_store)
    calls = {"n": 0}

    def once() -> bool:
        calls["n"] += 1
        return calls["n"] == 1

    store.on_conditional = lost_reply_hook(once) if fault == "lost_reply" else lying_precondition_hook(once)
    qp = _producer(store)
    result = qp.enqueue("ingest/a.batch", timeout=10)
    assert result.sequence == 0 and result.location == "ingest/a.batch"
    assert manifest_locations(mem_store) == ["ingest/a.batch"]
    assert qp.enqueue("ingest/b.batch", timeout=10).sequence == 1
    assert manifest_locations(mem_store) == ["ingest/a.batch", "ingest/b.batch"]
    qp.close()


@pytest.mark.parametrize("fault", ["lost_reply", "lying_precondition"])
def test_concurrent_producers_with_random_ambiguous_replies_leave_no_duplicates(
    fault: str, mem_store: InMemoryStore
) -> None:
    rng = random.Random(7)
    lock = threading.Lock()

    def flaky() -> bool:
        with lock:
            return rng.random() < 0.3

    errors: list[BaseException] = []

    def work(t: int) -> None:
        store = WrappedStore(mem_store)  # own committer per thread: they race on the CAS
        store.on_conditional = lost_reply_hook(flaky) if fault == "lost_reply" else lying_precondition_hook(flaky)
        qp = _producer(store)
        try:
            for i in range(10):
                qp.enqueue(f"ingest/t{t}-{i}.batch", timeout=60)
        except BaseException as e:  # pragma: no cover
            errors.append(e)
        finally:
            qp.close()

    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    locations = assert_well_formed(mem_store)
    assert sorted(locations) == sorted(f"ingest/t{t}-{i}.batch" for t in range(8) for i in range(10))


def test_write_that_did_not_land_with_unknown_outcome_is_retried(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)
    failures = {"n": 0}

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        if failures["n"] < 2:
            failures["n"] += 1
            raise StoreError("timeout before the request reached the server (test)")
        return apply()

    store.on_conditional = hook
    qp = _producer(store)
    assert qp.enqueue("ingest/a.batch", timeout=10).sequence == 0
    assert manifest_locations(mem_store) == ["ingest/a.batch"]
    assert store.conditional_calls == 3
    qp.close()


def test_unknown_outcome_then_someone_else_takes_the_sequence(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)
    other = _producer(_same_place(mem_store))
    state = {"n": 0}

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        state["n"] += 1
        if state["n"] == 1:
            other.enqueue("ingest/other.batch", timeout=10)  # lands at our sequence
            raise StoreError("reply lost (test)")  # and ours did not land
        return apply()

    store.on_conditional = hook
    qp = _producer(store)
    assert qp.enqueue("ingest/mine.batch", timeout=10).sequence == 1
    assert manifest_locations(mem_store) == ["ingest/other.batch", "ingest/mine.batch"]
    qp.close()
    other.close()


def test_undecidable_outcome_raises_ambiguous_commit_and_never_appends_twice(mem_store: InMemoryStore) -> None:
    mem_store.put(KEY, encode_manifest(Manifest([ManifestEntry(0, "ingest/old.batch", [])], 1, 1)))
    store = WrappedStore(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        apply()  # the write lands at sequence 1 ...
        current = mem_store.get(KEY)
        assert current is not None
        gone, _ = dequeue_through(current.data, 1)  # ... the consumer dequeues it ...
        mem_store.put(KEY, gone)
        raise StoreError("... and the reply was lost (test)")

    store.on_conditional = hook
    qp = _producer(store)
    with pytest.raises(AmbiguousCommitError, match="cannot be told"):
        qp.enqueue("ingest/mine.batch", timeout=10)
    manifest = decode_manifest(mem_store.get(KEY).data, KEY)
    assert manifest.entries == [] and manifest.next_sequence == 2  # appended exactly once
    assert store.conditional_calls == 1
    qp.close()


TINY_BUDGET = RetryPolicy(base_delay=0.0005, max_delay=0.001, max_attempts=4)


def test_budget_spent_on_unknown_outcomes_raises_ambiguous_commit(mem_store: InMemoryStore) -> None:
    """Every write times out before it is applied: each could still land, so giving up must not
    claim "not written" (a caller retrying on a plain StoreError could append a duplicate)."""
    store = WrappedStore(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        raise StoreError("timeout, not applied yet (test)")

    store.on_conditional = hook
    qp = _producer(store, retry=TINY_BUDGET)
    with pytest.raises(AmbiguousCommitError):
        qp.enqueue("ingest/mine.batch", timeout=10)
    assert store.conditional_calls == 4 and mem_store.get(KEY) is None
    qp.close()


def test_conflicts_spending_the_budget_after_an_unknown_outcome_raise_ambiguous_commit(
    mem_store: InMemoryStore,
) -> None:
    """A write of unknown outcome found pending (``next_sequence == base``, our location absent)
    may still land; when the retries then only conflict, the budget ends in AmbiguousCommit."""
    mem_store.put(KEY, encode_manifest(Manifest([ManifestEntry(0, "ingest/old.batch", [])], 1, 1)))
    store = WrappedStore(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        if store.conditional_calls == 1:
            raise StoreError("timeout, not applied yet (test)")
        return PRECONDITION_FAILED

    store.on_conditional = hook
    qp = _producer(store, retry=TINY_BUDGET)
    with pytest.raises(AmbiguousCommitError, match="sequence 1"):
        qp.enqueue("ingest/mine.batch", timeout=10)
    assert manifest_locations(mem_store) == ["ingest/old.batch"]
    qp.close()


def test_dequeue_receipts_decide_a_landed_write_the_consumer_already_dequeued(mem_store: InMemoryStore) -> None:
    """The same race with a real consumer: it records receipts before dequeueing (format.md §5.1),
    so the producer learns that its write landed, and where."""
    mem_store.put(KEY, encode_manifest(Manifest([ManifestEntry(0, "ingest/old.batch", [])], 1, 1)))
    consumer = _consumer(mem_store)
    consumer.initialize()
    store = WrappedStore(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        apply()  # the write lands at sequence 1, the consumer dequeues it, the reply is lost
        assert consumer.dequeue_through(1) == 2
        raise StoreError("reply lost (test)")

    store.on_conditional = hook
    qp = _producer(store)
    assert qp.enqueue("ingest/mine.batch", timeout=10) == EnqueueResult(1, "ingest/mine.batch")
    manifest = decode_manifest(mem_store.get(KEY).data, KEY)
    assert manifest.entries == [] and manifest.next_sequence == 2  # appended exactly once
    assert store.conditional_calls == 1
    receipts = DequeueReceipts.decode(mem_store.get(KEY + RECEIPTS_SUFFIX).data)
    assert receipts == DequeueReceipts(0, ("ingest/old.batch", "ingest/mine.batch"), incarnation=0)
    qp.close()


def test_dequeue_receipts_show_another_write_took_the_sequence_so_ours_is_appended(mem_store: InMemoryStore) -> None:
    consumer = _consumer(mem_store)
    consumer.initialize()
    other = _producer(mem_store)
    store = WrappedStore(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        if store.conditional_calls == 1:
            other.enqueue("ingest/other.batch", timeout=10)  # takes our sequence 0 ...
            consumer.dequeue_through(0)  # ... and is dequeued; our write never landed
            raise StoreError("connection reset before the server applied it (test)")
        return apply()

    store.on_conditional = hook
    qp = _producer(store)
    assert qp.enqueue("ingest/mine.batch", timeout=10).sequence == 1
    assert manifest_locations(mem_store) == ["ingest/mine.batch"]
    qp.close()
    other.close()


def test_receipts_of_the_queue_before_a_reset_never_judge_a_write_lost(mem_store: InMemoryStore) -> None:
    """Issue 24, item 7. Before a reset, a consumer dequeued sequences 0..2 and recorded receipts naming
    other batches at them. After the reset, our write creates the new incarnation at sequence 0 (reply
    lost), and a consumer dequeues it but fails to write its receipts. Those old receipts say sequence 0
    held another batch: read as "lost", the write was appended again (a duplicate). Receipts of another
    incarnation than the write's say nothing about it: undecidable, so AmbiguousCommit, never twice."""
    old = _producer(mem_store)
    for i in range(3):
        old.enqueue(f"ingest/old-{i}.batch", timeout=10)
    old.close()
    before = _consumer(mem_store)
    before.initialize()
    before.dequeue_through(2)
    stale = DequeueReceipts.decode(mem_store.get(KEY + RECEIPTS_SUFFIX).data)
    assert stale is not None and stale.location_at(0) == "ingest/old-0.batch"
    mem_store.delete(KEY)  # the reset

    failing_receipts = WrappedStore(mem_store)

    def no_receipts(key: str, data: bytes) -> None:
        if key.endswith(RECEIPTS_SUFFIX):
            raise StoreError("receipts write failed (test)")

    failing_receipts.on_put = no_receipts
    store = WrappedStore(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        if store.conditional_calls > 1:
            return apply()
        apply()  # creates the new incarnation with our entry at 0; the reply is lost
        after = _consumer(failing_receipts)
        after.initialize()
        after.dequeue_through(0)
        raise StoreError("reply lost (test)")

    store.on_conditional = hook
    qp = _producer(store, retry=TINY_BUDGET)
    with pytest.raises(AmbiguousCommitError):
        qp.enqueue("ingest/mine.batch", timeout=10)
    head = decode_manifest(mem_store.get(KEY).data, KEY)
    assert head.next_sequence == 1 and head.entries == [], "appended once (and dequeued), never twice"
    qp.close()


def test_a_write_sent_before_a_reset_is_decided_by_its_own_incarnations_receipts(mem_store: InMemoryStore) -> None:
    """Issue 24, item 7. Our write lands at sequence 1 (reply lost) and is dequeued with receipts; then the
    queue is reset and the new incarnation holds one entry, so its next sequence is our write's. That read
    as "pending" and the write was appended into the new queue (a second delivery). A manifest of another
    incarnation decides nothing; the receipts of the write's own incarnation show it landed at 1."""
    old = _producer(mem_store)
    old.enqueue("ingest/old.batch", timeout=10)
    old.close()
    consumer = _consumer(mem_store)
    consumer.initialize()
    newcomer = _producer(WrappedStore(mem_store))  # writes the queue after the reset
    store = WrappedStore(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        if store.conditional_calls > 1:
            return apply()
        apply()  # lands at sequence 1; the reply is lost
        consumer.dequeue_through(1)  # receipts: 0 old, 1 ours
        mem_store.delete(KEY)  # the reset
        newcomer.enqueue("ingest/new-0.batch", timeout=10)  # the new incarnation's next sequence is 1
        raise StoreError("reply lost (test)")

    store.on_conditional = hook
    qp = _producer(store)
    assert qp.enqueue("ingest/mine.batch", timeout=10) == EnqueueResult(1, "ingest/mine.batch")
    assert manifest_locations(mem_store) == ["ingest/new-0.batch"], "not appended into the new queue"
    qp.close()
    newcomer.close()


def test_dequeue_receipts_keep_the_last_entries_and_restart_after_a_gap() -> None:
    r = DequeueReceipts().extended([(0, "a"), (1, "b")])
    assert r == DequeueReceipts(0, ("a", "b"))
    r = r.extended([(2, "c"), (3, "d")], max_count=3)
    assert r == DequeueReceipts(1, ("b", "c", "d")) and r.location_at(0) is None and r.location_at(3) == "d"
    assert r.extended([(3, "d"), (4, "e")], max_count=10) == DequeueReceipts(
        1, ("b", "c", "d", "e")
    )  # a retried dequeue
    assert r.extended([(9, "x")]) == DequeueReceipts(9, ("x",))  # a gap: only what is known for sure
    # Another incarnation (a reset): its sequences start again, so the old receipts are dropped.
    assert r.extended([(2, "y")], incarnation=5) == DequeueReceipts(2, ("y",), 5)
    assert DequeueReceipts.decode(r.extended([(2, "y")], incarnation=5).encode()) == DequeueReceipts(2, ("y",), 5)
    assert DequeueReceipts.decode(r.encode()) == r
    good = r.encode()
    assert good[:4] == b"OSQR" and len(good) == 17 + 3 * (2 + 1)
    for bad in (
        b"",
        b"OSQR",
        good[:-1],
        good + b"x",
        b"OSQX" + good[4:],
        good[:4] + b"\x02" + good[5:],
        good[:13] + b"\xff\xff\xff\xff" + good[17:],
        good[:-1] + b"\xff",
    ):
        assert DequeueReceipts.decode(bad) is None, bad


def test_write_found_partly_dequeued_landed_and_reports_its_sequences(mem_store: InMemoryStore) -> None:
    """A CAS write is atomic: if some of its locations are present, it landed, even when the
    consumer already dequeued a prefix of it (format.md §5)."""
    store = WrappedStore(mem_store)
    entered, release = threading.Event(), threading.Event()
    calls = {"n": 0}

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        calls["n"] += 1
        if calls["n"] == 1:  # hold the first write so the next three form one group
            entered.set()
            assert release.wait(10)
            return apply()
        if calls["n"] == 2:
            apply()  # the group lands at sequences 1..3 ...
            current = mem_store.get(KEY)
            assert current is not None
            part, removed = dequeue_through(current.data, 1)  # ... the consumer takes sequence 1 ...
            assert removed == 2
            mem_store.put(KEY, part)
            raise StoreError("... and the reply was lost (test)")
        return apply()

    store.on_conditional = hook
    qp = _producer(store)
    first = qp.enqueue_async("ingest/first.batch")
    assert entered.wait(10)
    group = [qp.enqueue_async(f"ingest/g{i}.batch") for i in range(3)]
    release.set()
    assert first.result(10).sequence == 0
    results = [f.result(10) for f in group]
    assert [(r.sequence, r.location) for r in results] == [
        (1, "ingest/g0.batch"),
        (2, "ingest/g1.batch"),
        (3, "ingest/g2.batch"),
    ]
    assert manifest_locations(mem_store) == ["ingest/g1.batch", "ingest/g2.batch"]  # nothing appended twice
    assert calls["n"] == 2
    qp.close()


def test_retried_locations_resolve_to_the_attempt_that_landed(mem_store: InMemoryStore) -> None:
    """Two attempts share a location; only the one whose slots match the manifest landed."""
    mem_store.put(KEY, append_entries(None, [("ingest/a.batch", []), ("ingest/b.batch", [])], KEY)[0])
    qp = _producer(mem_store)
    committer = qp._committer
    raw = mem_store.get(KEY).data
    # Attempt 1 tried (a, b) at base 0 and landed; attempt 2 tried (a, b2) at base 2.
    landed = committer._find_landed(
        raw, [("ingest/a.batch", "ingest/b.batch"), ("ingest/a.batch", "ingest/b2.batch")], 0
    )
    assert landed is not None and [(r.sequence, r.location) for r in landed] == [
        (0, "ingest/a.batch"),
        (1, "ingest/b.batch"),
    ]
    assert committer._find_landed(raw, [("ingest/x.batch",)], 0) is None
    qp.close()


def test_outcome_known_store_error_fails_without_retry(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        raise StoreError("403 access denied (test)", outcome_known=True)

    store.on_conditional = hook
    qp = _producer(store)
    with pytest.raises(StoreError, match="403"):
        qp.enqueue("ingest/a.batch", timeout=10)
    assert store.conditional_calls == 1
    qp.close()


def test_failed_group_fails_every_future_with_the_same_error(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)
    entered, release = threading.Event(), threading.Event()
    state = {"n": 0}

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        state["n"] += 1
        if state["n"] == 1:
            entered.set()
            release.wait(10)
            return apply()
        raise StoreError("rejected (test)", outcome_known=True)

    store.on_conditional = hook
    qp = _producer(store)
    first = qp.enqueue_async("ingest/first.batch")
    assert entered.wait(10)
    group = [qp.enqueue_async(f"ingest/g{i}.batch") for i in range(3)]
    release.set()
    assert first.result(10).sequence == 0
    errors = [f.exception(10) for f in group]
    assert isinstance(errors[0], StoreError) and all(e is errors[0] for e in errors)
    qp.close()


# -- retry budget and backoff -------------------------------------------------------------------


def test_retry_budget_exhausts_with_jittered_exponential_backoff(mem_store: InMemoryStore) -> None:
    def run(seed: int) -> tuple[list[float], ConflictRetriesExhaustedError]:
        store = WrappedStore(InMemoryStore("budget"))
        store.on_conditional = lambda key, data, expected, apply: PRECONDITION_FAILED
        clock = ManualClock()
        qp = QueueProducer(store, KEY, clock=clock, rng=random.Random(seed), retry=RetryPolicy(max_attempts=12))
        with pytest.raises(ConflictRetriesExhaustedError) as info:
            qp.enqueue("ingest/a.batch", timeout=10)
        qp.close()
        assert store.conditional_calls == 12
        return clock.sleeps, info.value

    sleeps, error = run(3)
    assert error.attempts == 12 and error.kind.value == "Transient"
    assert len(sleeps) == 11
    for n, s in enumerate(sleeps, start=1):
        assert 0 <= s <= min(1.0, 0.010 * 2 ** (n - 1))
    assert max(sleeps[7:]) > 0.3  # the cap grew to 1 s: later waits are longer
    assert run(3)[0] == sleeps  # deterministic with a seeded rng
    assert run(4)[0] != sleeps


def test_retry_budget_is_also_bounded_in_time(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)
    store.on_conditional = lambda key, data, expected, apply: PRECONDITION_FAILED
    clock = ManualClock()
    qp = QueueProducer(store, KEY, clock=clock, rng=random.Random(1), retry=RetryPolicy(max_elapsed=5.0))
    with pytest.raises(ConflictRetriesExhaustedError) as info:
        qp.enqueue("ingest/a.batch", timeout=10)
    assert 5000 <= info.value.elapsed_ms < 7000
    assert info.value.attempts < 1000
    qp.close()


def test_retry_policy_delay_bounds() -> None:
    policy = RetryPolicy()
    rng = random.Random(0)
    assert all(0 <= policy.delay(1, rng) <= 0.010 for _ in range(100))
    assert all(0 <= policy.delay(50, rng) <= 1.0 for _ in range(100))
    assert max(policy.delay(50, rng) for _ in range(200)) > 0.9


# -- stale batches (GC rule, producer side) -----------------------------------------------------


def test_location_older_than_half_the_grace_period_is_reuploaded_before_the_write(mem_store: InMemoryStore) -> None:
    clock = ManualClock()
    old = new_batch_key("ingest", clock)
    mem_store.put(old, b"batch-bytes")
    clock.advance(301)  # grace 600 s: the location is now too old to enqueue
    uploads: list[str] = []

    def reupload() -> str:
        key = new_batch_key("ingest", clock)
        mem_store.put(key, b"batch-bytes")
        uploads.append(key)
        return key

    metrics = MetricsRegistry()
    qp = QueueProducer(mem_store, KEY, clock=clock, metrics=metrics)
    result = qp.enqueue_async(old, reupload=reupload, max_age_ms=300_000).result(10)
    assert uploads == [result.location] and result.location != old
    assert metrics.counter("buffer.batches_reuploaded").value == 1
    assert parse_batch_ulid_ms(result.location) == clock.now_ms()
    assert manifest_locations(mem_store) == [result.location]
    fresh = qp.enqueue_async(new_batch_key("ingest", clock), reupload=reupload, max_age_ms=300_000).result(10)
    assert len(uploads) == 1 and fresh.sequence == 1  # a fresh one is not re-uploaded
    qp.close()


def test_a_slow_reupload_is_checked_again_and_every_copy_stale_gives_store_error(mem_store: InMemoryStore) -> None:
    clock = ManualClock()
    stall_per_upload = [301.0, 0.0]  # the first re-upload takes 301 s: its fresh name is stale when done

    def reupload() -> str:
        key = new_batch_key("ingest", clock)
        mem_store.put(key, b"batch-bytes")
        clock.advance(stall_per_upload.pop(0) if stall_per_upload else 301.0)
        return key

    old = new_batch_key("ingest", clock)
    clock.advance(301)
    qp = QueueProducer(mem_store, KEY, clock=clock)
    result = qp.enqueue_async(old, reupload=reupload, max_age_ms=300_000).result(10)
    assert clock.now_ms() - parse_batch_ulid_ms(result.location) < 300_000
    # From now on every upload takes 301 s: give up after MAX_REUPLOADS, enqueueing nothing.
    stale = new_batch_key("ingest", clock)
    clock.advance(301)
    with pytest.raises(StoreError, match="half the GC grace period"):
        qp.enqueue_async(stale, reupload=reupload, max_age_ms=300_000).result(10)
    qp.close()
    assert manifest_locations(mem_store) == [result.location]


# -- consumer side ------------------------------------------------------------------------------


def _consumer(store: Any, **kw: Any) -> QueueConsumer:
    kw.setdefault("retry", FAST)
    return QueueConsumer(store, KEY, **kw)


def _seed(store: Any, n: int, first: int = 0, epoch: int = 0) -> None:
    entries = [ManifestEntry(first + i, f"ingest/e{first + i}.batch", []) for i in range(n)]
    store.put(KEY, encode_manifest(Manifest(entries, first + n, epoch)))


def test_initialize_creates_missing_manifest_as_a_new_incarnation_at_its_first_epoch(mem_store: InMemoryStore) -> None:
    c = _consumer(mem_store)
    assert c.epoch is None
    c.initialize()
    assert c.epoch is not None and c.epoch & 0xFFFFFFFF == 1 and c.incarnation == c.epoch >> 32
    assert 1 <= c.incarnation < 1 << 31
    assert mem_store.get(KEY).data == encode_manifest(Manifest([], 0, c.epoch))
    assert mem_store.get(KEY + ".incarnation").data == str(c.incarnation).encode()
    other = InMemoryStore()
    _consumer(other).initialize()
    assert decode_manifest(other.get(KEY).data, KEY).epoch >> 32 != c.incarnation, "a fresh random incarnation each"


def test_initialize_bumps_and_wraps_the_epoch(mem_store: InMemoryStore) -> None:
    _seed(mem_store, 2, epoch=(1 << 64) - 2)
    c = _consumer(mem_store)
    c.initialize()
    assert c.epoch == 0
    assert decode_manifest(mem_store.get(KEY).data, KEY).epoch == 0


@pytest.mark.parametrize(
    "first,n,last_acked,message",
    [(0, 3, 3, "ahead"), (0, 0, 0, "ahead"), (5, 3, 9, "ahead"), (5, 3, 3, "removed"), (5, 0, 2, "removed")],
)
def test_resume_point_errors(mem_store: InMemoryStore, first: int, n: int, last_acked: int, message: str) -> None:
    if n or first:
        _seed(mem_store, n, first=first)
    before = mem_store.get(KEY)
    with pytest.raises(ResumePointError, match=message):
        _consumer(mem_store).initialize(last_acked)
    after = mem_store.get(KEY)
    assert (before is None and after is None) or (before.data == after.data)  # nothing written


@pytest.mark.parametrize("last_acked,remaining", [(4, [5, 6, 7]), (5, [6, 7]), (7, [])])
def test_resume_point_dequeues_in_the_same_write_as_the_epoch_bump(
    mem_store: InMemoryStore, last_acked: int, remaining: list[int]
) -> None:
    _seed(mem_store, 3, first=5, epoch=4)
    store = WrappedStore(mem_store)
    c = _consumer(store)
    c.initialize(last_acked)
    assert store.conditional_calls == 1
    m = decode_manifest(mem_store.get(KEY).data, KEY)
    assert [e.sequence for e in m.entries] == remaining and m.epoch == 5 and m.next_sequence == 8


def test_fenced_consumer_cannot_read_or_dequeue_and_no_write_lands(mem_store: InMemoryStore) -> None:
    _seed(mem_store, 4)
    old, new = _consumer(mem_store), _consumer(mem_store)
    old.initialize()
    assert old.read().epoch == 1
    new.initialize()
    before = mem_store.get(KEY).data
    with pytest.raises(FencedError) as info:
        old.read()
    assert (info.value.own_epoch, info.value.current_epoch) == (1, 2)
    assert info.value.kind.value == "Fenced"
    with pytest.raises(FencedError):
        old.dequeue_through(2)
    with pytest.raises(FencedError):
        old.descriptors_after(None, 10)
    assert mem_store.get(KEY).data == before
    new.dequeue_through(1)
    assert [e.sequence for e in new.read().entries] == [2, 3]


def test_fence_between_read_and_write_is_caught_by_the_cas(mem_store: InMemoryStore) -> None:
    _seed(mem_store, 4)
    store = WrappedStore(mem_store)
    old = _consumer(store)
    old.initialize()
    new = _consumer(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        new.initialize()  # takes over after old read the manifest, before its write
        return apply()

    store.on_conditional = hook
    with pytest.raises(FencedError):
        old.dequeue_through(2)
    m = decode_manifest(mem_store.get(KEY).data, KEY)
    assert [e.sequence for e in m.entries] == [0, 1, 2, 3] and m.epoch == 2


def test_dequeue_that_removes_nothing_writes_nothing(mem_store: InMemoryStore) -> None:
    _seed(mem_store, 3, first=5)
    store = WrappedStore(mem_store)
    c = _consumer(store)
    c.initialize()
    writes = store.conditional_calls
    assert c.dequeue_through(4) == 0
    assert store.conditional_calls == writes
    assert c.dequeue_through(5) == 1
    assert store.conditional_calls == writes + 1
    with pytest.raises(IllegalQueueStateError, match="only reached"):
        c.dequeue_through(8)


def test_dequeue_with_lost_reply_is_resolved_by_rereading(mem_store: InMemoryStore) -> None:
    _seed(mem_store, 3)
    store = WrappedStore(mem_store)
    c = _consumer(store)
    c.initialize()
    store.on_conditional = lost_reply_hook(lambda: store.conditional_calls == 2)
    c.dequeue_through(1)
    assert [e.sequence for e in c.read().entries] == [2]


def test_consumer_metrics_have_a_role_label(mem_store: InMemoryStore) -> None:
    metrics = MetricsRegistry()
    _seed(mem_store, 2)
    c = QueueConsumer(mem_store, KEY, metrics=metrics)
    c.initialize()
    c.dequeue_through(0)
    assert metrics.counter("buffer.manifest_writes", role="consumer").value == 2
    qp = QueueProducer(InMemoryStore("metrics-role"), KEY, metrics=metrics)
    qp.enqueue("ingest/a.batch", timeout=10)
    qp.close()
    assert metrics.counter("buffer.manifest_writes", role="producer").value == 1


def test_append_helpers_agree_with_committer(mem_store: InMemoryStore) -> None:
    raw, first = append_entries(None, [("ingest/a.batch", [])])
    mem_store.put(KEY, raw)
    qp = _producer(mem_store)
    assert qp.enqueue("ingest/b.batch", timeout=10).sequence == first + 1
    qp.close()


def test_last_look_before_giving_up_finds_a_landed_write(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)
    store.on_conditional = lost_reply_hook(lambda: True)  # every reply is lost, every write lands
    qp = QueueProducer(store, KEY, retry=RetryPolicy(max_attempts=1))  # no retry at all
    assert qp.enqueue("ingest/a.batch", timeout=10).sequence == 0
    assert manifest_locations(mem_store) == ["ingest/a.batch"]
    qp.close()


def test_invalid_entry_is_rejected_at_submit_not_in_the_shared_write(mem_store: InMemoryStore) -> None:
    from osqueue.errors import InvalidConfigError

    qp = _producer(mem_store)
    with pytest.raises(InvalidConfigError, match="65535"):
        qp.enqueue_async("ingest/" + "x" * 70000 + ".batch")
    with pytest.raises(InvalidConfigError, match="start_index"):
        qp.enqueue_async("ingest/a.batch", [MetadataItem(-1, 0, b"")])
    assert qp.enqueue("ingest/ok.batch", timeout=10).sequence == 0
    qp.close()


def test_a_failed_reupload_while_a_write_is_undecided_is_an_ambiguous_commit(mem_store: InMemoryStore) -> None:
    """The first write's outcome is unknown (not applied yet, may still land); before the retry the
    batch has grown stale and its re-upload fails. That must not read as "not written" (docs/format.md §5)."""
    clock = ManualClock()
    store = WrappedStore(mem_store)
    calls = 0

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        nonlocal calls
        calls += 1
        clock.advance(301)  # the request took long: the location is older than half the grace period now
        raise StoreError("read timeout (test)")  # outcome unknown, and not applied

    def reupload() -> str:
        raise StoreError("503 SlowDown on the re-upload (test)")

    store.on_conditional = hook
    old = new_batch_key("ingest", clock)
    mem_store.put(old, b"batch-bytes")
    qp = _producer(
        store, clock=clock, retry=RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=5, max_elapsed=10_000)
    )
    with pytest.raises(AmbiguousCommitError, match="had an unknown outcome"):
        qp.enqueue_async(old, reupload=reupload, max_age_ms=300_000).result(10)
    qp.close()
    assert calls == 1


class _ProducerAppendsDuringReceipts(InMemoryStore):
    """A producer appends one entry while every dequeue-receipts write is in flight (an append every
    few tens of ms against 20 ms round trips)."""

    def put(self, key: str, data: bytes) -> None:
        super().put(key, data)
        if key.endswith(RECEIPTS_SUFFIX):
            current = decode_manifest(self.get(KEY).data, KEY)
            entry = ManifestEntry(current.next_sequence, f"ingest/p{current.next_sequence}.batch", [])
            super().put(KEY, encode_manifest(Manifest([*current.entries, entry], entry.sequence + 1, current.epoch)))


def test_a_dequeue_wins_its_cas_although_a_producer_appends_during_every_receipts_write() -> None:
    # Receipts written inside each CAS attempt put every attempt's conditional write on a stale
    # manifest: the dequeue lost every round (JVM: BackgroundDequeuerSuite, the same case).
    store = _ProducerAppendsDuringReceipts()
    _seed(store, 5)
    consumer = _consumer(store, retry=RetryPolicy(base_delay=0.0005, max_delay=0.005, max_attempts=10))
    consumer.initialize()
    assert consumer.dequeue_through(2) == 3
    manifest = decode_manifest(store.get(KEY).data, KEY)
    assert [e.sequence for e in manifest.entries] == [3, 4, 5]  # the producer's append landed too
