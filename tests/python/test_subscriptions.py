"""Named subscriptions (ADR 0005, docs/format.md §2.3) on the in-memory store: create/list/drop as one CAS
each, per-subscription fencing, acks moving one reader's ``next``, entries leaving only once every reader
passed them, the unnamed consumer's record on a version 3 head, and the v1 bytes given back on the last drop."""

from __future__ import annotations

import json
import pathlib

import pytest

from osqueue import Consumer
from osqueue.errors import FencedError, IllegalQueueStateError, InvalidConfigError, ResumePointError
from osqueue.format import MetadataItem, decode_manifest, encode_batch
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


def _head(store: InMemoryStore):  # type: ignore[no-untyped-def]
    return parse_head(store.get(KEY).data, KEY)


def _consumer(store: InMemoryStore, name: str | None, **kw: object) -> Consumer:
    return Consumer(store=store, run_gc=False, subscription=name, **kw)  # type: ignore[arg-type]


def _read(c: Consumer, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        b = c.next_batch()
        assert b is not None
        out += b.entries
        c.ack(b.sequence)
    return out


def test_create_list_drop_and_the_v1_bytes_come_back(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 3)
    v1 = mem_store.get(KEY).data
    subs = Subscriptions(mem_store, KEY)
    a = subs.create("analytics")
    b = subs.create("billing", start="latest")
    head = _head(mem_store)
    assert head.version == 3 and head.first_sequence == 0 and head.depth == 3  # a create never removes entries
    assert [(p.subscription.name, p.subscription.next, p.lag_entries) for p in subs.list()] == [
        ("analytics", 0, 3),
        ("billing", 3, 0),
    ]
    assert a.epoch & 0xFFFFFFFF == 0 and a.incarnation != b.incarnation
    assert head.sections.unnamed_reader is None  # the footer shows no takeover: no unnamed reader record
    with pytest.raises(IllegalQueueStateError, match="subscription 'analytics' exists"):
        subs.create("analytics")
    with pytest.raises(InvalidConfigError, match="'subscription'"):
        subs.create("a/b")
    with pytest.raises(InvalidConfigError, match="'startingPosition'"):
        subs.create("c", start="middle")
    assert subs.drop("billing") and not subs.drop("billing")
    assert subs.drop("analytics")
    assert mem_store.get(KEY).data == v1  # the last section gone: RFC v1 again, byte for byte


def test_two_subscriptions_each_read_every_entry_once_with_interleaved_produce(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 4)
    subs = Subscriptions(mem_store, KEY)
    subs.create("a")
    subs.create("b")
    ca, cb = _consumer(mem_store, "a"), _consumer(mem_store, "b")
    seen_a = _read(ca, 3)
    ca.flush()
    assert _head(mem_store).first_sequence == 0  # b has acknowledged nothing: everything is kept
    seen_b = _read(cb, 4)
    cb.flush()
    assert _head(mem_store).first_sequence == 3  # the slowest reader (a) is at 3
    _produce(mem_store, 4, 3)
    seen_b += _read(cb, 3)
    assert cb.next_batch() is None
    cb.flush()
    seen_a += _read(ca, 4)
    assert ca.next_batch() is None
    ca.flush()
    expected = [f"r{i}".encode() for i in range(7)]
    assert seen_a == expected and seen_b == expected
    head = _head(mem_store)
    assert head.depth == 0 and [s.next for s in head.sections.subscriptions] == [7, 7]
    # A restarted reader resumes from its record (no resume point needed) and sees nothing again.
    ca.close()
    ca2 = _consumer(mem_store, "a")
    assert ca2.next_batch() is None and ca2.last_acked_sequence == 6
    ca2.close()
    cb.close()


def test_a_second_reader_of_a_subscription_fences_the_first_only(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 4)
    subs = Subscriptions(mem_store, KEY)
    subs.create("a")
    subs.create("b")
    zombie = _consumer(mem_store, "a")
    other = _consumer(mem_store, "b")
    unnamed = _consumer(mem_store, None)
    b0 = zombie.next_batch()
    assert b0 is not None
    successor = _consumer(mem_store, "a")  # takes over a: fences the zombie only
    zombie.ack(b0.sequence)
    with pytest.raises(FencedError):
        zombie.flush()
    assert _head(mem_store).sections.subscription("a").next == 0  # type: ignore[union-attr]
    # Other subscriptions and the unnamed consumer read and ack on: nobody fenced them.
    assert _read(other, 2) == [b"r0", b"r1"]
    other.flush()
    assert _read(unnamed, 1) == [b"r0"]
    unnamed.flush()
    assert _read(successor, 2) == [b"r0", b"r1"]
    successor.flush()
    head = _head(mem_store)
    assert head.sections.subscription("a").next == 2 and head.sections.subscription("b").next == 2  # type: ignore[union-attr]
    assert head.sections.unnamed_reader is not None and head.sections.unnamed_reader.next == 1
    assert head.first_sequence == 1  # the unnamed consumer is the slowest reader
    for c in (other, unnamed, successor):
        c.close()


def test_the_unnamed_consumer_on_a_v3_queue_moves_its_record_not_the_queue(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 3)
    Subscriptions(mem_store, KEY).create("slow")
    with _consumer(mem_store, None) as c:
        assert _read(c, 3) == [b"r0", b"r1", b"r2"]
    head = _head(mem_store)
    assert head.sections.unnamed_reader.next == 3 and head.depth == 3  # type: ignore[union-attr]
    with _consumer(mem_store, None) as c:  # a new unnamed consumer starts from its record
        assert c.next_batch() is None
    Subscriptions(mem_store, KEY).drop("slow")
    head = _head(mem_store)
    assert head.depth == 0 and head.version == 3  # the unnamed reader's record remains
    assert Subscriptions(mem_store, KEY).drop_unnamed()
    assert _head(mem_store).version == 1


def test_missing_subscription_create_option_and_dropped_reader(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 2)
    with pytest.raises(IllegalQueueStateError, match="no subscription 'x'"):
        _consumer(mem_store, "x")
    c = _consumer(mem_store, "x", create_subscription=True)
    first = c.next_batch()
    assert first is not None and first.sequence == 0
    incarnation = c.incarnation
    c.ack(0)
    c.flush()
    Subscriptions(mem_store, KEY).drop("x")
    with pytest.raises(FencedError, match="subscription 'x'"):  # its next read or ack finds it dropped
        b = c.next_batch()
        assert b is not None
        c.ack(b.sequence)
        c.flush()
    Subscriptions(mem_store, KEY).create("x")
    with pytest.raises(ResumePointError, match="dropped and recreated"):
        _consumer(mem_store, "x", last_acked_sequence=0, incarnation=incarnation)
    with pytest.raises(InvalidConfigError, match="'subscription'"):
        _consumer(mem_store, "bad name")


def test_the_cli_creates_lists_drops_and_inspect_shows_lag(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from osqueue import Producer
    from osqueue.cli import cli

    with Producer(str(tmp_path), flush_interval=3600) as p:
        for i in range(3):
            p.produce([f"r{i}".encode()])
            p.flush(timeout=30)

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert "created subscription 'a' at sequence 0" in run("subscriptions", "create", str(tmp_path), "a")
    assert "at sequence 3" in run("subscriptions", "create", str(tmp_path), "b", "--start", "latest")
    with Consumer(str(tmp_path), subscription="a", run_gc=False) as c:
        b = c.next_batch()
        assert b is not None
        c.ack(b.sequence)
    listed = json.loads(run("subscriptions", "list", str(tmp_path), "--json"))
    assert [(s["name"], s["next"], s["lag_entries"], s["dropped_entries"]) for s in listed["subscriptions"]] == [
        ("a", 1, 2, 0),
        ("b", 3, 0, 0),
    ]
    assert listed["low_water"] == 1 and listed["subscriptions"][0]["age_ms"] is not None
    inspected = json.loads(run("inspect", str(tmp_path), "--json"))
    assert inspected["format_version"] == 3 and inspected["depth"] == 2
    assert [s["name"] for s in inspected["readers"]["subscriptions"]] == ["a", "b"]
    summary = run("inspect", str(tmp_path))
    assert "subscription a" in summary and "lag 2 entries" in summary
    assert "dropped subscription 'b'" in run("subscriptions", "drop", str(tmp_path), "b")
    assert "not found" in run("subscriptions", "drop", str(tmp_path), "b")
    run("subscriptions", "drop", str(tmp_path), "a")
    after = (tmp_path / "ingest" / "manifest").read_bytes()
    # RFC v1 again, holding what a had not acknowledged (its ack cut entry 0: b was already past it)
    assert after[-2:] == b"\x01\x00" and [e.sequence for e in decode_manifest(after, KEY).entries] == [1, 2]


def test_lost_replies_on_create_ack_and_drop_resolve_once(mem_store: InMemoryStore) -> None:
    from helpers import WrappedStore, lost_reply_hook

    _produce(mem_store, 0, 3)
    store = WrappedStore(mem_store)
    lose = [True]

    def once() -> bool:
        fail, lose[0] = lose[0], False
        return fail

    store.on_conditional = lost_reply_hook(once)
    created = Subscriptions(store, KEY).create("a")  # landed, reply lost: the re-read finds our incarnation
    assert _head(mem_store).sections.subscriptions == (created,)
    c = Consumer(store=store, run_gc=False, subscription="a")
    b = c.next_batch()
    assert b is not None
    c.ack(b.sequence)
    lose[0] = True
    c.flush()  # the ack's write landed and its reply was lost: the retry finds next already moved
    assert _head(mem_store).sections.subscription("a").next == 1  # type: ignore[union-attr]
    assert [x.entries for x in (c.next_batch(), c.next_batch())] == [[b"r1"], [b"r2"]]  # type: ignore[union-attr]
    c.close()
    lose[0] = True
    assert Subscriptions(store, KEY).drop("a") is False  # landed with its reply lost: absent on the re-read
    assert _head(mem_store).version == 1


def test_subscriptions_over_a_segmented_queue(mem_store: InMemoryStore) -> None:
    # K = 4: the head seals segments and folds index objects; both readers read through them.
    qp = QueueProducer(mem_store, KEY, manifest_segment_entries=4)
    Subscriptions(mem_store, KEY).create("a")
    Subscriptions(mem_store, KEY).create("b")
    for i in range(40):
        loc = f"ingest/b{i:04d}.batch"
        mem_store.put(loc, encode_batch([f"r{i}".encode()]))
        qp.enqueue(loc, [MetadataItem(0, 1000 + i, b"")])
    qp.close()
    head = _head(mem_store)
    assert head.version == 3 and head.refs and len(head.sections.subscriptions) == 2
    ca, cb = _consumer(mem_store, "a"), _consumer(mem_store, "b")
    assert _read(ca, 40) == [f"r{i}".encode() for i in range(40)]
    ca.flush()
    assert _head(mem_store).first_sequence == 0  # b has read nothing
    assert _read(cb, 25) == [f"r{i}".encode() for i in range(25)]
    cb.flush()
    head = _head(mem_store)
    assert head.first_sequence == 25 and head.depth == 15 and head.version == 3
    assert _read(cb, 15) == [f"r{i}".encode() for i in range(25, 40)]
    cb.flush()
    assert _head(mem_store).depth == 0
    ca.close()
    cb.close()


def test_a_live_unnamed_consumer_keeps_reading_when_its_queue_turns_v3(mem_store: InMemoryStore) -> None:
    _produce(mem_store, 0, 4)
    unnamed = _consumer(mem_store, None)
    assert _read(unnamed, 1) == [b"r0"]
    unnamed.flush()  # v1 dequeue: entry 0 removed
    Subscriptions(mem_store, KEY).create("late", start="latest")
    head = _head(mem_store)
    # Its footer epoch showed a takeover: the create added its record at the queue's first sequence.
    assert head.sections.unnamed_reader is not None and head.sections.unnamed_reader.next == 1
    assert _read(unnamed, 3) == [b"r1", b"r2", b"r3"]
    unnamed.flush()  # now a v3 head: its record moves; the queue is cut to the slowest reader (late, at 4)
    head = _head(mem_store)
    assert head.sections.unnamed_reader.next == 4 and head.depth == 0  # type: ignore[union-attr]
    unnamed.close()


@pytest.mark.parametrize("seed", range(6))
def test_random_interleavings_against_a_model(mem_store: InMemoryStore, seed: int) -> None:
    """Appends (K = 4, so segments and index objects come and go), reads and acks of three subscriptions,
    takeovers and a drop/recreate, in a random order: each reader delivers every entry from its
    subscription's start exactly once and in order, and the queue keeps exactly the entries at or past
    the slowest reader's next."""
    import random

    rng = random.Random(seed)
    qp = QueueProducer(mem_store, KEY, manifest_segment_entries=4)
    produced = 0
    names = ["a", "b", "c"]
    subs = Subscriptions(mem_store, KEY)
    for n in names:
        subs.create(n)
    readers = {n: _consumer(mem_store, n) for n in names}
    delivered: dict[str, list[int]] = {n: [] for n in names}
    start = dict.fromkeys(names, 0)
    for _ in range(120):
        op = rng.random()
        name = rng.choice(names)
        if op < 0.35:
            for _ in range(rng.randint(1, 3)):
                loc = f"ingest/b{produced:04d}.batch"
                mem_store.put(loc, encode_batch([str(produced).encode()]))
                qp.enqueue(loc, [MetadataItem(0, produced, b"")])
                produced += 1
        elif op < 0.8:
            b = readers[name].next_batch()
            if b is not None:
                delivered[name].append(int(b.entries[0]))
                readers[name].ack(b.sequence)
            if rng.random() < 0.5:
                readers[name].flush()
        elif op < 0.93:  # a takeover: the new reader resumes from the record (what was flushed)
            readers[name].flush()
            readers[name].close()
            readers[name] = _consumer(mem_store, name)
        else:  # dropped and recreated at latest: a new history from the queue's end
            readers[name].close()
            subs.drop(name)
            subs.create(name, start="latest")
            readers[name] = _consumer(mem_store, name)
            start[name] = produced
            delivered[name] = []
        head = _head(mem_store)
        slowest = min(s.next for s in head.sections.subscriptions)
        assert head.first_sequence == slowest  # exactly the entries some reader still needs
        assert head.next_sequence == produced
    qp.close()
    for n in names:
        while (b := readers[n].next_batch()) is not None:
            delivered[n].append(int(b.entries[0]))
            readers[n].ack(b.sequence)
        readers[n].close()
        assert delivered[n] == list(range(start[n], produced)), n
    assert _head(mem_store).depth == 0


def test_list_reads_one_segment_for_the_age_of_a_position_past_the_tail(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from osqueue import Producer
    from osqueue.cli import cli

    result = CliRunner().invoke(cli, ["subscriptions", "create", str(tmp_path), "a"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with Producer(str(tmp_path), flush_interval=3600, manifest_segment_entries=4) as p:
        for i in range(12):
            p.produce([f"r{i}".encode()])
            p.flush(timeout=30)
    result = CliRunner().invoke(cli, ["subscriptions", "list", str(tmp_path), "--json"], catch_exceptions=False)
    info = json.loads(result.output)
    (a,) = info["subscriptions"]
    assert (a["next"], a["lag_entries"]) == (0, 12) and a["age_ms"] is not None and a["age_ms"] >= 0
    head = parse_head((tmp_path / "ingest" / "manifest").read_bytes(), KEY)
    assert head.refs and head.tail_location_at(0) is None  # entry 0 sits in a segment: its age took one GET


def test_gc_follows_the_head_a_lagging_subscription_pins_its_batches() -> None:
    from helpers import ManualClock

    from osqueue.format import encode_ulid
    from osqueue.gc import GarbageCollector

    clock = ManualClock()
    store = InMemoryStore("gc-subs", clock)
    qp = QueueProducer(store, KEY, clock=clock)
    Subscriptions(store, KEY).create("fast")
    Subscriptions(store, KEY).create("slow")
    keys = []
    for i in range(3):
        key = f"ingest/{encode_ulid(clock.now_ms(), i)}.batch"
        store.put(key, encode_batch([b"x"]))
        qp.enqueue(key, [])
        keys.append(key)
        clock.advance(60)
    qp.close()
    fast = Consumer(store=store, run_gc=False, subscription="fast", clock=clock)
    assert [fast.next_batch() is not None for _ in range(3)] == [True] * 3
    fast.ack_through(2)
    clock.advance(3600)
    gc = GarbageCollector(store, KEY, "ingest", grace_period=600, clock=clock)
    assert list(gc.run_once().deleted) == []  # slow has read nothing: every batch is still referenced
    slow = Consumer(store=store, run_gc=False, subscription="slow", clock=clock)
    assert slow.next_batch() is not None and slow.next_batch() is not None
    slow.ack_through(1)
    clock.advance(3600)
    assert sorted(gc.run_once().deleted) == sorted(keys[:2])  # passed by both: unreferenced, past grace
    assert store.get(keys[2]) is not None
    fast.close()
    slow.close()


def test_tail_reads_and_consumes_as_a_subscription(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from osqueue import Producer
    from osqueue.cli import cli

    with Producer(str(tmp_path), flush_interval=3600) as p:
        for i in range(3):
            p.produce([f"r{i}".encode()])
            p.flush(timeout=30)
    root = str(tmp_path)

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    run("subscriptions", "create", root, "a")
    run("subscriptions", "create", root, "b")
    assert run("tail", root, "--subscription", "a", "--ack", "--max-batches", "2").split() == ["r0", "r1"]
    assert run("tail", root, "--subscription", "a").split() == ["r2"]  # read-only, from a's position
    assert run("tail", root, "--subscription", "b").split() == ["r0", "r1", "r2"]
    info = json.loads(run("subscriptions", "list", root, "--json"))
    assert [s["next"] for s in info["subscriptions"]] == [2, 0]
    result = CliRunner().invoke(cli, ["tail", root, "--subscription", "nope"])
    assert result.exit_code == 2 and "no subscription 'nope'" in result.output


def test_inspect_shows_each_readers_lag_in_bytes_from_integrity_records(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from osqueue import Producer
    from osqueue.cli import cli
    from osqueue.cli.formatting import human_bytes

    with Producer(str(tmp_path), flush_interval=3600) as p:
        for i in range(3):
            p.produce([f"row-{i}".encode() * (i + 1)])
            p.flush(timeout=30)
    created = CliRunner().invoke(cli, ["subscriptions", "create", str(tmp_path), "a"], catch_exceptions=False)
    assert created.exit_code == 0, created.output
    head = parse_head((tmp_path / KEY).read_bytes(), KEY)
    sizes = [(tmp_path / e.location).stat().st_size for e in head.tail_entries()]
    with Consumer(str(tmp_path), subscription="a", run_gc=False) as c:
        b = c.next_batch()
        assert b is not None
        c.ack(b.sequence)
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path), "--json"], catch_exceptions=False)
    reader = json.loads(result.output)["readers"]["subscriptions"][0]
    assert (reader["lag_entries"], reader["lag_bytes"], reader["lag_bytes_unknown_entries"]) == (2, sum(sizes[1:]), 0)
    summary = CliRunner().invoke(cli, ["inspect", str(tmp_path)], catch_exceptions=False).output
    assert f"lag 2 entries ({human_bytes(sum(sizes[1:]))})" in summary


def test_lag_bytes_say_unknown_for_entries_without_a_record(mem_store: InMemoryStore) -> None:
    from osqueue.cli.subscriptions import human_lag_bytes, readers_json

    _produce(mem_store, 0, 2)  # QueueProducer.enqueue of bare locations: no integrity record
    Subscriptions(mem_store, KEY).create("a")
    reader = readers_json(_head(mem_store), 0)["subscriptions"][0]
    assert (reader["lag_bytes"], reader["lag_bytes_unknown_entries"]) == (0, 2)
    assert human_lag_bytes(reader) == "unknown bytes (no integrity records)"
