"""The producer spool (docs/adr/0006 part 2): the log's records, torn tails, the lock, replay after a
crash at each step, truncation, the cap, an outage and a kill -9 (local store, no server)."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import zlib
from typing import Any

import pytest
from helpers import WrappedStore

from osqueue.clock import SystemClock
from osqueue.errors import AmbiguousCommitError, CorruptSpoolError, InvalidConfigError, QueueFullError, StoreError
from osqueue.format import decode_batch, decode_manifest
from osqueue.format.batch_codec import Compression, encode_batch
from osqueue.format.batch_integrity import integrity_of
from osqueue.format.manifest import MetadataItem
from osqueue.format.manifest_codec import footer_bytes
from osqueue.metrics import (
    SPOOL_BYTES,
    SPOOL_DROPPED_ENTRIES,
    SPOOL_OLDEST_ENTRY_AGE_SECONDS,
    SPOOL_REPLAYED_BATCHES,
    MetricsRegistry,
)
from osqueue.producer import Producer
from osqueue.producer.spool import Spool
from osqueue.producer.spool_log import (
    PREALLOC_MIN_BYTES,
    AttemptRecord,
    BatchRecord,
    DroppedRecord,
    EntriesRecord,
    LandedRecord,
    SpoolLog,
    decode_records,
    encode_entries,
    encode_record,
)
from osqueue.queue import QueueProducer, RetryPolicy
from osqueue.store import InMemoryStore

KEY = "ingest/manifest"
FAST = RetryPolicy(base_delay=0.001, max_delay=0.01)
REPO = pathlib.Path(__file__).resolve().parents[2]


def _values(store: Any) -> list[bytes]:
    obj = store.get(KEY)
    if obj is None:
        return []
    return [v for e in decode_manifest(obj.data, KEY).entries for v in decode_batch(store.get(e.location).data, "b")]


def _producer(store: Any, spool: pathlib.Path, **kw: Any) -> Producer:
    kw.setdefault("retry", FAST)
    kw.setdefault("flush_interval", 0.01)
    return Producer(store=store, spool_dir=str(spool), **kw)


SAMPLES = [
    EntriesRecord(7, 1_700_000_000_000, b"meta", (b"a", b"", b"ccc")),
    BatchRecord(3, 5, 7, 123, 0xDEADBEEF, "ingest/01ARZ3NDEKTSV4RRFFQ69G5FAV.batch"),
    AttemptRecord(42, (3,), ("ingest/01ARZ3NDEKTSV4RRFFQ69G5FAV.batch",)),
    LandedRecord(42, (3,)),
    DroppedRecord(8, 9),
]


def test_every_record_type_round_trips_with_its_crc() -> None:
    data = b"".join(encode_record(r) for r in SAMPLES)
    assert data[:4] == b"OSQS"
    assert decode_records(data, "f") == (SAMPLES, len(data))


@pytest.mark.parametrize(
    "record",
    [
        EntriesRecord(7, 1_700_000_000_000, b"meta", (b"a", b"", b"ccc")),
        EntriesRecord(0, -1, b"", (b"",)),
        EntriesRecord(2**64 - 1, 2**63 - 1, bytes(range(256)), tuple(bytes([i]) * (i * 97) for i in range(20))),
    ],
)
def test_the_callers_entries_encoding_is_the_generic_record_encoding(record: EntriesRecord) -> None:
    # encode_entries (every spooled produce()) builds the record in one join: the same bytes as the header,
    # body() and CRC composed as for every other record type, and its length is the cap's size plus its CRC.
    body = record.body()
    head = b"OSQS" + len(body).to_bytes(4, "big") + b"\x01" + body
    generic = head + zlib.crc32(head).to_bytes(4, "big")
    fast = encode_entries(record.call_no, record.ingestion_time_ms, record.metadata, record.entries)
    assert fast == generic == encode_record(record)
    assert len(fast) - 4 == 9 + 4 + 20 + len(record.metadata) + sum(4 + len(e) for e in record.entries)


GOLDEN = REPO / "tests" / "golden"


def _described(r: dict[str, Any]) -> Any:
    kind = r["type"]
    if kind == "entries":
        entries = tuple(base64.b64decode(e) for e in r["entries"])
        return EntriesRecord(r["call_no"], r["ingestion_time_ms"], base64.b64decode(r["metadata"]), entries)
    if kind == "batch":
        return BatchRecord(
            r["batch_no"], r["first_call"], r["last_call"], r["byte_length"], r["batch_crc32"], r["location"]
        )
    if kind == "attempt":
        return AttemptRecord(r["base"], tuple(r["batch_nos"]), tuple(r["locations"]))
    if kind == "landed":
        return LandedRecord(r["first_sequence"], tuple(r["batch_nos"]))
    return DroppedRecord(r["first_call"], r["last_call"])


def test_the_golden_spool_logs_decode_and_encode_byte_for_byte() -> None:
    spool = json.loads((GOLDEN / "spool.json").read_text(encoding="utf-8"))
    log = (GOLDEN / "spool_log_v1.bin").read_bytes()
    expected = [_described(r) for r in spool["spool_log_v1.bin"]["records"]]
    assert decode_records(log, "v1") == (expected, len(log))
    assert b"".join(encode_record(r) for r in expected) == log
    torn = (GOLDEN / "spool_torn_tail.bin").read_bytes()
    assert decode_records(torn, "torn") == (expected, spool["spool_torn_tail.bin"]["valid_length"])
    with pytest.raises(CorruptSpoolError) as e:
        decode_records((GOLDEN / "spool_bad_record_middle.bin").read_bytes(), "bad")
    assert e.value.offset == spool["spool_bad_record_middle.bin"]["offset"]
    zeros = (GOLDEN / "spool_zero_tail.bin").read_bytes()  # a torn record, then a preallocated file's zeros
    assert decode_records(zeros, "zeros") == (expected, spool["spool_zero_tail.bin"]["valid_length"])


def test_a_torn_tail_is_cut_off_at_open(tmp_path: pathlib.Path) -> None:
    whole = b"".join(encode_record(r) for r in SAMPLES[:1])
    (tmp_path / f"{0:020d}.log").write_bytes(whole + encode_record(SAMPLES[0])[:-3])  # written, never fsync'd
    spool = Spool(str(tmp_path), clock=SystemClock())
    try:
        assert [c.call_no for c in spool.unbatched_calls()] == [7]
        assert (tmp_path / f"{0:020d}.log").read_bytes() == whole
    finally:
        spool.close()


def test_the_log_preallocates_zeros_and_a_reopen_cuts_them_and_appends_after_the_records(
    tmp_path: pathlib.Path,
) -> None:
    log = SpoolLog(str(tmp_path))
    list(log.read_all())
    path = log.write(SAMPLES[:2])
    whole = b"".join(encode_record(r) for r in SAMPLES[:2])
    # fdatasync finds the size already written: the zeros after the records (as a kill -9 leaves them)
    assert (tmp_path / path).read_bytes() == whole + bytes(PREALLOC_MIN_BYTES)
    again = SpoolLog(str(tmp_path))  # the first one never closed: a crash
    assert [r for _, r in again.read_all()] == list(SAMPLES[:2])
    assert (tmp_path / path).read_bytes() == whole  # the zero tail is a clean end, cut
    again.write(SAMPLES[2:3])
    again.close()  # cuts its own zeros
    assert (tmp_path / path).read_bytes() == whole + encode_record(SAMPLES[2])
    assert log._fd is not None
    os.close(log._fd)  # the crashed one's descriptor, without its close() (which would cut the file)


def test_a_valid_record_after_zeros_is_corrupt_spool_not_a_clean_end(tmp_path: pathlib.Path) -> None:
    data = encode_record(SAMPLES[0]) + bytes(100) + encode_record(SAMPLES[1])
    with pytest.raises(CorruptSpoolError) as e:
        decode_records(data, "gap")
    assert e.value.offset == len(encode_record(SAMPLES[0]))


@pytest.mark.parametrize("offset", [5, 9, 20])  # the length, the type, the body
def test_damage_in_the_middle_is_corrupt_spool_not_a_torn_tail(tmp_path: pathlib.Path, offset: int) -> None:
    data = bytearray(b"".join(encode_record(r) for r in SAMPLES))
    data[offset] ^= 0x40
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSpoolError) as e:
        Spool(str(tmp_path), clock=SystemClock())
    assert e.value.path == str(path) and e.value.offset == 0 and "move the file away" in str(e.value)
    assert path.read_bytes() == bytes(data)  # nothing cut
    Spool(str(tmp_path / "other"), clock=SystemClock()).close()  # the lock was released


def test_a_second_owner_is_refused_naming_the_first(tmp_path: pathlib.Path) -> None:
    first = Spool(str(tmp_path), clock=SystemClock())
    try:
        with pytest.raises(InvalidConfigError) as e:
            Spool(str(tmp_path), clock=SystemClock())
        assert e.value.option == "spool_dir" and f"pid {os.getpid()} on" in str(e.value)
        code = (
            "import sys; from osqueue.producer.spool import Spool; from osqueue.clock import SystemClock\n"
            "from osqueue.errors import InvalidConfigError\n"
            "try:\n    Spool(sys.argv[1], clock=SystemClock())\n"
            "except InvalidConfigError as e:\n    print(e); sys.exit(3)\n"
        )
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
        other = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env)
        assert other.returncode == 3, other.stderr
        assert f"owned by pid {os.getpid()}" in other.stdout
        writer_id = first.writer_id
    finally:
        first.close()
    again = Spool(str(tmp_path), clock=SystemClock())
    assert again.writer_id == writer_id and len(bytes.fromhex(writer_id)) == 16
    again.close()


def test_local_durability_delivers_everything_once_and_truncates_the_log(tmp_path: pathlib.Path) -> None:
    store = InMemoryStore()
    with _producer(store, tmp_path, durability="local") as p:
        handles = [p.produce([f"e{i}".encode()], b"m") for i in range(40)]
        p.flush(10)
        assert all(h.done() and h.exception() is None for h in handles)
        # the handles resolve at the CAS; LANDED's fsync and truncation follow off the callers' path (issue 28)
        assert p._uploader is not None and p._uploader.idle(10)
        spool = p._spool
        assert spool is not None and spool.live_bytes() == 0
        assert len(spool.log_files()) == 1 and os.path.getsize(spool.log_files()[0]) == 0
    assert _values(store) == [f"e{i}".encode() for i in range(40)]
    for e in decode_manifest(store.get(KEY).data, KEY).entries:  # each spooled batch carries its integrity record
        integrity = integrity_of(e.extension)
        data = store.get(e.location).data
        assert integrity is not None and (integrity.byte_length, integrity.batch_crc32) == (len(data), zlib.crc32(data))


def test_durability_local_needs_a_spool_and_options_are_checked(tmp_path: pathlib.Path) -> None:
    store = InMemoryStore()
    with pytest.raises(InvalidConfigError, match="durability"):
        Producer(store=store, durability="local")
    with pytest.raises(InvalidConfigError, match="spool_full_policy"):
        Producer(store=store, spool_dir=str(tmp_path), spool_full_policy="newest")
    Producer(store=store, spool_dir=str(tmp_path)).close()  # the failed one released the directory


def _spool_with(tmp_path: pathlib.Path, records: list[Any]) -> None:
    (tmp_path / f"{0:020d}.log").write_bytes(b"".join(encode_record(r) for r in records))


def _named_batch(store: Any, calls: list[EntriesRecord], location: str) -> BatchRecord:
    records = [e for c in calls for e in c.entries]
    data = encode_batch(records, Compression.NONE)
    store.put(location, data)
    return BatchRecord(0, calls[0].call_no, calls[-1].call_no, len(data), zlib.crc32(data), location)


CALLS = [EntriesRecord(i, 1_700_000_000_000, b"", (f"c{i}".encode(),)) for i in range(3)]
LOC = "ingest/01JD0000000000000000000000.batch"


@pytest.mark.parametrize("step", ["entries", "batch", "attempt", "cas-landed"])
def test_a_restart_after_a_crash_at_each_step_appends_every_call_once(tmp_path: pathlib.Path, step: str) -> None:
    store = InMemoryStore()
    records: list[Any] = list(CALLS)
    if step != "entries":
        batch = _named_batch(store, CALLS[:2], LOC)
        records.append(batch)
        # the landed case: the CAS went in, the process died before its LANDED record
        if step in ("attempt", "cas-landed"):
            records.append(AttemptRecord(0, (0,), (LOC,)))
        if step == "cas-landed":
            with QueueProducer(store, KEY) as q:
                q.enqueue(LOC, [MetadataItem(0, 1_700_000_000_000, b""), MetadataItem(1, 1_700_000_000_000, b"")])
    _spool_with(tmp_path, records)
    metrics = MetricsRegistry()
    with _producer(store, tmp_path, metrics=metrics) as p:
        p.flush(10)
    assert _values(store) == [b"c0", b"c1", b"c2"]
    assert metrics.counter(SPOOL_REPLAYED_BATCHES).value == (0 if step == "entries" else 1)
    with _producer(store, tmp_path) as p:  # settled: a second restart adds nothing
        p.flush(10)
    assert _values(store) == [b"c0", b"c1", b"c2"]


def test_an_undecidable_replay_is_ambiguous_commit_and_the_batch_stays_spooled(tmp_path: pathlib.Path) -> None:
    store = InMemoryStore()
    store.put(KEY, footer_bytes(0, 5, 0))  # sequences 0..4 were appended and all dequeued; no receipts
    _spool_with(tmp_path, [*CALLS[:2], _named_batch(store, CALLS[:2], LOC), AttemptRecord(0, (0,), (LOC,))])
    p = _producer(store, tmp_path)
    with pytest.raises(AmbiguousCommitError, match="sequence 0"):
        p.flush(10)
    with pytest.raises(AmbiguousCommitError):
        p.close()
    assert _values(store) == []  # never appended on a guess
    again = Spool(str(tmp_path), clock=SystemClock())
    assert [b.record.batch_no for b in again.pending_batches()] == [0]
    again.close()


class _Outage(WrappedStore):
    """The store is unreachable while ``down`` is set (every call raises StoreError)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.down = threading.Event()
        self.failed = 0

    def _check(self) -> None:
        if self.down.is_set():
            self.failed += 1
            raise StoreError("unreachable (test outage)")

    def get(self, key: str) -> Any:
        self._check()
        return super().get(key)

    def put(self, key: str, data: bytes) -> None:
        self._check()
        super().put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> Any:
        self._check()
        return super().put_if_absent(key, data)

    def put_if_version_matches(self, key: str, data: bytes, expected_version: Any) -> Any:
        self._check()
        return super().put_if_version_matches(key, data, expected_version)


