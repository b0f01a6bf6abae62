"""Garbage collection rules, and the stalled-producer case end to end."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from helpers import ManualClock, WrappedStore
from segmented_queue_helpers import KEY, all_locations, head, producer, upload

from osqueue.consumer import Consumer
from osqueue.errors import StoreError
from osqueue.format import Manifest, ManifestEntry, encode_batch, encode_manifest, encode_ulid, parse_batch_ulid_ms
from osqueue.gc import GarbageCollector, GcResult
from osqueue.metrics import MetricsRegistry
from osqueue.producer import Producer
from osqueue.queue import QueueProducer, RetryPolicy
from osqueue.store import InMemoryStore, VersionedObject

MIN = 60_000


def _name(clock: ManualClock, age_ms: int, rnd: int = 0) -> str:
    return f"ingest/{encode_ulid(clock.now_ms() - age_ms, rnd)}.batch"


def _put_at_name_time(store: Any, clock: ManualClock, key: str) -> None:
    """Writes ``key`` when the store's clock (``clock``) read its ULID time, so that it is that old."""
    named = parse_batch_ulid_ms(key.rpartition("/")[2])
    back_ms = 0 if named is None else clock.now_ms() - named
    clock.advance(-back_ms / 1000)
    store.put(key, b"x")
    clock.advance(back_ms / 1000)


def _manifest(store: Any, locations: list[str]) -> None:
    store.put(
        KEY,
        encode_manifest(Manifest([ManifestEntry(i, loc, []) for i, loc in enumerate(locations)], len(locations), 1)),
    )


def test_gc_rules(mem_store: InMemoryStore, clock: ManualClock) -> None:
    oldest_ref = _name(clock, 30 * MIN, 2)
    referenced_new = _name(clock, 1 * MIN, 3)
    was_referenced = _name(clock, 60 * MIN, 1)  # referenced at first, dequeued later
    orphan = _name(clock, 40 * MIN, 4)
    orphan2 = _name(clock, 31 * MIN, 5)
    young_orphan = _name(clock, 5 * MIN, 6)
    newer_than_oldest = _name(clock, 20 * MIN, 7)  # past grace, but newer than the oldest referenced
    others = [
        "ingest/not-a-ulid.batch",
        f"ingest/nested/{encode_ulid(clock.now_ms() - 90 * MIN, 8)}.batch",  # not directly under the prefix
        f"ingest/{encode_ulid(clock.now_ms() - 90 * MIN, 9).lower()}.batch",
        f"ingest/{encode_ulid(clock.now_ms() - 90 * MIN, 10)}.batchx",
    ]
    for k in [was_referenced, oldest_ref, referenced_new, orphan, orphan2, young_orphan, newer_than_oldest, *others]:
        _put_at_name_time(mem_store, clock, k)
    outside = "elsewhere/" + orphan.split("/")[1]
    _put_at_name_time(mem_store, clock, outside)  # outside the prefix: never listed
    metrics = MetricsRegistry()
    gc = GarbageCollector(mem_store, KEY, "ingest", grace_period=600, clock=clock, metrics=metrics)

    # The oldest referenced batch is 60 min old: every orphan is newer, nothing may go.
    _manifest(mem_store, [was_referenced, oldest_ref, referenced_new])
    first = gc.run_once()
    assert first.deleted == () and first.kept_referenced == 3 and first.kept_newer_than_oldest == 4

    # After a dequeue the oldest referenced batch is 30 min old.
    _manifest(mem_store, [oldest_ref, referenced_new])
    dry = gc.run_once(dry_run=True)
    assert mem_store.get(orphan) is not None  # a dry run deletes nothing
    result = gc.run_once()
    assert set(result.deleted) == set(dry.deleted) == {orphan, orphan2, was_referenced}
    assert result.kept_referenced == 2
    assert result.kept_newer_than_oldest == 2  # young_orphan and newer_than_oldest
    assert result.kept_not_batch == len(others) + 2  # + the manifest itself and the owner record
    assert result.failed == ()
    for k in [oldest_ref, referenced_new, young_orphan, newer_than_oldest, *others, outside, KEY]:
        assert mem_store.get(k) is not None, k
    assert metrics.counter("buffer.gc_files_deleted").value == 3
    assert metrics.histogram("buffer.gc_duration_seconds").count == 3


