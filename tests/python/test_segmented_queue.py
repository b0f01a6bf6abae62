"""Queues past K entries in Python (docs/format.md §2.2), as the JVM's SegmentedQueueSuite: producers
seal, consumers read lazily and exactly, crashes between the segment write and the head CAS leave
only orphans, GC knows segments."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import ManualClock, WrappedStore
from segmented_queue_helpers import FAST, GRACE_MS, KEY, recording_gets
from segmented_queue_helpers import all_locations as _all_locations
from segmented_queue_helpers import head as _head
from segmented_queue_helpers import leaves as _leaves
from segmented_queue_helpers import producer as _producer
from segmented_queue_helpers import upload as _upload

from osqueue.consumer import Consumer
from osqueue.errors import (
    AmbiguousCommitError,
    CorruptManifestError,
    FencedError,
    InvalidConfigError,
    StoreError,
)
from osqueue.format.segment_names import prefix as segment_prefix
from osqueue.gc import GarbageCollector
from osqueue.producer import Producer
from osqueue.queue import ManifestStore, QueueProducer, RetryPolicy
from osqueue.store import InMemoryStore, ObjectStore


def _consumer(store: ObjectStore, last_acked: int | None = None, incarnation: int | None = None) -> Consumer:
    return Consumer(store=store, run_gc=False, retry=FAST, last_acked_sequence=last_acked, incarnation=incarnation)


def _drain(c: Consumer) -> list[str]:
    out: list[str] = []
    ds = c.next_descriptors(1000)
    while ds:
        out += [d.location for d in ds]
        c.ack_through(ds[-1].sequence)
        ds = c.next_descriptors(1000)
    return out


@pytest.mark.parametrize("seed", range(1, 21))
def test_random_appends_reads_acks_and_restarts_with_a_small_k_deliver_exactly_what_was_produced(seed: int) -> None:
    rnd = random.Random(seed)
    k = 1 + rnd.randrange(4)
    store = InMemoryStore(f"seg-{seed}")
    produced: list[str] = []
    delivered: list[str] = []  # acked prefix + handed out since
    acked = 0
    c = _consumer(store)
    handed_out: int | None = None
    with _producer(store, k) as producer:
        for _ in range(120):
            op = rnd.randrange(10)
            if op <= 3:
                group = [_upload(store) for _ in range(1 + rnd.randrange(3))]
                futures = [producer.enqueue_async(loc) for loc in group]
                for f in futures:
                    f.result(30)
                produced += group
                assert _head(store).tail_size <= k + 3, f"seed {seed}: tail past K = {k}"
            elif op <= 6:
                ds = c.next_descriptors(1 + rnd.randrange(5))
                delivered += [d.location for d in ds]
                if ds:
                    handed_out = ds[-1].sequence
            elif op == 7:
                # sequences start at 0 and each location is appended once: the next to ack is `acked`
                if len(delivered) > acked:
                    c.ack(acked)
                    acked += 1
            elif op == 8:
                if handed_out is not None and len(delivered) > acked:
                    c.ack_through(handed_out)
                    acked = len(delivered)
            else:
                # A restart: close() dequeues what was acked; the rest is delivered again.
                c.close()
                incarnation = c.incarnation
                last_acked = None if acked == 0 else acked - 1
                c = _consumer(store, last_acked, None if last_acked is None else incarnation)
                del delivered[acked:]
                handed_out = last_acked
    delivered += _drain(c)
    assert delivered == produced, f"seed {seed}, K = {k}"
    c.close()
    head = _head(store)
    assert head.depth == 0 and not head.is_segmented, "a drained queue's head is v1"


def test_a_consumer_holds_one_segment_at_a_time_and_a_dequeue_drops_it() -> None:
    store = InMemoryStore("one-at-a-time")
    with _producer(store, 3) as producer:
        produced = [producer.enqueue(_upload(store), timeout=30).location for _ in range(20)]
    assert len(_leaves(store)) == 6 and len(_head(store).refs) < 6, "sealed, and folded"
    c = _consumer(store)
    first = c.next_descriptors(1000)
    assert len(first) == 3, "only the first segment was read"
    c.ack_through(first[-1].sequence)
    assert len(_leaves(store)) == 5, "the dequeue dropped the consumed segment"
    assert [d.location for d in first] + _drain(c) == produced
    c.close()


def test_a_crash_between_the_segment_write_and_the_head_cas_leaves_an_orphan_gc_removes() -> None:
    clock = ManualClock(1_767_225_600_000)
    inner = InMemoryStore("crash", clock)
    store = WrappedStore(inner)
    writes = [0]

    def fail_the_sealing_write(key, data, expected, apply):  # type: ignore[no-untyped-def]
        writes[0] += 1
        if writes[0] == 3:  # K = 2: the third manifest write seals; it never reaches the store
            raise StoreError("connection reset before the request was sent (test)")
        return apply()

    store.on_conditional = fail_the_sealing_write
    first = [_upload(inner, clock) for _ in range(2)]
    third = _upload(inner, clock)
    with _producer(
        store, 2, clock=clock, retry=RetryPolicy(base_delay=0.001, max_delay=0.001, max_attempts=1)
    ) as dying:
        for loc in first:
            dying.enqueue(loc, timeout=30)
        with pytest.raises(AmbiguousCommitError):  # the producer gives up ("crashes")
            dying.enqueue(third, timeout=30)
    orphans = [i.key for i in inner.list(segment_prefix(KEY))]
    assert len(orphans) == 1 and not _head(inner).is_segmented, "the segment was written, no head lists it"
    with _producer(inner, 2, clock=clock) as again:  # a new producer appends the third batch again: it seals anew
        again.enqueue(third, timeout=30)
    listed = [r.key for r in _head(inner).refs]
    assert len(listed) == 1 and listed != orphans
    assert _all_locations(inner) == [*first, third]
    clock.advance(GRACE_MS / 1000 + 1)
    fourth = _upload(inner, clock)
    with _producer(inner, 2, clock=clock) as later:  # GC ages files against a head written since
        later.enqueue(fourth, timeout=30)
    result = GarbageCollector(inner, KEY, "ingest", grace_period=GRACE_MS / 1000, clock=clock).run_once()
    assert set(result.deleted) == set(orphans)
    assert [i.key for i in inner.list(segment_prefix(KEY))] == listed
    assert _all_locations(inner) == [*first, third, fourth]


def test_a_lost_reply_whose_write_was_sealed_before_the_re_read_is_found_in_the_segment() -> None:
    inner = InMemoryStore("lost-reply")
    store = WrappedStore(inner)
    armed = [False]
    other = _producer(inner, 2)

    def lose_reply_after_others_seal(key, data, expected, apply):  # type: ignore[no-untyped-def]
        outcome = apply()
        if armed[0] and key == KEY:
            armed[0] = False
            for _ in range(3):  # another producer appends enough to seal our write into a segment
                other.enqueue(_upload(inner), timeout=30)
            raise StoreError("injected: reply lost")
        return outcome

    store.on_conditional = lose_reply_after_others_seal
    with _producer(store, 2) as a:
        a.enqueue(_upload(inner), timeout=30)
        mine = _upload(inner)
        armed[0] = True
        result = a.enqueue(mine, timeout=30)
    other.close()
    assert result.sequence == 1
    assert _head(inner).tail_location_at(1) is None, "the write was sealed into a segment before the re-read"
    everything = _all_locations(inner)
    assert everything.count(mine) == 1 and len(everything) == 5 and everything[1] == mine


def test_gc_keeps_batches_referenced_only_from_segments_and_reads_no_segment_only_index_objects() -> None:
    t0 = 1_767_225_600_000
    clock = ManualClock(t0 - 3_600_000)  # the store's: the orphan is written an hour before the queue
    inner = InMemoryStore("gc-segments", clock)
    orphan_batch = _upload(inner, ManualClock(t0 - 1000))
    clock.advance(3600)
    queued = []
    with _producer(inner, 2, clock=clock) as producer:
        for i in range(7):
            loc = _upload(inner, ManualClock(t0 + i * 1000))
            producer.enqueue(loc, timeout=30)
            queued.append(loc)
    assert len(_leaves(inner)) == 3 and [r.level for r in _head(inner).refs] == [0, 1]
    clock.advance(3600)
    store = WrappedStore(inner)
    real_get = inner.get

    def no_segment_reads(key: str):  # type: ignore[no-untyped-def]
        if key.endswith(".segment"):
            raise StoreError("no segment reads (test)")
        return real_get(key)

    store.get = no_segment_reads  # type: ignore[method-assign]
    result = GarbageCollector(store, KEY, "ingest", grace_period=GRACE_MS / 1000, clock=clock).run_once()
    assert result.deleted == (orphan_batch,)
    assert all(inner.get(loc) is not None for loc in queued)
    # the tail's batch, the 3 reachable segments and the index; the 6 sealed batches kept as newer than the oldest
    assert result.kept_referenced == 1 + 3 + 1 and result.kept_newer_than_oldest == 6


def test_concurrent_producers_sealing_under_contention_leave_every_location_exactly_once() -> None:
    store = InMemoryStore("contention")

    def one_producer(i: int) -> list[str]:
        # a store object of its own: its own group committer, so the producers really contend
        wrapped = WrappedStore(store)
        with _producer(wrapped, 3) as q:
            return [q.enqueue(_upload(store), timeout=60).location for _ in range(25)]

    with ThreadPoolExecutor(4) as pool:
        expected = {loc for locs in pool.map(one_producer, range(4)) for loc in locs}
    everything = _all_locations(store)
    assert len(everything) == 100 and set(everything) == expected
    assert _head(store).is_segmented and _head(store).tail_size <= 3 + 1
    c = _consumer(store)
    assert set(_drain(c)) == expected
    c.close()


def test_a_listed_segment_that_is_missing_is_corrupt_for_every_reader() -> None:
    store = InMemoryStore("missing")
    with _producer(store, 2) as producer:
        for _ in range(7):
            producer.enqueue(_upload(store), timeout=30)
    lost = _leaves(store)[1]
    store.delete(lost.key)
    ms = ManifestStore(store, KEY)
    with pytest.raises(CorruptManifestError, match="listed but missing") as full:
        ms.decode(ms.read_raw()[0])
    assert lost.key in str(full.value)
    c = _consumer(store)
    assert [d.sequence for d in c.next_descriptors(10)] == [0, 1]  # the first segment is there
    with pytest.raises(CorruptManifestError) as info:
        c.next_descriptors(10)
    assert lost.key in str(info.value)
    c.close()


def test_a_fenced_consumer_cannot_dequeue_a_segment_nor_read_the_next_one() -> None:
    store = InMemoryStore("fenced")
    with _producer(store, 2) as producer:
        for _ in range(9):
            producer.enqueue(_upload(store), timeout=30)
    a = _consumer(store)
    read = a.next_descriptors(10)
    b = _consumer(store)
    before = store.get(KEY)
    assert before is not None
    with pytest.raises(FencedError):
        a.ack_through(read[-1].sequence)
    with pytest.raises(FencedError):
        a.next_descriptors(10)
    after = store.get(KEY)
    assert after is not None and after.data == before.data, "nothing the fenced consumer did landed"
    assert len(_drain(b)) == 9
    b.close()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2048", 1 << 31])
def test_manifest_segment_entries_is_validated_naming_the_option(bad: object) -> None:
    with pytest.raises(InvalidConfigError, match="manifest_segment_entries"):
        QueueProducer(InMemoryStore("v"), KEY, manifest_segment_entries=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="manifest_segment_entries"):
        Producer(store=InMemoryStore("v"), manifest_segment_entries=bad)  # type: ignore[arg-type]


def test_the_producer_option_seals_through_the_whole_client() -> None:
    store = InMemoryStore("client")
    with Producer(store=store, manifest_segment_entries=2, flush_interval=0) as producer:
        for i in range(7):
            producer.produce([f"r{i}".encode()]).result(30)
    assert len(_leaves(store)) >= 2
    c = _consumer(store)
    values = []
    for batch in c:
        values += [e.decode() for e in batch.entries]
        c.ack(batch.sequence)
    assert values == [f"r{i}" for i in range(7)]
    c.close()


def test_two_producers_past_k_on_s3_deliver_every_entry_once_and_gc_removes_dropped_segments(
    s3_store: ObjectStore,
) -> None:
    """The JVM's SegmentedS3Suite in Python, on the S3 test server: two producers (separate store
    objects, so separate group committers) seal concurrently with K = 3; the consumer reads each
    producer's entries once and in order; dropped segments are orphans, which GC ages by S3's LastModified:
    a GC host whose clock is a grace period ahead deletes none of them."""

    def produce(tag: str) -> list[str]:
        with _producer(WrappedStore(s3_store), 3) as q:
            return [q.enqueue(f"ingest/{tag}-{i:03d}", timeout=60).location for i in range(15)]

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(produce, ["a", "b"])
    assert len(_leaves(s3_store)) >= 4
    assert any(r.level > 0 for r in _head(s3_store).refs), "K = 3, F = 2: segments were folded into index objects"
    c = _consumer(s3_store)
    delivered = _drain(c)
    c.close()
    assert sorted(delivered) == sorted(a + b)
    assert [x for x in delivered if "/a-" in x] == a and [x for x in delivered if "/b-" in x] == b
    written = [i.key for i in s3_store.list(segment_prefix(KEY))]
    assert written and not _head(s3_store).refs, "drained: every segment dropped, the head v1 again"
    clock = ManualClock(int(time.time() * 1000))
    clock.advance(GRACE_MS / 1000 + 1)  # the GC host's clock plays no part
    result = GarbageCollector(s3_store, KEY, "ingest", grace_period=GRACE_MS / 1000, clock=clock).run_once()
    assert result.deleted == () and result.kept_in_grace >= len(written)
    assert {i.key for i in s3_store.list(segment_prefix(KEY))} == set(written)


def test_flush_with_nothing_acked_checks_the_epoch_from_the_head_alone() -> None:
    inner = InMemoryStore("flush")
    with _producer(inner, 2) as producer:
        for _ in range(9):
            producer.enqueue(_upload(inner), timeout=30)
    store, read = recording_gets(inner)
    c = _consumer(store)
    read.clear()
    c.flush()
    assert read == [KEY], "no segment is read to check the epoch"
    c.close()


def test_a_lost_reply_whose_segment_vanished_while_resolving_is_ambiguous_never_appended_again() -> None:
    """The race of docs/format.md §2.2 step 4: the write landed, was sealed into a segment, and that
    segment is gone when the producer looks (a dequeue dropped it and GC collected it since the head was
    read). Its sequences count as dequeued: with no receipt for them the outcome is AmbiguousCommit,
    not "lost" (which would append the batch a second time)."""
    inner = InMemoryStore("vanished")
    store = WrappedStore(inner)
    armed = [False]
    other = _producer(inner, 2)

    def seal_then_vanish(key, data, expected, apply):  # type: ignore[no-untyped-def]
        outcome = apply()
        if armed[0] and key == KEY:
            armed[0] = False
            for _ in range(3):  # seals our write (sequence 1) into the first segment
                other.enqueue(_upload(inner), timeout=30)
            inner.delete(_head(inner).refs[0].key)
            raise StoreError("injected: reply lost")
        return outcome

    store.on_conditional = seal_then_vanish
    retry = RetryPolicy(base_delay=0.001, max_delay=0.002, max_attempts=3)
    with _producer(store, 2, retry=retry) as a:
        a.enqueue(_upload(inner), timeout=30)
        mine = _upload(inner)
        armed[0] = True
        with pytest.raises(AmbiguousCommitError):
            a.enqueue(mine, timeout=30)
    other.close()
    head = _head(inner)
    assert all(loc != mine for _, loc in head.tail_locations()), "appended a second time"
    assert head.next_sequence == 5, "nothing appended after the resolution"
