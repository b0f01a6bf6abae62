"""The Consumer: serial and read-ahead paths, acks, fencing, resume points, bad batches."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from helpers import WrappedStore

from osqueue.consumer import ACK_DEQUEUE_INTERVAL, Consumer
from osqueue.errors import (
    BatchNotFoundError,
    CorruptBatchError,
    FencedError,
    IllegalQueueStateError,
    InvalidConfigError,
    InvalidObjectKeyError,
    ResumePointError,
)
from osqueue.format import (
    EntryTag,
    Manifest,
    ManifestEntry,
    MetadataItem,
    decode_manifest,
    encode_batch,
    encode_manifest,
)
from osqueue.metrics import DUPLICATE_COPIES_SKIPPED, MetricsRegistry
from osqueue.queue import QueueProducer
from osqueue.store import InMemoryStore

KEY = "ingest/manifest"


def _fill(store: Any, n: int, records_per_batch: int = 2) -> list[str]:
    """Uploads n batches and enqueues them in one manifest write."""
    qp = QueueProducer(store, KEY)
    futures = []
    locations = []
    for i in range(n):
        loc = f"ingest/b{i:04d}.batch"
        store.put(loc, encode_batch([f"{i}-{j}".encode() for j in range(records_per_batch)]))
        futures.append(qp.enqueue_async(loc, [MetadataItem(0, 1000 + i, f"m{i}".encode())]))
        locations.append(loc)
    for f in futures:
        f.result(30)
    qp.close()
    return locations


def _sequences(store: Any) -> list[int]:
    return [e.sequence for e in decode_manifest(store.get(KEY).data, KEY).entries]


def test_next_batch_reads_in_order_and_returns_none_when_drained(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 3)
    with Consumer(store=mem_store) as c:
        b0 = c.next_batch()
        assert b0 is not None
        assert (b0.sequence, b0.location, b0.entries) == (0, "ingest/b0000.batch", [b"0-0", b"0-1"])
        assert b0.metadata == [MetadataItem(0, 1000, b"m0")] and b0.metadata_for(1) == b0.metadata[0]
        assert [b.sequence for b in c] == [1, 2]  # iteration continues after the last handed out
        assert c.next_batch() is None
        c.ack(0)
        c.ack(1)
    assert _sequences(mem_store) == [2]  # close() dequeued what was acked


def test_empty_queue(mem_store: InMemoryStore) -> None:
    with Consumer(store=mem_store) as c:
        assert c.next_batch() is None
        assert c.next_descriptors(5) == []
        assert c.epoch & 0xFFFFFFFF == 1 and c.epoch >> 32 == c.incarnation


def test_acks_must_be_in_order_and_handed_out(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 3)
    with Consumer(store=mem_store) as c:
        with pytest.raises(IllegalQueueStateError, match="not handed out"):
            c.ack(0)
        c.next_batch()
        c.next_batch()
        with pytest.raises(IllegalQueueStateError, match="out-of-order"):
            c.ack(1)
        c.ack(0)
        with pytest.raises(IllegalQueueStateError, match="out-of-order"):
            c.ack(0)
        c.ack(1)
        with pytest.raises(IllegalQueueStateError, match="not handed out"):
            c.ack(2)
        assert c.last_acked_sequence == 1


def test_ack_dequeues_every_100_acks(mem_store: InMemoryStore) -> None:
    _fill(mem_store, ACK_DEQUEUE_INTERVAL + 5)
    store = WrappedStore(mem_store)
    c = Consumer(store=store)
    writes = store.conditional_calls
    c.next_descriptors(1000)
    for s in range(ACK_DEQUEUE_INTERVAL - 1):
        c.ack(s)
    assert store.conditional_calls == writes and len(_sequences(mem_store)) == ACK_DEQUEUE_INTERVAL + 5
    c.ack(ACK_DEQUEUE_INTERVAL - 1)
    assert store.conditional_calls == writes + 1
    assert _sequences(mem_store)[0] == ACK_DEQUEUE_INTERVAL
    c.ack(ACK_DEQUEUE_INTERVAL)
    c.flush()
    assert _sequences(mem_store)[0] == ACK_DEQUEUE_INTERVAL + 1
    c.close()


def test_ack_through_moves_the_frontier_in_one_write(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 6)
    store = WrappedStore(mem_store)
    metrics = MetricsRegistry()
    c = Consumer(store=store, metrics=metrics)
    assert [d.sequence for d in c.next_descriptors(4)] == [0, 1, 2, 3]
    writes = store.conditional_calls
    c.ack_through(3)
    assert store.conditional_calls == writes + 1 and _sequences(mem_store) == [4, 5]
    assert metrics.counter("buffer.acks").value == 4
    with pytest.raises(IllegalQueueStateError, match="non-monotonic"):
        c.ack_through(3)
    with pytest.raises(IllegalQueueStateError, match="not handed out"):
        c.ack_through(5)
    assert c.last_acked_sequence == 3
    b = c.next_batch()
    assert b is not None and b.sequence == 4  # acked entries are not handed out again
    c.ack(4)
    c.close()


def test_read_ahead_descriptors_and_concurrent_fetch(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 10)
    store = WrappedStore(mem_store)
    c = Consumer(store=store)
    reads = store.get_calls
    assert c.next_descriptors(0) == [] and store.get_calls == reads  # no manifest read
    first = c.next_descriptors(4)
    second = c.next_descriptors(100)
    assert [d.sequence for d in first] == [0, 1, 2, 3]
    assert [d.sequence for d in second] == list(range(4, 10))  # never handed out twice
    assert c.next_descriptors(5) == [] and c.next_batch() is None
    handle = c.fetch_handle()
    results: dict[int, list[bytes]] = {}
    errors: list[BaseException] = []

    def fetch(ds: list[Any]) -> None:
        try:
            for d in ds:
                results[d.sequence] = handle.fetch(d).entries
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    all_ds = first + second
    ts = [threading.Thread(target=fetch, args=(all_ds[i::4],)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert results == {i: [f"{i}-0".encode(), f"{i}-1".encode()] for i in range(10)}
    c.ack_through(9)
    assert _sequences(mem_store) == []
    c.close()


def test_missing_batch_raises_and_does_not_move_the_cursor(mem_store: InMemoryStore) -> None:
    locations = _fill(mem_store, 2)
    data = mem_store.get(locations[0]).data
    mem_store.delete(locations[0])
    with Consumer(store=mem_store) as c:
        with pytest.raises(BatchNotFoundError) as info:
            c.next_batch()
        assert info.value.key == locations[0] and info.value.sequence == 0
        mem_store.put(locations[0], data)
        b = c.next_batch()
        assert b is not None and b.sequence == 0


def test_corrupt_batch_raises_naming_the_key_and_is_never_skipped(mem_store: InMemoryStore) -> None:
    locations = _fill(mem_store, 2)
    mem_store.put(locations[0], b"\x09\x00\x00\x00abc" + bytes([0, 1, 0, 0, 0, 1, 0]))  # record past the block
    with Consumer(store=mem_store) as c:
        for _ in range(2):
            with pytest.raises(CorruptBatchError) as info:
                c.next_batch()
            assert info.value.key == locations[0] and locations[0] in str(info.value)
        with pytest.raises(CorruptBatchError):
            c.fetch_handle().fetch(c.next_descriptors(1)[0])


def test_manifest_location_outside_the_root_is_an_invalid_key_naming_it(mem_store: InMemoryStore) -> None:
    mem_store.put(KEY, encode_manifest(Manifest([ManifestEntry(0, "../../etc/passwd", [])], 1, 0)))
    with Consumer(store=mem_store) as c:
        with pytest.raises(InvalidObjectKeyError, match=r"\.\./\.\./etc/passwd") as info:
            c.next_batch()
        assert info.value.key == "../../etc/passwd"


def test_resume_from_last_acked(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 5)
    with Consumer(store=mem_store, last_acked_sequence=2) as c:
        assert _sequences(mem_store) == [3, 4]
        with pytest.raises(IllegalQueueStateError, match="out-of-order"):
            c.ack(2)
        b = c.next_batch()
        assert b is not None and b.sequence == 3
        c.ack(3)


@pytest.mark.parametrize("last_acked,match", [(5, "ahead"), (17, "ahead")])
def test_resume_point_ahead(mem_store: InMemoryStore, last_acked: int, match: str) -> None:
    _fill(mem_store, 5)
    with pytest.raises(ResumePointError, match=match):
        Consumer(store=mem_store, last_acked_sequence=last_acked)


def test_resume_point_behind(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 5)
    with Consumer(store=mem_store) as c:
        c.next_descriptors(4)
        c.ack_through(3)
    with pytest.raises(ResumePointError, match="removed"):
        Consumer(store=mem_store, last_acked_sequence=1)
    with Consumer(store=mem_store, last_acked_sequence=3) as c:  # exactly the frontier is fine
        assert c.next_batch().sequence == 4  # type: ignore[union-attr]


def test_old_consumer_is_fenced_on_every_operation_and_writes_nothing(mem_store: InMemoryStore) -> None:
    _fill(mem_store, ACK_DEQUEUE_INTERVAL + 3)
    old = Consumer(store=mem_store)
    old.next_descriptors(ACK_DEQUEUE_INTERVAL + 3)
    for s in range(ACK_DEQUEUE_INTERVAL - 1):
        old.ack(s)
    new = Consumer(store=mem_store)
    assert new.epoch == old.epoch + 1
    before = mem_store.get(KEY).data
    with pytest.raises(FencedError) as info:
        old.ack(ACK_DEQUEUE_INTERVAL - 1)  # the 100th ack's dequeue finds the fence
    assert (info.value.own_epoch, info.value.current_epoch) == (old.epoch, old.epoch + 1)
    for op in (
        old.next_batch,
        lambda: old.ack(ACK_DEQUEUE_INTERVAL),
        lambda: old.ack_through(50),
        old.flush,
        lambda: old.next_descriptors(1),
    ):
        with pytest.raises(FencedError):
            op()
    assert mem_store.get(KEY).data == before  # no write from the old consumer landed
    old.close()  # does not try to dequeue once fenced
    assert mem_store.get(KEY).data == before
    b = new.next_batch()
    assert b is not None and b.sequence == 0  # the new consumer starts from the first unacked entry
    new.close()


def test_fenced_serial_consumer_learns_at_its_next_manifest_read(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 3)
    old = Consumer(store=mem_store)
    assert old.next_batch().sequence == 0  # type: ignore[union-attr]
    Consumer(store=mem_store).close()
    # Entries it already read are handed out without a manifest read (docs/format.md §5); reading is
    # harmless, and the next manifest read (its buffer is empty now) finds the fence.
    assert [old.next_batch().sequence for _ in range(2)] == [1, 2]  # type: ignore[union-attr]
    with pytest.raises(FencedError):
        old.next_batch()
    with pytest.raises(FencedError):
        old.ack(0)


def test_ack_through_on_a_fenced_consumer_leaves_its_state_unchanged(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 4)
    old = Consumer(store=mem_store)
    old.next_descriptors(4)
    old.ack(0)
    Consumer(store=mem_store).close()
    with pytest.raises(FencedError):
        old.ack_through(2)
    assert old.last_acked_sequence == 0
    assert _sequences(mem_store) == [0, 1, 2, 3]


def test_flush_checks_the_epoch_even_with_nothing_to_dequeue(mem_store: InMemoryStore) -> None:
    old = Consumer(store=mem_store)
    Consumer(store=mem_store)
    with pytest.raises(FencedError):
        old.flush()


def test_closed_consumer_rejects_calls(mem_store: InMemoryStore) -> None:
    c = Consumer(store=mem_store)
    c.close()
    c.close()
    with pytest.raises(IllegalQueueStateError, match="closed"):
        c.next_batch()


@pytest.mark.parametrize("bad", [dict(last_acked_sequence=-1), dict(gc_interval=0), dict(manifest_path="a//b")])
def test_invalid_options(mem_store: InMemoryStore, bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        Consumer(store=mem_store, **bad)


def test_consumer_metrics(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 2)
    metrics = MetricsRegistry()
    with Consumer(store=mem_store, metrics=metrics) as c:
        for b in c:
            c.ack(b.sequence)
    assert metrics.counter("buffer.batches_collected").value == 2
    assert metrics.counter("buffer.entries_collected").value == 4
    assert metrics.counter("buffer.acks").value == 2
    assert metrics.gauge("buffer.queue_length").value == 2  # at the last read (acks not dequeued yet)
    assert metrics.gauge("buffer.consumer_lag_seconds").value > 0


def _sink_queue(store: Any) -> None:
    """Sequences 0..4: writer w1 batch 0 attempt a1 (two entries), an untagged entry, a replayed
    copy of w1 batch 0 (attempt a2), w1 batch 1; tags written by :meth:`EntryTag.encode`."""
    tags = [EntryTag("w1", 0, "a1"), EntryTag("w1", 0, "a1"), None, EntryTag("w1", 0, "a2"), EntryTag("w1", 1, "a3")]
    entries = []
    for i, tag in enumerate(tags):
        loc = f"ingest/s{i}.batch"
        store.put(loc, encode_batch([f"s{i}".encode()]))
        entries.append(ManifestEntry(i, loc, [MetadataItem(0, 1000 + i, b"")], tag.encode() if tag else b""))
    store.put(KEY, encode_manifest(Manifest(entries, 5, 0)))


def test_replayed_sink_copy_is_skipped_and_counts_as_acked(mem_store: InMemoryStore) -> None:
    _sink_queue(mem_store)
    metrics = MetricsRegistry()
    with Consumer(store=mem_store, metrics=metrics) as c:
        batches = list(c)
        assert [(b.sequence, b.entries) for b in batches] == [(0, [b"s0"]), (1, [b"s1"]), (2, [b"s2"]), (4, [b"s4"])]
        assert metrics.counter(DUPLICATE_COPIES_SKIPPED).value == 1
        c.ack(0)
        c.ack(1)
        c.ack(2)
        assert c.last_acked_sequence == 3  # the frontier moved over the skipped copy
        with pytest.raises(IllegalQueueStateError, match="out-of-order"):
            c.ack(3)
        c.ack(4)
        assert c.next_batch() is None
    assert _sequences(mem_store) == []
    assert metrics.counter(DUPLICATE_COPIES_SKIPPED).value == 1  # counted once


def test_acking_each_batch_as_read_passes_the_skipped_copy(mem_store: InMemoryStore) -> None:
    _sink_queue(mem_store)
    with Consumer(store=mem_store) as c:
        seen = []
        while (b := c.next_batch()) is not None:
            seen.append(b.sequence)
            c.ack(b.sequence)  # 3 is read (and skipped) after 2 was acked
        assert seen == [0, 1, 2, 4]
        c.flush()
    assert _sequences(mem_store) == []


def test_read_ahead_skips_the_copy_and_ack_through_dequeues_it(mem_store: InMemoryStore) -> None:
    _sink_queue(mem_store)
    metrics = MetricsRegistry()
    with Consumer(store=mem_store, metrics=metrics) as c:
        assert [d.sequence for d in c.next_descriptors(2)] == [0, 1]
        assert [d.sequence for d in c.next_descriptors(10)] == [2, 4]
        assert c.next_descriptors(10) == []
        assert metrics.counter("buffer.descriptors_handed_out").value == 4
        assert metrics.counter(DUPLICATE_COPIES_SKIPPED).value == 1
        c.ack_through(2)
        assert c.last_acked_sequence == 3
        c.flush()
        assert _sequences(mem_store) == [4]
        c.ack(4)
    assert _sequences(mem_store) == []


def test_ack_through_the_last_entry_dequeues_everything(mem_store: InMemoryStore) -> None:
    _sink_queue(mem_store)
    with Consumer(store=mem_store) as c:
        assert [d.sequence for d in c.next_descriptors(10)] == [0, 1, 2, 4]
        c.ack_through(4)
        assert _sequences(mem_store) == []


def test_a_copy_at_the_tail_is_acked_with_the_entry_before_it(mem_store: InMemoryStore) -> None:
    _sink_queue(mem_store)
    manifest = decode_manifest(mem_store.get(KEY).data, KEY)
    mem_store.put(KEY, encode_manifest(Manifest(manifest.entries[:4], 4, 0)))  # ends with the a2 copy
    with Consumer(store=mem_store) as c:
        assert [b.sequence for b in c] == [0, 1, 2]
        c.ack(0)
        c.ack(1)
        c.ack(2)
        assert c.last_acked_sequence == 3
    assert _sequences(mem_store) == []


# -- resets (docs/format.md §5.2) --------------------------------------------------------------


def _produce(path: str, values: list[str]) -> None:
    from osqueue.producer import Producer

    with Producer(path) as p:
        for v in values:
            p.produce([v.encode()]).result(30)


def _drain(path: str) -> tuple[int, int]:
    """Consumes and acks everything; returns (last acked sequence, incarnation)."""
    with Consumer(path) as c:
        last = None
        for b in c:
            c.ack(b.sequence)
            last = b.sequence
        assert last is not None
        return last, c.incarnation


def _reset(path: str) -> None:
    """An operator reset: the manifest (and its receipts) deleted, the other sidecars kept."""
    import pathlib

    for name in ("manifest", "manifest.dequeued"):
        (pathlib.Path(path) / "ingest" / name).unlink(missing_ok=True)


def test_a_reset_queue_longer_than_the_resume_point_is_refused(tmp_path: Any) -> None:
    path = str(tmp_path)
    _produce(path, [f"old-{i}" for i in range(5)])
    last, _ = _drain(path)
    assert last == 4
    _reset(path)
    _produce(path, [f"new-{i}" for i in range(8)])  # the new queue reaches past the old resume point
    with pytest.raises(ResumePointError, match="reset or recreated"):
        Consumer(path, last_acked_sequence=4)
    # Nothing was dequeued: a fresh start reads the new queue from its first entry.
    with Consumer(path) as c:
        assert [b.entries[0].decode() for b in c] == [f"new-{i}" for i in range(8)]


def test_a_resume_point_with_its_incarnation_detects_a_reset_whoever_ran_since(tmp_path: Any) -> None:
    path = str(tmp_path)
    _produce(path, [f"old-{i}" for i in range(5)])
    last, old_incarnation = _drain(path)
    _reset(path)
    _produce(path, [f"new-{i}" for i in range(8)])
    with Consumer(path) as c:  # another consumer took the new queue over (and recorded it)
        assert c.incarnation != old_incarnation
        assert c.next_batch() is not None
    with pytest.raises(ResumePointError, match=f"incarnation {old_incarnation}"):
        Consumer(path, last_acked_sequence=last, incarnation=old_incarnation)


def test_a_resume_point_of_the_same_incarnation_resumes(tmp_path: Any) -> None:
    path = str(tmp_path)
    _produce(path, [f"a-{i}" for i in range(3)])
    with Consumer(path) as c:
        b = c.next_batch()
        assert b is not None
        c.ack(b.sequence)
        incarnation = c.incarnation
    assert incarnation > 0
    with Consumer(path, last_acked_sequence=0, incarnation=incarnation) as c:
        assert [b.entries[0].decode() for b in c] == ["a-1", "a-2"]
        assert c.incarnation == incarnation
        assert c.epoch & 0xFFFFFFFF == 2, "the low 32 bits count the takeovers"
    with Consumer(path, last_acked_sequence=0) as c:  # without it: checked against the record
        assert c.next_batch() is not None


def test_ack_through_past_what_was_handed_out_is_refused(mem_store: InMemoryStore) -> None:
    """docs/format.md §5, as on the JVM: it would dequeue entries nobody read."""
    _fill(mem_store, 5)
    with Consumer(store=mem_store) as c:
        with pytest.raises(IllegalQueueStateError, match="not handed out"):
            c.ack_through(0)
        c.next_descriptors(2)
        with pytest.raises(IllegalQueueStateError, match="not handed out"):
            c.ack_through(2)
        c.ack_through(1)
    assert _sequences(mem_store) == [2, 3, 4]


def test_draining_a_backlog_reads_the_manifest_once_per_backlog_not_per_batch(mem_store: InMemoryStore) -> None:
    _fill(mem_store, 50)
    store = WrappedStore(mem_store)
    with Consumer(store=store) as c:
        reads = store.get_calls
        got = [b.sequence for b in c]  # 50 next_batch() calls, then one that finds nothing new
        manifest_reads = store.get_calls - reads - 50  # minus the 50 batch fetches
        assert got == list(range(50))
        assert manifest_reads == 2, f"{manifest_reads} manifest reads for one backlog"
        for s in got:
            c.ack(s)
        reads = store.get_calls
        assert c.next_descriptors(10) == [] and store.get_calls == reads + 1  # nothing buffered: one read