def test_grace_period_applies_when_older_than_oldest(mem_store: InMemoryStore, clock: ManualClock) -> None:
    ref = _name(clock, 1 * MIN, 1)
    young_orphan = _name(clock, 9 * MIN, 2)  # older than ref but inside the 10 min grace
    old_orphan = _name(clock, 10 * MIN, 3)  # exactly the grace period: deleted
    _manifest(mem_store, [ref])
    for k in (ref, young_orphan, old_orphan):
        _put_at_name_time(mem_store, clock, k)
    result = GarbageCollector(mem_store, grace_period=600, clock=clock).run_once()
    assert result.deleted == (old_orphan,)
    assert result.kept_in_grace == 1


def test_empty_manifest_skips_the_oldest_rule(mem_store: InMemoryStore, clock: ManualClock) -> None:
    old, young, future = _name(clock, 11 * MIN, 1), _name(clock, 2 * MIN, 2), _name(clock, -5 * MIN, 3)
    for k in (old, young, future):
        _put_at_name_time(mem_store, clock, k)
    _manifest(mem_store, [])
    result = GarbageCollector(mem_store, grace_period=600, clock=clock).run_once()
    assert result.deleted == (old,)
    assert result.kept_in_grace == 2  # future-dated files count as young
    # A shorter option does not shorten the queue's grace period (docs/format.md §6).
    assert GarbageCollector(mem_store, grace_period=60, clock=clock).run_once().deleted == ()


def test_grace_is_measured_from_the_snapshot_not_the_delete(mem_store: InMemoryStore, clock: ManualClock) -> None:
    almost = _name(clock, 10 * MIN - 1000, 1)  # 1 s short of the grace period at snapshot time
    _put_at_name_time(mem_store, clock, almost)
    _manifest(mem_store, [])
    store = WrappedStore(mem_store)
    store.on_list = lambda prefix: clock.advance(3600)  # a very slow listing
    result = GarbageCollector(store, grace_period=600, clock=clock).run_once()
    assert result.deleted == () and result.kept_in_grace == 1
    assert result.snapshot_time_ms == clock.now_ms() - 3600 * 1000


def test_failed_deletes_are_counted_and_retried_next_cycle(mem_store: InMemoryStore, clock: ManualClock) -> None:
    a, b = _name(clock, 20 * MIN, 1), _name(clock, 20 * MIN, 2)
    for k in (a, b):
        _put_at_name_time(mem_store, clock, k)
    _manifest(mem_store, [])
    store = WrappedStore(mem_store)
    fail = {a}

    def on_delete(key: str) -> None:
        if key in fail:
            raise StoreError("503 (test)")

    store.on_delete = on_delete
    metrics = MetricsRegistry()
    gc = GarbageCollector(store, grace_period=600, clock=clock, metrics=metrics)
    first = gc.run_once()
    assert first.deleted == (b,) and first.failed == (a,)
    assert metrics.counter("buffer.gc_files_failed").value == 1
    fail.clear()
    assert gc.run_once().deleted == (a,)


def test_consumer_runs_gc_in_the_background(mem_store: InMemoryStore, clock: ManualClock) -> None:
    orphan = _name(clock, 20 * MIN, 1)
    _put_at_name_time(mem_store, clock, orphan)
    # Consumers other tests left open keep their own GC threads (GC runs by default): count ours.
    before = sum(t.name == "osqueue-gc" for t in threading.enumerate())
    c = Consumer(store=mem_store, gc_interval=0.02, clock=clock)
    assert c.garbage_collector is not None
    deadline = threading.Event()
    for _ in range(250):
        if mem_store.get(orphan) is None:
            break
        deadline.wait(0.02)
    assert mem_store.get(orphan) is None
    assert sum(t.name == "osqueue-gc" for t in threading.enumerate()) == before + 1
    c.close()
    assert sum(t.name == "osqueue-gc" for t in threading.enumerate()) == before