def test_an_outage_only_delays_delivery(tmp_path: pathlib.Path) -> None:
    store = _Outage(InMemoryStore())
    metrics = MetricsRegistry()
    # More calls than max_buffered_inputs wait: the spool's cap bounds them, not the in-memory buffer.
    with _producer(
        store, tmp_path, durability="local", metrics=metrics, max_buffered_inputs=5, flush_size_bytes=8
    ) as p:
        p.produce([b"before"]).wait_durable(5)
        store.down.set()
        handles = [p.produce([f"e{i}".encode()]) for i in range(20)]  # each returns: fsync'd locally
        deadline = time.monotonic() + 5
        while store.failed < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.failed >= 3 and not any(h.done() for h in handles)
        assert metrics.gauge(SPOOL_BYTES).value >= 20 * len(b"e0")
        p.produce([b"last"])  # the gauges move with the spool (e0 waited through >= 3 backoffs)
        assert metrics.gauge(SPOOL_OLDEST_ENTRY_AGE_SECONDS).value > 0
        store.down.clear()
        for h in handles:
            h.wait_durable(10)
        p.flush(10)
        assert p._uploader is not None and p._uploader.idle(10)  # settled once LANDED is fsync'd
        assert metrics.gauge(SPOOL_BYTES).value == 0
    assert _values(store) == [b"before"] + [f"e{i}".encode() for i in range(20)] + [b"last"]
    assert len(decode_manifest(store.get(KEY).data, KEY).entries) >= 20 * 2 // 8  # batches of flush_size_bytes


