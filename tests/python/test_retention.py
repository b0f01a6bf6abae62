"""Retention and size caps (ADR 0005, docs/format.md §2.3) on the in-memory store: set/clear as one CAS each,
``queued_bytes`` kept by appends and cuts, ``backpressure`` refusing (never dropping) with ``QueueFullError``,
and ``drop_oldest`` cutting the oldest entries, reported to each lagging reader with exact counts."""

from __future__ import annotations

import json
import pathlib
import threading

import pytest
from helpers import ManualClock

from osqueue import Consumer
from osqueue import metrics as m
from osqueue.errors import DataLossError, IllegalQueueStateError, InvalidConfigError, QueueFullError
from osqueue.format import MetadataItem, encode_batch
from osqueue.format.batch_integrity import record
from osqueue.format.manifest_head import parse_head
from osqueue.queue import QueueProducer
from osqueue.queue.queue_retention import QueueFullWait, QueueRetention
from osqueue.queue.subscriptions import Subscriptions
from osqueue.store import InMemoryStore

KEY = "ingest/manifest"
AT_ONCE = QueueFullWait(0, 1)


def _batch(i: int) -> bytes:
    return encode_batch([f"row-{i}".encode() * (1 + i % 3)])


def _produce(store: InMemoryStore, first: int, n: int, qp: QueueProducer | None = None) -> list[int]:
    """Appends batches ``first .. first + n - 1``, each with its integrity record; their sequences."""
    own = qp is None
    qp = qp or QueueProducer(store, KEY, queue_full_wait=AT_ONCE, manifest_segment_entries=4)
    out = []
    for i in range(first, first + n):
        loc, data = f"ingest/b{i:04d}.batch", _batch(i)
        store.put(loc, data)
        out.append(qp.enqueue_async(loc, [MetadataItem(0, 1000 + i, b"")], extension=record(data)).result().sequence)
    if own:
        qp.close()
    return out


def _head(store: InMemoryStore):  # type: ignore[no-untyped-def]
    return parse_head(store.get(KEY).data, KEY)


def _size(lo: int, hi: int) -> int:
    return sum(len(_batch(i)) for i in range(lo, hi))


def _read_all(c: Consumer) -> list[bytes]:
    out = []
    while (b := c.next_batch()) is not None:
        out += b.entries
        c.ack(b.sequence)
    c.flush()
    return out


def test_set_and_clear_keep_queued_bytes_and_give_the_v1_bytes_back(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 3)
    v1 = mem_store.get(KEY).data
    retention = QueueRetention(mem_store, KEY)
    r = retention.set(max_entries=100, max_bytes=1 << 20)
    assert r.queued_bytes == _size(0, 3) and r.policy == 0 and _head(mem_store).version == 3
    assert retention.get() == r
    _produce(mem_store, 3, 6)  # past K = 4: segments are sealed, and the sum follows
    assert _head(mem_store).sections.retention.queued_bytes == _size(0, 9)
    Subscriptions(mem_store, KEY).create("a")
    c = Consumer(store=mem_store, run_gc=False, subscription="a")
    for _ in range(5):  # an ack's cut (through a segment) subtracts what it removes
        b = c.next_batch()
        assert b is not None
        c.ack(b.sequence)
    c.flush()
    head = _head(mem_store)
    assert head.first_sequence == 5 and head.sections.retention.queued_bytes == _size(5, 9)
    c.close()
    Subscriptions(mem_store, KEY).drop("a")
    assert retention.clear() and not retention.clear() and retention.get() is None
    head = _head(mem_store)  # no section left: v1, or a segmented head (v3 for its checksum, §2.3)
    assert head.sections.is_empty and (head.version == 1 or head.refs)
    with pytest.raises(InvalidConfigError, match="'policy'"):
        retention.set(policy="newest")
    with pytest.raises(InvalidConfigError, match="'max_entries'"):
        retention.set(max_entries=-1)
    assert v1 != mem_store.get(KEY).data  # (it grew since) but a fresh queue shows the round trip:
    fresh = InMemoryStore()
    _produce(fresh, 0, 2)
    before = fresh.get(KEY).data
    QueueRetention(fresh, KEY).set(max_entries=5)
    QueueRetention(fresh, KEY).clear()
    assert fresh.get(KEY).data == before
    with pytest.raises(IllegalQueueStateError, match="no queue"):
        QueueRetention(InMemoryStore(), KEY).set(max_entries=1)