def test_stalled_producer_reuploads_gc_deletes_the_stale_file_and_consumer_reads_everything(
    mem_store: InMemoryStore, clock: ManualClock
) -> None:
    """A producer whose manifest write stalls past grace/2 enqueues a fresh copy of its batch;
    GC deletes the stale file (never referenced); the consumer reads every entry."""
    store = WrappedStore(mem_store)
    producer = Producer(
        store=store, flush_interval=3600, gc_grace_period=600, clock=clock, rng=random.Random(5),
        retry=RetryPolicy(base_delay=0.001, max_delay=0.001),
    )  # fmt: skip
    first_uploads: list[str] = []

    def on_put(key: str, data: bytes) -> None:
        first_uploads.append(key)
        if len(first_uploads) == 1:
            clock.advance(400)  # the producer stalls for 400 s (grace 600 s) after naming the batch

    store.on_put = on_put
    handle = producer.produce([b"r1", b"r2"], b"meta")
    producer.flush()
    durable = handle.wait_durable(0)
    assert len(first_uploads) == 2  # the original and the re-upload
    stale, fresh = first_uploads
    assert durable.location == fresh != stale
    assert mem_store.get(stale) is not None
    h2 = producer.produce([b"r3"])
    producer.close()

    clock.advance(600)
    # GC ages files against the head's store time: a later head write lets the stale file go.
    with Producer(store=mem_store, clock=clock) as later:
        h3 = later.produce([b"r4"])
    result = GarbageCollector(mem_store, grace_period=600, clock=clock).run_once()
    assert result.deleted == (stale,)
    with Consumer(store=mem_store) as consumer:
        batches = list(consumer)
        assert [b.location for b in batches] == [fresh, h2.wait_durable(0).location, h3.wait_durable(0).location]
        assert [r for b in batches for r in b.entries] == [b"r1", b"r2", b"r3", b"r4"]
        consumer.ack_through(batches[-1].sequence)
    assert encode_batch([b"r1", b"r2"]) == mem_store.get(fresh).data