def test_manifest_writes_of_unknown_outcome_are_retried_past_the_budget(tmp_path: pathlib.Path) -> None:
    store = WrappedStore(InMemoryStore())
    down = threading.Event()

    def unanswered(key: str, data: bytes, expected: Any, apply: Any) -> Any:
        if down.is_set() and key == KEY:
            raise StoreError("timed out after the request was sent (test): outcome unknown")
        return apply()

    store.on_conditional = unanswered
    budget = RetryPolicy(base_delay=0.001, max_delay=0.005, max_elapsed=0.1)
    with _producer(store, tmp_path, durability="local", retry=budget) as p:
        p.produce([b"first"]).wait_durable(5)
        down.set()
        handle = p.produce([b"second"])
        spool = p._spool
        assert spool is not None
        past_budgets = time.monotonic() + 3 * budget.max_elapsed
        while time.monotonic() < past_budgets or not spool.attempts_of(1):
            time.sleep(0.01)
        assert not handle.done()  # the CAS loop gave up (AmbiguousCommit) about 3 times; the spool did not
        down.clear()
        handle.wait_durable(10)
    assert _values(store) == [b"first", b"second"]


def test_backpressure_raises_queue_full_naming_the_spool_and_drops_nothing(tmp_path: pathlib.Path) -> None:
    store = _Outage(InMemoryStore())
    with _producer(store, tmp_path, spool_max_bytes=200, spool_full_timeout=0.2) as p:
        store.down.set()
        handles = []
        with pytest.raises(QueueFullError) as e:
            for _ in range(50):
                handles.append(p.produce([b"x" * 40]))
        assert str(tmp_path) in str(e.value) and "spool_max_bytes" in str(e.value)
        assert 0 < len(handles) < 50
        store.down.clear()
        p.flush(10)
    assert len(_values(store)) == len(handles)