def test_backpressure_refuses_appends_past_a_cap_and_drops_nothing_with_concurrent_producers(
    mem_store: InMemoryStore,
) -> None:
    _produce(mem_store, 0, 1)
    QueueRetention(mem_store, KEY).set(max_entries=12)
    ok: dict[int, list[int]] = {}
    full: dict[int, int] = {}

    def producer(p: int) -> None:
        # Each with its own registry: its own committer, so the producers' writes meet in the CAS loop.
        qp = QueueProducer(mem_store, KEY, queue_full_wait=AT_ONCE, metrics=m.MetricsRegistry())
        ok[p], full[p] = [], 0
        for i in range(6):
            try:
                _produce(mem_store, 100 * (p + 1) + i, 1, qp)
                ok[p].append(100 * (p + 1) + i)
            except QueueFullError as e:
                assert "max_entries 12" in str(e) and KEY in str(e)
                full[p] += 1
        qp.close()

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    head = _head(mem_store)
    assert head.depth == 12 and sum(len(v) for v in ok.values()) == 11 and sum(full.values()) == 24 - 11
    locations = [loc for _, loc in head.tail_locations()]  # K = 2048 here: every entry is in the tail
    assert {int(loc[-10:-6]) for loc in locations} == {0} | {n for v in ok.values() for n in v}
    assert len(set(locations)) == 12  # none lost, none twice; the refused ones are not in
    assert head.first_sequence == 0 and head.sections.retention.queued_bytes == sum(
        len(mem_store.get(loc).data) for loc in locations
    )


def test_a_backpressured_producer_waits_for_room_then_appends(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 3)
    Subscriptions(mem_store, KEY).create("a")
    QueueRetention(mem_store, KEY).set(max_entries=3)
    qp = QueueProducer(mem_store, KEY, queue_full_wait=QueueFullWait(30_000, 5), metrics=m.MetricsRegistry())
    done: list[int] = []
    t = threading.Thread(target=lambda: done.extend(_produce(mem_store, 3, 1, qp)))
    t.start()
    c = Consumer(store=mem_store, run_gc=False, subscription="a")
    b = c.next_batch()
    assert b is not None and not done  # still full: the producer waits
    c.ack(b.sequence)
    c.flush()  # one entry leaves: the waiting append fits now
    t.join(timeout=20)
    assert done == [3] and _head(mem_store).depth == 3
    qp.close()
    c.close()


def test_drop_oldest_reports_exact_counts_to_a_lagging_subscription_and_loses_nothing_else(
    mem_store: InMemoryStore,
) -> None:
    _produce(mem_store, 0, 2)
    subs = Subscriptions(mem_store, KEY)
    subs.create("fast")
    subs.create("slow")
    QueueRetention(mem_store, KEY).set(max_entries=4, policy="drop_oldest")
    registry = m.MetricsRegistry()
    losses: list[DataLossError] = []
    slow = Consumer(
        store=mem_store,
        run_gc=False,
        subscription="slow",
        fail_on_data_loss=False,
        on_data_loss=losses.append,
        metrics=registry,
    )
    fast = Consumer(store=mem_store, run_gc=False, subscription="fast")
    assert _read_all(fast) == [f"row-{i}".encode() * (1 + i % 3) for i in range(2)]
    b = slow.next_batch()  # slow reads 0, then lags
    assert b is not None and b.sequence == 0
    slow.ack(0)
    slow.flush()
    producer_metrics = m.MetricsRegistry()
    qp = QueueProducer(mem_store, KEY, metrics=producer_metrics, manifest_segment_entries=4)
    got_fast: list[bytes] = []
    for i in range(2, 12):
        _produce(mem_store, i, 1, qp)
        got_fast += _read_all(fast)  # fast keeps up: never behind low_water
    qp.close()
    head = _head(mem_store)
    assert head.first_sequence == 8 and head.depth == 4  # the cap holds
    assert head.sections.retention.queued_bytes == _size(8, 12)
    assert producer_metrics.counter(m.ENTRIES_DROPPED).value == 7  # 1..7: slow's next was 1
    assert got_fast == [f"row-{i}".encode() * (1 + i % 3) for i in range(2, 12)]
    rest = _read_all(slow)
    # Entry 1 was already in slow's read-ahead (the tail it read with 0) and its batch is still there (no GC):
    # it is delivered; 2..7 are reported lost, exactly; every entry is either delivered or reported, once.
    assert [(e.subscription, e.first, e.count) for e in losses] == [("slow", 2, 6)]
    assert registry.counter(m.DATA_LOSS_EVENTS).value == 1 and registry.counter(m.DROPPED_ENTRIES).value == 6
    assert rest == [f"row-{i}".encode() * (1 + i % 3) for i in [1, 8, 9, 10, 11]]  # nothing else lost
    assert _head(mem_store).depth == 0  # both passed everything: gone
    fast.close()
    slow.close()


