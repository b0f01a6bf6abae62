"""Ack coalescing (docs/adr/0005, "Ack coalescing"): with ``ack_interval`` a consumer that acks every
batch writes the manifest at most once per interval, its last write carries every ack before it, a
read writes acks still pending once the interval passed, ``close`` writes at once, and the per-reader
metrics (``buffer.ack_writes``, ``buffer.consumer_lag_entries``, label ``subscription``) say so.
JVM: AckCoalescingSuite."""

from __future__ import annotations

import pytest
from tests.python.helpers import ManualClock

from osqueue import Consumer
from osqueue import metrics as m
from osqueue.errors import FencedError, InvalidConfigError
from osqueue.format import MetadataItem, encode_batch
from osqueue.format.manifest_head import parse_head
from osqueue.queue import QueueProducer
from osqueue.queue.subscriptions import Subscriptions
from osqueue.store import InMemoryStore

KEY = "ingest/manifest"


def _produce(store: InMemoryStore, first: int, n: int) -> None:
    qp = QueueProducer(store, KEY)
    for i in range(first, first + n):
        loc = f"ingest/b{i:04d}.batch"
        store.put(loc, encode_batch([f"r{i}".encode()]))
        qp.enqueue(loc, [MetadataItem(0, 1000 + i, b"")])
    qp.close()


def _writes(reg: m.MetricsRegistry, sub: str) -> float:
    return reg.counter(m.ACK_WRITES, subscription=sub).value


def _next(store: InMemoryStore, name: str) -> int:
    head = parse_head(store.get(KEY).data, KEY)
    return {s.name: s.next for s in head.sections.subscriptions}[name]


def test_acks_per_batch_make_one_manifest_write_per_interval(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 50)
    Subscriptions(mem_store, KEY).create("a")
    clock, reg = ManualClock(), m.MetricsRegistry()
    c = Consumer(store=mem_store, run_gc=False, subscription="a", ack_interval=1.0, clock=clock, metrics=reg)
    writes_before = reg.counter(m.MANIFEST_WRITES, role="consumer").value
    for i in range(50):  # 50 acks over 6.25 s, 0.125 s apart
        b = c.next_batch()
        assert b is not None
        if i == 0:
            assert reg.gauge(m.CONSUMER_LAG_ENTRIES, subscription="a").value == 50
        c.ack(b.sequence)
        clock.advance(0.125)
    # at 1 s, 2 s, ... 6 s, by the first read of each interval: one write per interval, not 50
    ack_writes = _writes(reg, "a")
    assert ack_writes == 6
    assert reg.counter(m.MANIFEST_WRITES, role="consumer").value - writes_before == ack_writes
    assert reg.counter(m.ACKS).value == 50
    assert _next(mem_store, "a") == 48  # the last write (the read of 48, at 6 s) carried every ack before it
    assert c.next_batch() is None  # re-reads the head; 0.25 s since the last write: none
    assert _writes(reg, "a") == 6 and reg.gauge(m.CONSUMER_LAG_ENTRIES, subscription="a").value == 0
    c.close()  # close writes the rest at once
    assert _next(mem_store, "a") == 50 and _writes(reg, "a") == 7


def test_a_read_writes_the_acks_left_pending_once_the_interval_passed(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 3)
    clock, reg = ManualClock(), m.MetricsRegistry()
    c = Consumer(store=mem_store, run_gc=False, ack_interval=1.0, clock=clock, metrics=reg)
    for _ in range(3):
        b = c.next_batch()
        assert b is not None
        c.ack(b.sequence)
    assert _writes(reg, "") == 0 and parse_head(mem_store.get(KEY).data, KEY).depth == 3  # nothing written yet
    assert c.next_batch() is None  # an idle poll inside the interval writes nothing
    assert _writes(reg, "") == 0
    clock.advance(1.0)
    assert c.next_batch() is None  # the first poll after it writes the pending acks
    assert _writes(reg, "") == 1 and parse_head(mem_store.get(KEY).data, KEY).depth == 0
    assert c.next_batch() is None and _writes(reg, "") == 1  # nothing pending: no write
    c.close()
    assert _writes(reg, "") == 1


def test_ack_through_coalesces_and_flush_writes_at_once(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 6)
    Subscriptions(mem_store, KEY).create("a")
    clock, reg = ManualClock(), m.MetricsRegistry()
    c = Consumer(store=mem_store, run_gc=False, subscription="a", ack_interval=5.0, clock=clock, metrics=reg)
    ds = c.next_descriptors(6)
    c.ack_through(ds[1].sequence)
    c.ack_through(ds[3].sequence)
    assert _writes(reg, "a") == 0 and _next(mem_store, "a") == 0 and c.last_acked_sequence == 3
    c.flush()
    assert _writes(reg, "a") == 1 and _next(mem_store, "a") == 4
    clock.advance(5.0)
    c.ack_through(ds[5].sequence)  # due: written by the ack itself
    assert _writes(reg, "a") == 2 and _next(mem_store, "a") == 6
    c.close()
    assert _writes(reg, "a") == 2


def test_a_fenced_reader_learns_it_at_the_coalesced_write(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 4)
    Subscriptions(mem_store, KEY).create("a")
    clock = ManualClock()
    old = Consumer(store=mem_store, run_gc=False, subscription="a", ack_interval=1.0, clock=clock)
    b = old.next_batch()
    assert b is not None
    old.ack(b.sequence)
    new = Consumer(store=mem_store, run_gc=False, subscription="a", clock=clock)  # fences old
    clock.advance(1.0)
    with pytest.raises(FencedError):
        old.next_batch()  # it writes the due ack first: that write meets the fence and lands nothing
    assert _next(mem_store, "a") == 0
    old.close()  # a known fence: close writes nothing (as without coalescing)
    assert _next(mem_store, "a") == 0
    new.close()


def test_ack_interval_is_validated(mem_store: InMemoryStore) -> None:
    for bad in (-1, "1s", True):
        with pytest.raises(InvalidConfigError, match="'ack_interval'"):
            Consumer(store=mem_store, run_gc=False, ack_interval=bad)  # type: ignore[arg-type]