def test_gc_races_producers_with_stalls_and_a_dequeuing_consumer_on_real_threads(tmp_path: Any) -> None:
    """Real time, real threads, a real local store: 3 producers whose uploads sometimes stall past
    half the grace period, a consumer that reads, acks and dequeues at once, its background GC and
    a second, independent GC looping as fast as it can. Nothing referenced is ever deleted (the
    consumer would raise BatchNotFoundError), every entry is delivered once, in each producer's
    order, and GC does delete (stale uploads and consumed batches)."""
    from osqueue.store import LocalFileSystemStore

    grace = 4.0  # slack for the manifest write after the age check: grace / 2 = 2 s
    inner = LocalFileSystemStore(tmp_path / "q")
    store = WrappedStore(inner)
    rng = random.Random(23)
    rng_lock = threading.Lock()
    stalls: list[str] = []

    def maybe_stall(key: str, data: bytes) -> None:
        with rng_lock:
            stall = key.endswith(".batch") and rng.random() < 0.25
            seconds = rng.uniform(grace / 2, grace * 0.8)
            if stall:
                stalls.append(key)
        if stall:
            threading.Event().wait(seconds)  # the batch is named (its ULID time) before this stall

    store.on_put = maybe_stall
    produced: dict[int, list[bytes]] = {}
    failures: list[BaseException] = []
    stop = threading.Event()

    def produce(p: int) -> None:
        try:
            with Producer(store=store, flush_interval=0.01, gc_grace_period=grace) as producer:
                values = [f"p{p}-{i}".encode() for i in range(60)]
                produced[p] = values
                handles = []
                for v in values:
                    handles.append(producer.produce([v]))
                    threading.Event().wait(0.01)
                for h in handles:
                    h.wait_durable(60)
        except BaseException as e:  # noqa: BLE001 - asserted below
            failures.append(e)

    delivered: list[bytes] = []
    batches_delivered: list[str] = []

    def consume() -> None:
        try:
            with Consumer(store=inner, run_gc=True, gc_interval=0.05, gc_grace_period=grace) as c:
                while True:
                    b = c.next_batch()
                    if b is None:
                        if stop.is_set():
                            return
                        threading.Event().wait(0.005)
                        continue
                    delivered.extend(b.entries)
                    batches_delivered.append(b.location)
                    c.ack(b.sequence)
                    c.flush()
        except BaseException as e:  # noqa: BLE001 - asserted below
            failures.append(e)

    deleted: list[str] = []

    def collect() -> None:
        gc = GarbageCollector(inner, grace_period=grace)
        try:
            while inner.get("ingest/manifest") is None and not stop.is_set():  # GC needs its manifest
                threading.Event().wait(0.005)
            while not stop.is_set():
                deleted.extend(gc.run_once().deleted)
        except BaseException as e:  # noqa: BLE001 - asserted below
            failures.append(e)

    producers = [threading.Thread(target=produce, args=(p,)) for p in range(3)]
    others = [threading.Thread(target=consume), threading.Thread(target=collect)]
    for t in producers + others:
        t.start()
    for t in producers:
        t.join(180)
    stop.set()
    for t in others:
        t.join(60)
    assert not any(t.is_alive() for t in producers + others), "a thread hung"
    assert not failures, failures
    assert sorted(delivered) == sorted(v for vs in produced.values() for v in vs), "lost or duplicated"
    for p, values in produced.items():
        assert [v for v in delivered if v.startswith(f"p{p}-".encode())] == values, f"producer {p} out of order"
    assert stalls, "no upload stalled"
    assert not set(stalls) & set(batches_delivered), "a stalled (stale) upload was enqueued instead of a fresh copy"
    assert store.put_calls >= len(batches_delivered) + len(stalls), "stalled uploads were not uploaded again"
    threading.Event().wait(grace)  # the queue's grace period applies even to a GC given 0 (§6)
    with Producer(store=inner, gc_grace_period=grace) as last:  # ages count against a head written since
        last.produce([b"last"]).result(30)
    final = GarbageCollector(inner, grace_period=0).run_once()
    assert deleted or final.deleted, "GC never deleted anything"


# -- attribution (docs/format.md §6) ---------------------------------------------------------------


def test_gc_deletes_nothing_when_its_manifest_is_missing(mem_store: InMemoryStore, clock: ManualClock) -> None:
    from osqueue.errors import IllegalQueueStateError

    referenced = [_name(clock, 30 * MIN, i) for i in range(3)]
    for k in referenced:
        _put_at_name_time(mem_store, clock, k)
    _manifest(mem_store, referenced)
    gc = GarbageCollector(mem_store, "wrong/manifest", "ingest", grace_period=0, clock=clock)
    with pytest.raises(IllegalQueueStateError, match="no manifest at 'wrong/manifest'"):
        gc.run_once()
    assert all(mem_store.get(k) is not None for k in referenced), "GC deleted the real queue's batches"


def test_two_queues_cannot_share_a_data_prefix(tmp_path: Any) -> None:
    """Queue b's producer is refused at open once queue a owns the prefix, so a's GC (which now
    deletes only under a prefix it owns) can never delete a batch of b's."""
    from osqueue.errors import InvalidConfigError

    path = str(tmp_path)
    with Producer(path, manifest_path="a/manifest") as pa:
        pa.produce([b"a0"]).result(30)
    with pytest.raises(InvalidConfigError, match="a/manifest") as err:
        Producer(path, manifest_path="b/manifest")
    assert err.value.option == "data_path_prefix"
    # A queue b written by an older osqueue into the same prefix: its GC is refused too, and a's batch stays.
    from osqueue.store import LocalFileSystemStore

    store = LocalFileSystemStore(tmp_path)
    store.put("b/manifest", encode_manifest(Manifest([], 0, 0)))
    a_batches = [k.key for k in store.list("ingest/") if k.key.endswith(".batch")]
    assert len(a_batches) == 1
    with pytest.raises(InvalidConfigError, match="holds the batches of the queue whose manifest is 'a/manifest'"):
        GarbageCollector(store, "b/manifest", "ingest", grace_period=0).run_once()
    assert store.get(a_batches[0]) is not None
    assert GarbageCollector(store, "a/manifest", "ingest", grace_period=0).run_once().kept_referenced == 1


