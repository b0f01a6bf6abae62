"""Cooperative commit (docs/adr/0007 part 1): intents, writer sequences, and many writers with
injected CAS losses on the in-memory store. No batch may ever be appended twice."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from helpers import ManualClock, WrappedStore, assert_well_formed, lost_reply_hook, lying_precondition_hook

from osqueue import Consumer
from osqueue import metrics as m
from osqueue.errors import CorruptManifestError, DataLossError, InvalidConfigError, QueueFullError
from osqueue.format import MetadataItem, decode_manifest, encode_batch
from osqueue.format.batch_integrity import record as batch_record
from osqueue.format.batch_integrity import record_of
from osqueue.format.intent_codec import (
    MAX_FILE_NAME_BYTES,
    decode_in_key_intent,
    decode_intent,
    encode_intent,
    in_key_intent_key,
    intent_key,
    parse_intent_name,
)
from osqueue.format.manifest_head import parse_head
from osqueue.format.writer_sequence import (
    WriterRecord,
    decode_writers,
    encode_writers,
    sequence_of,
    sequence_record,
    writers_of,
)
from osqueue.metrics import MetricsRegistry
from osqueue.queue import ManifestStore, QueueProducer, RetryPolicy
from osqueue.queue.queue_retention import QueueFullWait, QueueRetention
from osqueue.queue.subscriptions import Subscriptions
from osqueue.store import InMemoryStore

KEY = "ingest/manifest"
FAST = RetryPolicy(base_delay=0.0005, max_delay=0.005, max_attempts=200)
W1 = bytes(range(16))
W2 = bytes(range(16, 32))
ULID = "01J5T4RTZ9Y8X7W6V5T4S3R2Q1"


def _entries(store: Any) -> list[Any]:
    obj = store.get(KEY)
    assert obj is not None
    return ManifestStore(store, KEY).decode(obj.data).entries


def _writers(store: Any) -> dict[bytes, WriterRecord]:
    obj = store.get(KEY)
    assert obj is not None
    return writers_of(parse_head(obj.data, KEY).sections, KEY)


# -- bytes -----------------------------------------------------------------------------------------


def test_intent_round_trips_and_its_name_matches() -> None:
    entries = [
        ("ingest/a.batch", [MetadataItem(0, 5, b"m")], record_of(10, 0xDEADBEEF) + sequence_record(W1, 7)),
        ("ingest/b.batch", [], record_of(3, 1) + sequence_record(W1, 8)),
    ]
    data = encode_intent(W1, 7, entries)
    key = intent_key(KEY, ULID, W1, 7, 2)
    name = parse_intent_name(KEY, key)
    assert name is not None and (name.writer_id, name.first_batch, name.count) == (W1, 7, 2)
    intent = decode_intent(data, key, name)
    assert intent.writer_id == W1 and intent.first_batch == 7 and intent.last_batch == 8
    assert [(e[0], list(e[1]), e[2]) for e in intent.entries] == [(e[0], list(e[1]), e[2]) for e in entries]
    assert sequence_of(intent.entries[1][2]) == (W1, 8)


@pytest.mark.parametrize("damage", ["bad_crc", "bad_magic", "count_zero", "name_mismatch", "trailing"])
def test_an_intent_that_does_not_decode_exactly_is_rejected(damage: str) -> None:
    import struct
    import zlib

    data = bytearray(encode_intent(W1, 0, [("ingest/a.batch", [], record_of(1, 2))]))
    name = parse_intent_name(KEY, intent_key(KEY, ULID, W1, 0, 1))

    def recrc(b: bytearray) -> bytes:
        return bytes(b[:-4]) + struct.pack("<I", zlib.crc32(bytes(b[:-4])) & 0xFFFFFFFF)

    if damage == "bad_crc":
        data[-1] ^= 1
        raw = bytes(data)
    elif damage == "bad_magic":
        data[0:4] = b"OSQX"
        raw = recrc(data)
    elif damage == "count_zero":
        struct.pack_into("<H", data, 29, 0)
        raw = recrc(data)
    elif damage == "trailing":
        raw = recrc(bytearray(bytes(data[:-4]) + b"x" + b"\0\0\0\0"))
    else:
        name = parse_intent_name(KEY, intent_key(KEY, ULID, W2, 0, 1))
        raw = bytes(data)
    with pytest.raises(CorruptManifestError):
        decode_intent(raw, "k", name)


def test_writers_section_round_trips_and_rejects_unsorted_ids() -> None:
    recs = [WriterRecord(W2, 3, 10), WriterRecord(W1, 0, 20)]
    body = encode_writers(recs)
    assert decode_writers(body, KEY) == {W1: recs[1], W2: recs[0]}
    swapped = body[:4] + body[4 + 32 :] + body[4 : 4 + 32]
    with pytest.raises(CorruptManifestError, match="increase"):
        decode_writers(swapped, KEY)


def test_commit_mode_is_validated() -> None:
    with pytest.raises(InvalidConfigError, match="commit_mode"):
        QueueProducer(InMemoryStore(), KEY, commit_mode="broker")
    with pytest.raises(InvalidConfigError, match="RFC v1"):
        QueueProducer(InMemoryStore(), KEY, commit_mode="cooperative", manifest_segment_entries=2147483647)


# -- the protocol ----------------------------------------------------------------------------------


def _coop(store: Any, **kw: Any) -> QueueProducer:
    kw.setdefault("retry", FAST)
    return QueueProducer(store, KEY, commit_mode="cooperative", **kw)


def _force_cooperative(qp: QueueProducer, clock: Any = None) -> None:
    """As if it saw a conflict just now: it announces before its first CAS (step 0 skipped)."""
    c = qp._committer.cooperative
    assert c is not None
    c._last_conflict = qp._committer.clock.monotonic()


def _not_the_heads_writer(qp: QueueProducer) -> None:
    """As if another writer wrote the head since: its next group is announced (the writer of the head commits the
    next round without an intent, ADR 0007 session 15)."""
    c = qp._committer.cooperative
    assert c is not None
    c._own_head = None


def test_a_loser_finds_its_batch_already_appended_by_the_winner() -> None:
    mem = InMemoryStore()
    sa, sb = WrappedStore(mem), WrappedStore(mem)
    ma, mb = MetricsRegistry(), MetricsRegistry()
    a, b = _coop(sa, metrics=ma), _coop(sb, metrics=mb)
    b.enqueue("ingest/first.batch", timeout=10)  # the manifest exists
    _force_cooperative(a)
    _force_cooperative(b)
    fired = []

    def b_writes_first(key: str, data: bytes, expected: Any, apply: Any) -> Any:
        if key == KEY and not fired:
            fired.append(1)  # A's intent is written: B's round lists it and appends it with its own
            b.enqueue("ingest/b.batch", timeout=10)
        return apply()

    sa.on_conditional = b_writes_first
    result = a.enqueue("ingest/a.batch", timeout=10)
    assert [e.location for e in _entries(mem)] == ["ingest/first.batch", "ingest/b.batch", "ingest/a.batch"]
    assert result.sequence == 2 and result.location == "ingest/a.batch"
    assert mb.counter(m.INTENTS_APPENDED_FOR_OTHERS).value == 1
    assert ma.counter(m.MANIFEST_WRITES, role="producer").value == 0  # A never landed a write of its own
    assert ma.counter(m.INTENTS_ANNOUNCED).value == 1
    ids = {sequence_of(bytes(e.extension))[0] for e in _entries(mem)}  # type: ignore[index]
    assert len(ids) == 2 and set(_writers(mem)) == ids
    coop = a._committer.cooperative
    assert coop is not None
    coop._deleter.shutdown(wait=True)  # deletes run off the commit's path
    assert not [o for o in mem.list(KEY + ".intents/")]  # the owner deleted its landed intent
    a.close()
    b.close()


def test_a_waiter_sends_no_cas_while_an_older_intent_has_its_committer() -> None:
    """Only the producer with the oldest appendable intent commits a round (ADR 0007 "Part 1 as built", the
    designated committer); a younger one reads the head until its group is in or the committer stalls. Before,
    every waiting producer read every intent and sent a CAS each round: N-1 sure conflicts per landed write."""
    mem = InMemoryStore()
    sa, sb = WrappedStore(mem), WrappedStore(mem)
    ma, mb = MetricsRegistry(), MetricsRegistry()
    a, b = _coop(sa, metrics=ma), _coop(sb, metrics=mb)
    b.enqueue("ingest/first.batch", timeout=10)  # the manifest exists
    _force_cooperative(a)
    _force_cooperative(b)
    lists_b: list[str] = []
    sb.on_list = lists_b.append
    seen: dict[str, int] = {}
    threads: list[threading.Thread] = []

    def a_commits_while_b_waits(key: str, data: bytes, expected: Any, apply: Any) -> Any:
        if key == KEY and not threads:  # A's intent is out, its CAS built: B announces (younger) and waits
            threads.append(threading.Thread(target=b.enqueue, args=("ingest/b.batch",), kwargs={"timeout": 10}))
            threads[0].start()
            deadline = time.monotonic() + 5
            while not lists_b and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(0.2)  # B LISTed at the 0.2 s takeover; it commits regardless only at 0.8 s
            seen["b_cas_while_a_pending"] = sb.conditional_calls - 1  # minus its first (solo) write
        return apply()

    sa.on_conditional = a_commits_while_b_waits
    a.enqueue("ingest/a.batch", timeout=10)
    threads[0].join(10)
    assert lists_b, "B never listed the intents"
    assert seen["b_cas_while_a_pending"] == 0, "B sent a CAS while A's older intent had its committer"
    assert [e.location for e in _entries(mem)] == ["ingest/first.batch", "ingest/a.batch", "ingest/b.batch"]
    # A's CAS was built before B announced, so B committed its own group once A's landed: no conflict anywhere.
    assert mb.counter(m.MANIFEST_CONFLICTS, role="producer").value == 0
    assert ma.counter(m.MANIFEST_CONFLICTS, role="producer").value == 0
    a.close()
    b.close()


class _BulkDeletes(InMemoryStore):
    """The in-memory store with a bulk delete (as S3's DeleteObjects), counting its requests."""

    def __init__(self) -> None:
        super().__init__()
        self.bulk: list[list[str]] = []
        self.single: list[str] = []
        self.puts: list[str] = []

    def delete_many(self, keys: Any) -> None:
        self.bulk.append(list(keys))
        for k in keys:
            super().delete(k)

    def delete(self, key: str) -> None:
        self.single.append(key)
        super().delete(key)

    def put(self, key: str, data: bytes) -> None:
        self.puts.append(key)
        super().put(key, data)


def test_the_heads_writer_commits_the_next_round_without_an_intent_and_deletes_what_it_appended_at_once() -> None:
    """ADR 0007 session 15: the writer of the head is the next round's committer. Its group needs no intent (it
    writes it itself), and it deletes the intents its CAS appended in one request; their owners delete nothing.
    Before: it announced its own group (one PUT) and every owner deleted its own intent (one DELETE each)."""
    mem = _BulkDeletes()
    qp = _coop(mem)
    qp.enqueue("ingest/first.batch", timeout=10)  # its CAS wrote the head
    _announce(mem, W1, 0, ["ingest/w1-0.batch"])
    _announce(mem, W2, 0, ["ingest/w2-0.batch"], "01J5T4RTZ9Y8X7W6V5T4S3R2Q2")
    _force_cooperative(qp)
    mem.puts.clear()
    qp.enqueue("ingest/mine.batch", timeout=10)
    qp.close()  # waits for the deleter
    assert [e.location for e in _entries(mem)] == [
        "ingest/first.batch",
        "ingest/mine.batch",
        "ingest/w1-0.batch",
        "ingest/w2-0.batch",
    ]
    assert [k for k in mem.puts if ".intents/" in k] == []  # no intent of its own
    assert mem.single == [] and len(mem.bulk) == 1 and len(mem.bulk[0]) == 2
    assert [o.key for o in mem.list(KEY + ".intents/")] == []


def test_a_waiter_whose_group_another_appended_leaves_its_intent_to_that_committer() -> None:
    """The owner of a group another writer's CAS appended deletes no intent (the committer does, in one request);
    a group it committed itself it deletes with the rest of that round's intents."""
    mem = _BulkDeletes()
    a, b = _coop(mem), _coop(mem)
    b.enqueue("ingest/first.batch", timeout=10)
    _force_cooperative(a)
    _force_cooperative(b)
    _not_the_heads_writer(b)
    done = threading.Event()
    threading.Thread(target=lambda: (b.enqueue("ingest/b.batch", timeout=10), done.set()), daemon=True).start()
    deadline = time.monotonic() + 5
    while not any(".intents/" in k for k in mem.puts) and time.monotonic() < deadline:
        time.sleep(0.005)
    a.enqueue("ingest/a.batch", timeout=10)  # not the head's writer either: waits, then commits B's group too
    assert done.wait(10)
    a.close()
    b.close()
    assert sorted(e.location for e in _entries(mem))[:2] == ["ingest/a.batch", "ingest/b.batch"]
    assert mem.single == []
    assert [o.key for o in mem.list(KEY + ".intents/")] == []


@pytest.mark.parametrize("fault", ["none", "lost_reply", "lying_precondition"])
def test_many_cooperative_writers_with_injected_losses_never_append_twice(fault: str) -> None:
    mem = InMemoryStore()
    rng = random.Random(11)
    lock = threading.Lock()

    def flaky() -> bool:
        with lock:
            return rng.random() < 0.25

    writers, per_writer = 8, 10
    errors: list[BaseException] = []
    metrics = [MetricsRegistry() for _ in range(writers)]

    def work(t: int) -> None:
        store = WrappedStore(mem)  # one committer each: they race on the CAS as processes do
        if fault == "lost_reply":
            store.on_conditional = lost_reply_hook(flaky)
        elif fault == "lying_precondition":
            store.on_conditional = lying_precondition_hook(flaky)
        qp = _coop(store, metrics=metrics[t], manifest_segment_entries=16)
        try:
            for i in range(per_writer):
                qp.enqueue(f"ingest/t{t}-{i}.batch", timeout=60)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            qp.close()

    ts = [threading.Thread(target=work, args=(t,)) for t in range(writers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    locations = assert_well_formed(mem)  # no duplicate location
    assert sorted(locations) == sorted(f"ingest/t{t}-{i}.batch" for t in range(writers) for i in range(per_writer))
    seqs = [sequence_of(bytes(e.extension)) for e in _entries(mem)]
    assert None not in seqs and len(set(seqs)) == len(seqs)  # each (writer, batch_no) once
    by_writer: dict[bytes, list[int]] = {}
    for wid, n in seqs:  # type: ignore[misc]
        by_writer.setdefault(wid, []).append(n)
    assert all(ns == list(range(per_writer)) for ns in by_writer.values())  # in batch order, no gap
    assert {w: r.last_batch for w, r in _writers(mem).items()} == {w: per_writer - 1 for w in by_writer}
    for t in range(writers):  # each writer's own entries in its order
        assert [x for x in locations if x.startswith(f"ingest/t{t}-")] == [
            f"ingest/t{t}-{i}.batch" for i in range(per_writer)
        ]


def _announce(mem: InMemoryStore, wid: bytes, first: int, locs: list[str], ulid: str = ULID) -> None:
    entries = [(loc, [], record_of(1, 1) + sequence_record(wid, first + i)) for i, loc in enumerate(locs)]
    mem.put(intent_key(KEY, ulid, wid, first, len(locs)), encode_intent(wid, first, entries))


def test_a_gap_stops_a_writers_run_and_a_stale_intent_is_never_appended() -> None:
    clock = ManualClock()
    mem = InMemoryStore(clock=clock)
    qp = _coop(mem, clock=clock)
    _announce(mem, W2, 0, ["ingest/w2-0.batch"])
    # W2's intent is a quarter grace period (600 s / 4) older than the head, by the store's clock.
    clock.advance(200)
    _announce(mem, W1, 0, ["ingest/w1-0.batch"], "01J5T4RTZ9Y8X7W6V5T4S3R2Q1")
    _announce(mem, W1, 2, ["ingest/w1-2.batch"], "01J5T4RTZ9Y8X7W6V5T4S3R2Q2")  # batch 1 missing
    qp.enqueue("ingest/first.batch", timeout=10)  # solo: the head, written now
    _force_cooperative(qp)
    qp.enqueue("ingest/mine.batch", timeout=10)
    assert [e.location for e in _entries(mem)] == ["ingest/first.batch", "ingest/mine.batch", "ingest/w1-0.batch"]
    assert _writers(mem)[W1].last_batch == 0 and W2 not in _writers(mem)
    qp.close()


def test_a_rejected_intent_is_counted_and_skipped() -> None:
    mem = InMemoryStore()
    metrics = MetricsRegistry()
    qp = _coop(mem, metrics=metrics)
    qp.enqueue("ingest/first.batch", timeout=10)
    mem.put(intent_key(KEY, ULID, W1, 0, 1), b"OSQI not an intent")
    _force_cooperative(qp)
    qp.enqueue("ingest/mine.batch", timeout=10)
    assert [e.location for e in _entries(mem)] == ["ingest/first.batch", "ingest/mine.batch"]
    assert metrics.counter(m.INTENTS_REJECTED).value == 1
    qp.close()


def test_entries_carry_a_checked_integrity_record_at_their_sequence() -> None:
    mem = InMemoryStore()
    qp = _coop(mem)
    _announce(mem, W1, 0, ["ingest/w1-0.batch"])
    qp.enqueue("ingest/first.batch", timeout=10)  # creates the manifest (solo)
    _force_cooperative(qp)
    qp.enqueue("ingest/mine.batch", timeout=10)
    obj = mem.get(KEY)
    assert obj is not None
    from osqueue.format.batch_integrity import verify_entry

    for e in ManifestStore(mem, KEY).decode(obj.data).entries:
        if e.extension:
            verify_entry(e, KEY)  # raises on a wrong entry_crc32
    assert [e.location for e in _entries(mem)][-1] == "ingest/w1-0.batch"
    assert decode_manifest  # keep the import: the v1 decoder refuses v3 heads (checked elsewhere)
    qp.close()


def test_gc_deletes_intents_a_grace_period_old_and_keeps_younger_ones() -> None:
    from osqueue.gc import GarbageCollector

    clock = ManualClock()
    mem = InMemoryStore(clock=clock)
    _announce(mem, W1, 0, ["ingest/w1-0.batch"], "01J5T4RTZ9Y8X7W6V5T4S3R2Q1")  # a dead owner's
    in_key = in_key_intent_key(KEY, "01J5T4RTZ9Y8X7W6V5T4S3R2Q3", W1, 1, _in_key_entries(W1, 1, 1))
    assert in_key is not None
    mem.put(in_key, b"")  # a dead owner's, in-key
    clock.advance(400)
    _announce(mem, W2, 0, ["ingest/w2-0.batch"], "01J5T4RTZ9Y8X7W6V5T4S3R2Q2")
    mem.put(KEY + ".intents/not-an-intent", b"x")
    clock.advance(200)
    qp = _coop(mem, clock=clock)
    qp.enqueue("ingest/first.batch", timeout=10)  # the head: 600 s after W1's intent, 200 s after W2's
    result = GarbageCollector(mem, KEY, "ingest", grace_period=600, clock=clock).run_once()
    assert intent_key(KEY, "01J5T4RTZ9Y8X7W6V5T4S3R2Q1", W1, 0, 1) in result.deleted
    assert in_key in result.deleted
    left = {o.key for o in mem.list(KEY + ".intents/")}
    assert left == {intent_key(KEY, "01J5T4RTZ9Y8X7W6V5T4S3R2Q2", W2, 0, 1), KEY + ".intents/not-an-intent"}
    qp.close()


# -- golden vectors (tests/golden/intents.json, written by tests/golden/make_vectors.py) -------------

GOLDEN = __import__("pathlib").Path(__file__).resolve().parents[1] / "golden"
INTENTS = __import__("json").loads((GOLDEN / "intents.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("file", sorted(f for f in INTENTS if f.startswith("intent_")))
def test_intent_golden_vectors(file: str) -> None:
    import base64

    spec = INTENTS[file]
    data = (GOLDEN / file).read_bytes()
    name = parse_intent_name(KEY, spec["name"])
    assert name is not None
    if "error" in spec:
        with pytest.raises(CorruptManifestError):
            decode_intent(data, spec["name"], name)
        return
    intent = decode_intent(data, spec["name"], name)
    assert intent.writer_id.hex() == spec["writer_id"] and intent.first_batch == spec["first_batch"]
    assert [
        (e[0], [(x.start_index, x.ingestion_time_ms, bytes(x.payload)) for x in e[1]], e[2]) for e in intent.entries
    ] == [
        (
            e["location"],
            [(x["start_index"], x["ingestion_time_ms"], base64.b64decode(x["payload_b64"])) for x in e["metadata"]],
            base64.b64decode(e["extension_b64"]),
        )
        for e in spec["entries"]
    ]
    # Encoding it again gives the same bytes.
    assert encode_intent(intent.writer_id, intent.first_batch, list(intent.entries)) == data


def test_the_in_key_golden_name_announces_the_intent_v1_batches() -> None:
    spec = INTENTS["intent_v1.bin"]
    intent = decode_intent((GOLDEN / "intent_v1.bin").read_bytes(), spec["name"], parse_intent_name(KEY, spec["name"]))
    name = parse_intent_name(KEY, spec["in_key_name"])
    assert name is not None and name.payload is not None
    from_key = decode_in_key_intent(name, spec["in_key_name"])
    assert (from_key.writer_id, from_key.first_batch) == (intent.writer_id, intent.first_batch)
    assert [(e[0], list(e[1]), bytes(e[2])) for e in from_key.entries] == [
        (e[0], list(e[1]), bytes(e[2])) for e in intent.entries
    ]
    assert in_key_intent_key(KEY, ULID, W1, 7, list(intent.entries)) == spec["in_key_name"]


# -- in-key intents (docs/format.md §2.4 "In-key intents") ------------------------------------------


def _in_key_entries(wid: bytes, first: int, n: int, items: int = 10) -> list[Any]:
    t0 = 1767225600000
    return [
        (
            f"ingest/01J5T4R3KXBMZ7QV9N2WG8Y{i:03d}.batch",
            [MetadataItem(j, t0 + 10 * j - (3 if j == 4 else 0), b"" if j % 3 else b"app") for j in range(items)],
            record_of(100 + i, 0xFFFFFFF0 + i) + sequence_record(wid, first + i),
        )
        for i in range(n)
    ]


def test_an_in_key_intent_round_trips_and_falls_back_when_it_does_not_fit() -> None:
    entries = _in_key_entries(W1, 5, 3)
    key = in_key_intent_key(KEY, ULID, W1, 5, entries)
    assert key is not None and len(key) <= 1024
    name = parse_intent_name(KEY, key)
    assert name is not None and (name.writer_id, name.first_batch, name.count) == (W1, 5, 3)
    got = decode_in_key_intent(name, key)
    assert [(e[0], list(e[1]), bytes(e[2])) for e in got.entries] == [(e[0], list(e[1]), e[2]) for e in entries]
    assert in_key_intent_key(KEY, ULID, W1, 5, _in_key_entries(W1, 5, 12)) is None  # past 1,024 bytes
    assert in_key_intent_key(KEY, ULID, W1, 5, entries, MAX_FILE_NAME_BYTES) is None  # a local file name
    one = _in_key_entries(W1, 5, 1, items=1)
    assert in_key_intent_key(KEY, ULID, W1, 5, one, MAX_FILE_NAME_BYTES) is not None
    # Not the shape: a sink tag or another record after the writer record, or a record of another batch number.
    assert in_key_intent_key(KEY, ULID, W1, 5, [(one[0][0], one[0][1], one[0][2] + b"OSQ1\x01")]) is None
    assert in_key_intent_key(KEY, ULID, W1, 6, one) is None


@pytest.mark.parametrize("damage", ["count", "trailing", "truncated", "not_canonical"])
def test_an_in_key_intent_that_does_not_decode_exactly_is_rejected(damage: str) -> None:
    key = in_key_intent_key(KEY, ULID, W1, 5, _in_key_entries(W1, 5, 2))
    assert key is not None
    head, payload = key[: -len(".intent")].rsplit("-", 1)
    if damage == "count":
        head = head.replace("-5-2", "-5-3")
    elif damage == "trailing":
        payload = payload + "AA"
    elif damage == "truncated":
        payload = payload[:-8]
    else:  # unused low bits set in the last character, or a length base64 cannot have
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        if len(payload) % 4 in (2, 3):
            payload = payload[:-1] + alphabet[alphabet.index(payload[-1]) ^ 1]
        else:
            payload += "A"
    bad = f"{head}-{payload}.intent"
    name = parse_intent_name(KEY, bad)
    assert name is not None
    with pytest.raises(CorruptManifestError):
        decode_in_key_intent(name, bad)


class _GetLog(WrappedStore):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.keys: list[str] = []

    def get(self, key: str) -> Any:
        self.keys.append(key)
        return super().get(key)


def test_a_round_reads_no_in_key_intent_and_still_gets_an_old_format_one() -> None:
    mem = InMemoryStore()
    store = _GetLog(mem)
    metrics = MetricsRegistry()
    qp = _coop(store, metrics=metrics)
    qp.enqueue("ingest/first.batch", timeout=10)
    in_key = in_key_intent_key(KEY, ULID, W1, 0, _in_key_entries(W1, 0, 2))
    assert in_key is not None
    mem.put(in_key, b"its body is never read")  # a GET would reject it (not an intent)
    _announce(mem, W2, 0, ["ingest/w2-0.batch"], "01J5T4RTZ9Y8X7W6V5T4S3R2Q2")  # today's form: read by GET
    _force_cooperative(qp)
    qp.enqueue("ingest/mine.batch", timeout=10)
    assert [e.location for e in _entries(mem)] == [
        "ingest/first.batch",
        "ingest/mine.batch",
        "ingest/01J5T4R3KXBMZ7QV9N2WG8Y000.batch",
        "ingest/01J5T4R3KXBMZ7QV9N2WG8Y001.batch",
        "ingest/w2-0.batch",
    ]
    intent_gets = [k for k in store.keys if k.startswith(KEY + ".intents/")]
    assert intent_gets == [intent_key(KEY, "01J5T4RTZ9Y8X7W6V5T4S3R2Q2", W2, 0, 1)]
    assert metrics.counter(m.INTENTS_REJECTED).value == 0
    coop = qp._committer.cooperative
    assert coop is not None
    assert {w: r.last_batch for w, r in _writers(mem).items() if w != coop.writer_id} == {W1: 1, W2: 0}
    assert len(coop._intents) == 2
    _force_cooperative(qp)
    qp.enqueue("ingest/next.batch", timeout=10)  # both appended: the next round forgets them
    assert coop._intents == {}
    qp.close()


def test_a_cooperative_producer_announces_in_the_key_when_its_group_fits() -> None:
    mem = InMemoryStore()
    store = WrappedStore(mem)
    announced: list[str] = []
    store.on_put = lambda key, data: announced.append(key) if ".intents/" in key else None
    qp = _coop(store)
    qp.enqueue("ingest/first.batch", timeout=10)
    _force_cooperative(qp)
    _not_the_heads_writer(qp)
    qp.enqueue("ingest/mine.batch", timeout=10)
    assert len(announced) == 1
    name = parse_intent_name(KEY, announced[0])
    assert name is not None and name.payload is not None
    assert decode_in_key_intent(name, announced[0]).entries[0][0] == "ingest/mine.batch"
    qp.close()


def test_head_with_a_writers_section_golden_vector() -> None:
    import base64

    from osqueue.format.batch_integrity import verify_entry
    from osqueue.format.manifest_head import decode_head, encode_head

    spec = INTENTS["head_v3_writers.bin"]
    data = (GOLDEN / "head_v3_writers.bin").read_bytes()
    head = decode_head(data, spec["manifest"])
    assert (head.next_sequence, head.epoch, head.low_water) == (spec["next_sequence"], spec["epoch"], spec["low_water"])

    def unsealed(ext: bytes) -> bytes:  # the records with entry_crc32 0, as announced in the intent
        return ext[:15] + b"\0\0\0\0" + ext[19:]

    assert [(e.sequence, e.location, unsealed(bytes(e.extension))) for e in head.tail] == [
        (t["sequence"], t["location"], base64.b64decode(t["extension_b64"])) for t in spec["tail"]
    ]
    for e in head.tail:
        verify_entry(e, spec["manifest"])
    assert [sequence_of(bytes(e.extension)) for e in head.tail] == [(W1, 7), (W1, 8)]
    writers = writers_of(head.sections, spec["manifest"])
    assert [(w.hex(), r.last_batch, r.last_append_ms) for w, r in sorted(writers.items())] == [
        (x["writer_id"], x["last_batch"], x["last_append_ms"]) for x in spec["writers"]
    ]
    # The writers section as this codec writes it is the vector's, byte for byte.
    rebuilt = encode_head([], head.low_water, head.tail, head.next_sequence, head.epoch, head.sections)
    assert rebuilt == data
    assert encode_writers(writers.values()) == head.sections.opaque[0].body


# -- the queue's size caps (docs/format.md §2.3) ---------------------------------------------------------


def _real_intent(mem: InMemoryStore, wid: bytes, first: int, names: list[str]) -> list[bytes]:
    """Announces ``wid``'s batches ``first ..`` with real batch objects (a reader can read them); their rows."""
    entries, rows = [], []
    for i, name in enumerate(names):
        row = name.encode()
        data = encode_batch([row])
        mem.put(f"ingest/{name}.batch", data)
        entries.append((f"ingest/{name}.batch", [], batch_record(data) + sequence_record(wid, first + i)))
        rows.append(row)
    mem.put(intent_key(KEY, ULID, wid, first, len(names)), encode_intent(wid, first, entries))
    return rows


def _put_rows(mem: InMemoryStore, qp: QueueProducer, name: str) -> bytes:
    data = encode_batch([name.encode()])
    mem.put(f"ingest/{name}.batch", data)
    qp.enqueue_async(f"ingest/{name}.batch", [], extension=batch_record(data)).result(timeout=10)
    return name.encode()


def test_a_cooperative_producer_is_refused_past_a_backpressure_cap_and_other_runs_wait() -> None:
    mem = InMemoryStore()
    qp = _coop(mem, queue_full_wait=QueueFullWait(0, 1))
    qp.enqueue("ingest/first.batch", timeout=10)
    QueueRetention(mem, KEY).set(max_entries=3)
    _announce(mem, W1, 0, ["ingest/w1-0.batch", "ingest/w1-1.batch"])  # fits only without the own batches
    _force_cooperative(qp)
    qp.enqueue("ingest/a.batch", timeout=10)  # fits; W1's run would not: it stays announced for W1
    qp.enqueue("ingest/b.batch", timeout=10)
    _not_the_heads_writer(qp)  # so that it announces c (the head's own writer commits without an intent)
    with pytest.raises(QueueFullError, match="max_entries 3"):
        qp.enqueue("ingest/c.batch", timeout=10)
    assert [e.location for e in _entries(mem)] == ["ingest/first.batch", "ingest/a.batch", "ingest/b.batch"]
    writers = _writers(mem)
    assert W1 not in writers and [o.key for o in mem.list(KEY + ".intents/") if W1.hex() in o.key]
    # The refused group was announced: its record is set past it, so no other committer can still append it.
    own = next(w for w in writers if w != W1)
    assert writers[own].last_batch == 3
    qp.close()


def test_cooperative_producers_under_backpressure_drop_nothing_and_never_pass_the_cap() -> None:
    mem = InMemoryStore()
    first = _coop(mem)
    first.enqueue("ingest/first.batch", timeout=10)
    first.close()
    QueueRetention(mem, KEY).set(max_entries=12)
    ok: dict[int, list[str]] = {}
    full: dict[int, int] = {}

    def producer(p: int) -> None:
        qp = _coop(WrappedStore(mem), queue_full_wait=QueueFullWait(0, 1), metrics=MetricsRegistry())
        _force_cooperative(qp)  # every group announced: the writers append each other's runs
        ok[p], full[p] = [], 0
        for i in range(6):
            try:
                qp.enqueue(f"ingest/p{p}-{i}.batch", timeout=30)
                ok[p].append(f"ingest/p{p}-{i}.batch")
            except QueueFullError:
                full[p] += 1
        qp.close()

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    locations = assert_well_formed(mem)
    assert len(locations) == 12 and sum(len(v) for v in ok.values()) == 11 and sum(full.values()) == 24 - 11
    assert set(locations) == {"ingest/first.batch"} | {loc for v in ok.values() for loc in v}  # refused: not in


def test_drop_oldest_cuts_for_a_cooperative_write_and_tells_a_lagging_subscription_exactly() -> None:
    mem = InMemoryStore()
    metrics = MetricsRegistry()
    qp = _coop(mem, metrics=metrics)
    rows = [_put_rows(mem, qp, f"b{i}") for i in range(2)]
    subs = Subscriptions(mem, KEY)
    subs.create("fast")
    subs.create("slow")
    QueueRetention(mem, KEY).set(max_entries=4, policy="drop_oldest")
    losses: list[DataLossError] = []
    slow = Consumer(store=mem, run_gc=False, subscription="slow", fail_on_data_loss=False, on_data_loss=losses.append)
    fast = Consumer(store=mem, run_gc=False, subscription="fast")

    def read_all(c: Consumer) -> list[bytes]:
        out = []
        while (b := c.next_batch()) is not None:
            out += b.entries
            c.ack(b.sequence)
        c.flush()
        return out

    got_fast = read_all(fast)
    b = slow.next_batch()  # slow reads 0 (and 1 in its read-ahead), then lags
    assert b is not None and b.sequence == 0
    slow.ack(0)
    slow.flush()
    _force_cooperative(qp)
    w1_rows = _real_intent(mem, W1, 0, ["w1-0", "w1-1"])
    for i in range(2, 12):
        rows.append(_put_rows(mem, qp, f"b{i}"))
        if i == 2:
            rows += w1_rows  # appended by this write, after its own batch (sequences 3, 4)
        head = parse_head(mem.get(KEY).data, KEY)  # type: ignore[union-attr]
        assert head.depth <= 4  # the cap holds after every cooperative write
        got_fast += read_all(fast)
    assert got_fast == rows  # fast keeps up: nothing lost for it
    head = parse_head(mem.get(KEY).data, KEY)  # type: ignore[union-attr]
    assert head.first_sequence == 10 and head.depth == 4 and _writers(mem)[W1].last_batch == 1
    assert metrics.counter(m.ENTRIES_DROPPED).value == 9  # 1..9: slow's next was 1
    rest = read_all(slow)
    assert [(e.subscription, e.first, e.count) for e in losses] == [("slow", 2, 8)]
    assert rest == [rows[1]] + rows[10:]  # 1 was in its read-ahead; nothing else lost
    fast.close()
    slow.close()
    qp.close()


def test_a_waiter_announces_its_next_group_and_one_head_read_confirms_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """ADR 0007 session 15: a producer whose group waits announces the batches queued since as its next group
    (an intent from ``last_batch + 1``), so one committer's CAS appends both, in order, and one head read
    confirms both. Before: the next group waited for the first to land, missing the round (a read more each)."""
    from osqueue.queue import cooperative_commit as cc

    monkeypatch.setattr(cc, "TAKEOVER_S", 30.0)  # B never takes over: A (the head's writer) commits the round
    mem = InMemoryStore()
    sa, sb = WrappedStore(mem), WrappedStore(mem)
    ma, mb = MetricsRegistry(), MetricsRegistry()
    a, b = _coop(sa, metrics=ma), _coop(sb, metrics=mb)
    b.enqueue("ingest/b0.batch", timeout=10)  # B has a record (batch 0)
    a.enqueue("ingest/first.batch", timeout=10)  # A wrote the head: it commits the next round
    _force_cooperative(a)
    _force_cooperative(b)
    wb = b._committer.cooperative.writer_id  # type: ignore[union-attr]

    def b_intents() -> set[int]:
        return {
            n.first_batch
            for o in mem.list(KEY + ".intents/")
            if (n := parse_intent_name(KEY, o.key)) and n.writer_id == wb
        }

    def wait_for(batch: int) -> bool:
        deadline = time.monotonic() + 5
        while batch not in b_intents() and time.monotonic() < deadline:
            time.sleep(0.005)
        return batch in b_intents()

    f1 = b.enqueue_async("ingest/b1.batch")
    assert wait_for(1)
    f2 = b.enqueue_async("ingest/b2.batch")
    assert wait_for(2), "B did not announce its next group while the previous one waited"
    assert not f1.done()
    writes_b = mb.counter(m.MANIFEST_WRITES, role="producer").value
    a.enqueue("ingest/a.batch", timeout=10)  # one CAS: A's group, then B's run 1..2
    gets = sb.get_calls
    r1, r2 = f1.result(10), f2.result(10)
    assert sb.get_calls - gets <= 1, "more than one head read to confirm both groups"
    assert [e.location for e in _entries(mem)][-3:] == ["ingest/a.batch", "ingest/b1.batch", "ingest/b2.batch"]
    assert (r1.sequence, r2.sequence) == (3, 4)
    assert ma.counter(m.INTENTS_APPENDED_FOR_OTHERS).value == 2
    assert mb.counter(m.MANIFEST_WRITES, role="producer").value == writes_b
    assert _writers(mem)[wb].last_batch == 2
    a.close()
    b.close()