def test_drop_oldest_drops_exactly_what_it_counts(tmp_path: pathlib.Path) -> None:
    store = _Outage(InMemoryStore())
    metrics = MetricsRegistry()
    # One batch in flight at a time: the calls behind it stay unbatched, so droppable. The first call
    # alone is that batch (its PUT failing) before the others come; else a slow uploader could batch
    # every call the cap holds, leaving nothing to drop.
    with _producer(store, tmp_path, spool_max_bytes=300, spool_full_policy="drop_oldest", metrics=metrics) as p:
        store.down.set()
        handles = [p.produce([b"000" + b"x" * 37])]
        deadline = time.monotonic() + 10
        while store.failed == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert store.failed > 0, "the first batch's PUT was never tried"
        handles += [p.produce([f"{i:03d}".encode() + b"x" * 37]) for i in range(1, 30)]
        store.down.clear()
        with pytest.raises(QueueFullError, match="dropped by drop_oldest"):
            p.flush(10)
        p.flush(10)
    dropped = [h for h in handles if h.exception() is not None]
    delivered = _values(store)
    assert dropped and metrics.counter(SPOOL_DROPPED_ENTRIES).value == len(dropped)
    assert len(delivered) + len(dropped) == 30 and len(set(delivered)) == len(delivered)
    assert all(isinstance(h.exception(), QueueFullError) for h in dropped)