# -- one grace period per queue (docs/format.md §6) ----------------------------------------------


def test_gc_uses_the_queues_grace_period_when_its_own_is_shorter(mem_store: InMemoryStore, clock: ManualClock) -> None:
    Producer(store=mem_store, clock=clock).close()  # claims the queue with the default 10 min
    _manifest(mem_store, [])
    in_flight = _name(clock, 2 * MIN, 1)  # uploaded, its manifest write still running
    _put_at_name_time(mem_store, clock, in_flight)
    result = GarbageCollector(mem_store, grace_period=1, clock=clock).run_once()
    assert result.deleted == () and result.kept_in_grace == 1 and result.grace_period_ms == 10 * MIN
    assert GarbageCollector(mem_store, grace_period=3600, clock=clock).run_once().grace_period_ms == 60 * MIN


def test_gc_claiming_a_queue_never_records_less_than_the_default(mem_store: InMemoryStore, clock: ManualClock) -> None:
    from osqueue.queue import claim_data_prefix

    _manifest(mem_store, [])
    GarbageCollector(mem_store, grace_period=0, clock=clock).run_once()
    owner = claim_data_prefix(mem_store, KEY, "ingest")
    assert owner is not None and owner.gc_grace_period_ms == 10 * MIN


def test_a_producer_told_a_longer_grace_period_reuploads_by_the_queues(
    mem_store: InMemoryStore, clock: ManualClock
) -> None:
    from osqueue.queue import QueueProducer

    Producer(store=mem_store, clock=clock).close()  # the queue's: 10 min
    six_minutes_old = _name(clock, 6 * MIN, 1)
    _put_at_name_time(mem_store, clock, six_minutes_old)
    fresh = _name(clock, 0, 2)

    def reupload() -> str:
        _put_at_name_time(mem_store, clock, fresh)
        return fresh

    with QueueProducer(mem_store, KEY, clock=clock) as qp:
        result = qp.enqueue_async(six_minutes_old, reupload=reupload, max_age_ms=10 * MIN).result(30)  # told 20 min
    assert result.location == fresh, "a batch older than half the queue's grace period was enqueued"


def test_a_consumer_without_gc_starts_no_collector(mem_store: InMemoryStore, clock: ManualClock) -> None:
    before = sum(t.name == "osqueue-gc" for t in threading.enumerate())
    with Consumer(store=mem_store, run_gc=False, clock=clock) as c:
        assert c.garbage_collector is None
        assert sum(t.name == "osqueue-gc" for t in threading.enumerate()) == before


# -- clock skew: ages come from the store's clock only (docs/format.md §6) -------------------------


def _skewed_queue(behind_ms: int, entries: int) -> tuple[InMemoryStore, ManualClock, ManualClock, QueueProducer]:
    """A store whose clock GC shares, and a producer (K = 2) whose clock is ``behind_ms`` behind it,
    which has enqueued ``entries`` batches (named by its clock)."""
    store_clock = ManualClock()
    store = InMemoryStore(f"skew-{random.random()}", store_clock)
    behind = ManualClock(store_clock.now_ms() - behind_ms)
    qp = producer(store, 2, clock=behind)
    _manifest(store, [])
    for _ in range(entries):
        qp.enqueue(upload(store, behind), timeout=30)
    return store, store_clock, behind, qp


def _after_head_read(store: InMemoryStore, action: Callable[[], None]) -> WrappedStore:
    """``store`` for GC: ``action`` runs once, right after GC's first GET of the manifest."""
    wrapped = WrappedStore(store)
    fired: list[bool] = []

    def get(key: str) -> VersionedObject | None:
        obj = store.get(key)
        if key == KEY and not fired:
            fired.append(True)
            action()
        return obj

    wrapped.get = get  # type: ignore[method-assign]
    return wrapped