def test_a_reader_opened_behind_low_water_raises_data_loss_once_then_reads_on(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 1)
    Subscriptions(mem_store, KEY).create("late")
    QueueRetention(mem_store, KEY).set(max_bytes=_size(6, 9), policy="drop_oldest")
    _produce(mem_store, 1, 8)  # K = 4: the cut walks segments for their byte lengths
    head = _head(mem_store)
    assert head.first_sequence == 6 and head.sections.retention.queued_bytes == _size(6, 9)
    c = Consumer(store=mem_store, run_gc=False, subscription="late")
    with pytest.raises(DataLossError) as lost:
        c.next_batch()
    assert (lost.value.subscription, lost.value.first, lost.value.count) == ("late", 0, 6)
    assert _read_all(c) == [f"row-{i}".encode() * (1 + i % 3) for i in range(6, 9)]
    c.close()


def test_enforce_cuts_by_store_time_never_early(mem_store: InMemoryStore, clock: ManualClock) -> None:
    _produce(mem_store, 0, 3)  # batches 0..2 at T0 by the store's clock
    clock.advance(60)
    _produce(mem_store, 3, 2)  # 3, 4 a minute later; the head is written now too
    Subscriptions(mem_store, KEY).create("r")
    retention = QueueRetention(mem_store, KEY)
    retention.set(max_age_ms=60_000)
    assert retention.enforce() == 0  # exactly max_age old is not older than it
    clock.advance(1)
    _produce(mem_store, 5, 1)  # the head's last-modified moves on: 0..2 are now past max_age, 3.. are not
    assert retention.enforce() == 3
    head = _head(mem_store)
    assert head.first_sequence == 3 and head.sections.retention.queued_bytes == _size(3, 6)
    c = Consumer(store=mem_store, run_gc=False, subscription="r", fail_on_data_loss=False)
    assert _read_all(c) == [f"row-{i}".encode() * (1 + i % 3) for i in range(3, 6)]
    assert c.last_acked_sequence == 5
    c.close()


def test_the_cli_sets_shows_and_clears_retention_and_a_producer_gets_queue_full(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from osqueue import Producer
    from osqueue.cli import cli

    with Producer(str(tmp_path), flush_interval=3600) as p:
        for i in range(3):
            p.produce([f"r{i}".encode()])
            p.flush(timeout=30)
    v1 = (tmp_path / "ingest" / "manifest").read_bytes()

    def run(*args: str, code: int = 0) -> str:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result.output

    out = run("retention", "set", str(tmp_path), "--max-entries", "3", "--max-bytes", "1MiB")
    assert "policy backpressure, max_entries 3, max_bytes 1048576" in out
    inspected = json.loads(run("inspect", str(tmp_path), "--json"))
    r = inspected["readers"]["retention"]
    assert (r["max_entries"], r["max_bytes"], r["policy"]) == (3, 1 << 20, 0) and r["queued_bytes"] > 0
    assert "backpressure, max_entries 3, max_bytes 1048576" in run("inspect", str(tmp_path))
    with Producer(str(tmp_path), flush_interval=3600, queue_full_timeout=0) as p:
        h = p.produce([b"r3"])
        with pytest.raises(QueueFullError, match="max_entries 3"):
            p.flush(timeout=30)
        with pytest.raises(QueueFullError, match="max_entries 3"):
            h.wait_durable(timeout=30)
    assert (tmp_path / "ingest" / "manifest").read_bytes()[-2:] == b"\x03\x00"  # nothing appended, nothing dropped
    assert "invalid value for '--max-bytes'" in run(
        "retention", "set", str(tmp_path), "--max-bytes", "5 parsecs", code=2
    )
    assert "retention cleared" in run("retention", "clear", str(tmp_path))
    assert (tmp_path / "ingest" / "manifest").read_bytes() == v1  # RFC v1 again, byte for byte
    assert "had no retention" in run("retention", "clear", str(tmp_path))