_CHILD = """
import sys
from osqueue.producer import Producer
p = Producer(sys.argv[1], spool_dir=sys.argv[2], durability=sys.argv[3], flush_interval=0.005)
i = 0
while True:
    p.produce([b"v%d" % i])
    print(i, flush=True)
    i += 1
"""


@pytest.mark.parametrize("durability", ["local", "queue"])
def test_kill_9_then_a_restart_delivers_each_returned_produce_exactly_once(
    tmp_path: pathlib.Path, durability: str
) -> None:
    # docs/format.md §9: with durability="queue" too, a spooled produce() returns once its record is
    # written (in the page cache), so a kill -9 of the process loses no call that returned.
    queue, spool = tmp_path / "queue", tmp_path / "spool"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(queue), str(spool), durability],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    returned: list[int] = []
    try:
        for line in child.stdout:
            returned.append(int(line))
            if len(returned) >= 300:
                break
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    returned += [int(line) for line in child.stdout.read().split()]  # printed before the kill
    assert len(returned) >= 300
    with Producer(str(queue), spool_dir=str(spool), flush_interval=0.005) as p:
        p.flush(30)
    values = _values(_local_store(queue))
    assert len(values) == len(set(values))  # nothing twice, returned or not
    assert {b"v%d" % i for i in returned} <= set(values)