def test_a_segment_sealed_by_a_producer_11_minutes_behind_after_gc_read_the_head_is_kept() -> None:
    # Issue 24: GC reads H0; the producer seals the tail into S and CASes H1; GC lists S, which H0
    # does not reach and whose name looks 11 minutes old.
    store, store_clock, behind, qp = _skewed_queue(11 * MIN, 2)
    gc_store = _after_head_read(store, lambda: qp.enqueue(upload(store, behind), timeout=30))
    GarbageCollector(gc_store, grace_period=600, clock=store_clock).run_once()
    qp.close()
    assert len(head(store).refs) == 1, "the third append sealed the tail"
    assert all(store.get(r.key) is not None for r in head(store).refs), "GC deleted a segment the head lists"
    assert len(all_locations(store)) == 3


def test_a_segment_whose_slow_put_ran_across_a_gc_cycle_is_kept_with_a_producer_6_minutes_behind() -> None:
    # The seal's PUT takes 4.5 min (under grace / 2, so the producer keeps its name), GC runs meanwhile.
    store, store_clock, behind, qp = _skewed_queue(6 * MIN, 2)
    slow = WrappedStore(store)
    cycles: list[GcResult] = []

    def slow_put(key: str, data: bytes) -> None:
        store.put(key, data)
        if key.endswith(".segment") and not cycles:
            store_clock.advance(270)
            behind.advance(270)
            cycles.append(GarbageCollector(store, grace_period=600, clock=store_clock).run_once())

    slow.put = slow_put  # type: ignore[method-assign]
    qp.close()
    qp = producer(slow, 2, clock=behind)
    qp.enqueue(upload(store, behind), timeout=30)
    qp.close()
    assert cycles and cycles[0].deleted == ()
    assert all(store.get(r.key) is not None for r in head(store).refs), "GC deleted a segment the head lists"
    assert len(all_locations(store)) == 3


def test_a_batch_enqueued_on_an_empty_queue_after_gc_read_the_head_is_kept() -> None:
    store, store_clock, behind, qp = _skewed_queue(11 * MIN, 0)
    enqueued: list[str] = []

    def enqueue() -> None:
        enqueued.append(qp.enqueue(upload(store, behind), timeout=30).location)

    result = GarbageCollector(_after_head_read(store, enqueue), grace_period=600, clock=store_clock).run_once()
    qp.close()
    assert enqueued and result.deleted == ()
    assert all_locations(store) == enqueued and store.get(enqueued[0]) is not None, "GC deleted an enqueued batch"


def test_an_old_orphan_is_kept_until_a_head_is_written_a_grace_period_after_it() -> None:
    # Idle queue: the store's time advances only through writes GC sees (the head's).
    store, store_clock, behind, qp = _skewed_queue(0, 1)
    orphan = upload(store, ManualClock(store_clock.now_ms() - MIN))  # older than the oldest entry by name
    store_clock.advance(3600)
    behind.advance(3600)
    gc = GarbageCollector(store, grace_period=600, clock=store_clock)
    assert gc.run_once().deleted == ()
    qp.enqueue(upload(store, behind), timeout=30)
    qp.close()
    assert gc.run_once().deleted == (orphan,)


def test_a_batch_whose_put_started_half_a_grace_period_ago_is_uploaded_again_whatever_its_name_says(
    mem_store: InMemoryStore, clock: ManualClock
) -> None:
    # The PUT takes 6 min by the producer's monotonic clock while its wall clock is stepped back: the
    # name looks fresh, but GC ages the file by the store's clock, so it must not be enqueued.
    store = WrappedStore(mem_store)
    uploads: list[str] = []

    def on_put(key: str, data: bytes) -> None:
        if key.endswith(".batch"):
            uploads.append(key)
            if len(uploads) == 1:
                clock.advance_monotonic(360)

    store.on_put = on_put
    with Producer(store=store, flush_interval=3600, gc_grace_period=600, clock=clock, rng=random.Random(5)) as p:
        handle = p.produce([b"r"])
        p.flush()
        durable = handle.wait_durable(0)
    assert len(uploads) == 2 and durable.location == uploads[1], "a batch older than grace / 2 was enqueued"