def _local_store(path: pathlib.Path) -> Any:
    from osqueue.store import open_store

    return open_store(str(path))


def test_a_spooled_producer_starts_in_an_outage_and_replays_when_the_store_is_back(tmp_path: pathlib.Path) -> None:
    # Issue 28's chaos case: a producer restarted on its spool while the store is unreachable. It used to
    # fail in its constructor (the data prefix's owner claim, a GET); it now claims from its upload thread.
    store = _Outage(InMemoryStore())
    with _producer(store, tmp_path, durability="local") as p:
        p.produce([b"first"]).wait_durable(5)
    store.down.set()
    with _producer(store, tmp_path, durability="local") as p:
        handle = p.produce([b"in the outage"])  # returned: fsync'd locally
        deadline = time.monotonic() + 5
        while store.failed < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.failed >= 2 and not handle.done()
        store.down.clear()
        handle.wait_durable(10)
    assert _values(store) == [b"first", b"in the outage"]


class _ManifestWrites(WrappedStore):
    """Counts the manifest's conditional writes and the batches each carried; holds the first until ``gate``."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.gate = threading.Event()
        self.gate.set()
        self.blocked = threading.Event()  # a manifest write reached the gate
        self.sizes: list[int] = []
        self.batch_puts = 0

        def hook(key: str, data: bytes, expected: Any, apply: Any) -> Any:
            if key == KEY:
                self.blocked.set()
                self.gate.wait(10)
                before = 0 if expected is None else len(decode_manifest(self.inner.get(KEY).data, KEY).entries)
                outcome = apply()
                self.sizes.append(len(decode_manifest(data, KEY).entries) - before)
                return outcome
            return apply()

        def on_put(key: str, data: bytes) -> None:
            if key.endswith(".batch"):
                with self.lock:
                    self.batch_puts += 1

        self.on_conditional = hook
        self.on_put = on_put


def _calls(n: int) -> list[EntriesRecord]:
    return [EntriesRecord(i, 1_700_000_000_000, b"", (f"c{i}".encode(),)) for i in range(n)]


def _named(store: Any, calls: list[EntriesRecord], batch_no: int, location: str) -> BatchRecord:
    r = _named_batch(store, calls, location)
    return BatchRecord(batch_no, r.first_call, r.last_call, r.byte_length, r.batch_crc32, r.location)


LOCS = [f"ingest/01JD00000000000000000000{i:02d}.batch" for i in range(3)]


def test_batches_put_before_a_crash_are_replayed_in_one_manifest_write_in_spool_order(tmp_path: pathlib.Path) -> None:
    # Issue 28: the uploader appends several batches per manifest write. A crash after three BATCH records
    # and their PUTs, before any ATTEMPT: the replay appends the three in one write, in batch order, once.
    inner = InMemoryStore()
    calls = _calls(6)
    batches = [_named(inner, calls[2 * i : 2 * i + 2], i, LOCS[i]) for i in range(3)]
    _spool_with(tmp_path, [*calls, *batches])
    store = _ManifestWrites(inner)
    metrics = MetricsRegistry()
    with _producer(store, tmp_path, metrics=metrics) as p:
        p.flush(10)
    assert store.sizes == [3]
    assert [e.location for e in decode_manifest(inner.get(KEY).data, KEY).entries] == LOCS
    assert _values(inner) == [f"c{i}".encode() for i in range(6)]
    assert metrics.counter(SPOOL_REPLAYED_BATCHES).value == 3
    with _producer(store, tmp_path) as p:  # settled: a second restart adds nothing
        p.flush(10)
    assert store.sizes == [3] and _values(inner) == [f"c{i}".encode() for i in range(6)]


@pytest.mark.parametrize("landed", [True, False])
def test_a_crash_after_the_attempt_of_a_several_batch_write_appends_each_once(
    tmp_path: pathlib.Path, landed: bool
) -> None:
    # One ATTEMPT record names the three batches of one write. Whether that write landed (the process died
    # before LANDED) or not, the replay resolves the three as that one write: each batch once, in order.
    inner = InMemoryStore()
    calls = _calls(6)
    batches = [_named(inner, calls[2 * i : 2 * i + 2], i, LOCS[i]) for i in range(3)]
    _spool_with(tmp_path, [*calls, *batches, AttemptRecord(0, (0, 1, 2), tuple(LOCS))])
    if landed:
        with QueueProducer(inner, KEY) as q:
            for i in range(3):
                q.enqueue(LOCS[i], [MetadataItem(0, 1_700_000_000_000, b""), MetadataItem(1, 1_700_000_000_000, b"")])
    store = _ManifestWrites(inner)
    with _producer(store, tmp_path) as p:
        p.flush(10)
    assert store.sizes == ([] if landed else [3])
    locations = [e.location for e in decode_manifest(inner.get(KEY).data, KEY).entries]
    # not landed: their ULIDs are old, so they are PUT again under fresh names (stale, docs/format.md §6)
    assert locations == LOCS if landed else len(set(locations) - set(LOCS)) == 3
    assert _values(inner) == [f"c{i}".encode() for i in range(6)]
    again = Spool(str(tmp_path), clock=SystemClock())
    assert again.pending_batches() == [] and again.unbatched_calls() == []
    again.close()


def test_a_spooled_producer_puts_ahead_and_appends_several_batches_per_manifest_write(tmp_path: pathlib.Path) -> None:
    # Issue 28: while a manifest write is in flight, the next batches are PUT and then go into the next
    # write together (as an unspooled producer's group commit does). It used to be one write per batch,
    # each waited for before the next batch's PUT.
    inner = InMemoryStore()
    store = _ManifestWrites(inner)
    store.gate.clear()  # the first manifest write waits
    with _producer(store, tmp_path, durability="local", flush_size_bytes=1) as p:
        handles = [p.produce([b"e0"])]
        assert store.blocked.wait(10), "the first batch's manifest write never started"
        handles += [p.produce([f"e{i}".encode()]) for i in range(1, 5)]  # one batch each
        deadline = time.monotonic() + 10
        while store.batch_puts < 5 and time.monotonic() < deadline:
            time.sleep(0.005)
        puts_while_blocked = store.batch_puts
        store.gate.set()
        p.flush(10)
        assert all(h.exception() is None for h in handles)
    assert puts_while_blocked == 5
    assert store.sizes == [1, 4]  # the held write (e0 alone), then one with every batch PUT meanwhile
    assert _values(inner) == [f"e{i}".encode() for i in range(5)]
