"""The Producer: flush triggers, backpressure, close, failures, handles, many threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
from helpers import ManualClock, WrappedStore, assert_well_formed

from osqueue.consumer import Consumer
from osqueue.errors import IllegalQueueStateError, InvalidConfigError, StoreError
from osqueue.format import Compression, MetadataItem, decode_batch, decode_manifest
from osqueue.metrics import MANIFEST_WRITES, MetricsRegistry
from osqueue.producer import Producer, WriteHandle
from osqueue.queue import RetryPolicy
from osqueue.store import CasOutcome, InMemoryStore, ObjectVersion

KEY = "ingest/manifest"
HOUR = 3600.0


def _producer(store: Any, **kw: Any) -> Producer:
    kw.setdefault("retry", RetryPolicy(base_delay=0.0005, max_delay=0.005))
    return Producer(store=store, **kw)


def _entries(store: Any) -> list[Any]:
    obj = store.get(KEY)
    return [] if obj is None else decode_manifest(obj.data, KEY).entries


def test_flush_by_interval(mem_store: InMemoryStore) -> None:
    with _producer(mem_store, flush_interval=0.05) as p:
        h = p.produce([b"a"])
        durable = h.wait_durable(5)  # neither flush() nor close() was called
        assert durable.sequence == 0 and durable.start_index == 0
        assert decode_batch(mem_store.get(durable.location).data, durable.location) == [b"a"]


def test_a_linger_of_zero_flushes_at_once_and_batches_what_arrived_meanwhile(mem_store: InMemoryStore) -> None:
    with _producer(mem_store, flush_interval=0) as p:  # flush_interval is the linger (Kafka's linger.ms)
        handles = [p.produce([f"e{i}".encode()]) for i in range(20)]
        durable = [h.wait_durable(5) for h in handles]  # neither flush() nor close() was called
    values = [v.decode() for e in _entries(mem_store) for v in decode_batch(mem_store.get(e.location).data, "k")]
    assert values == [f"e{i}" for i in range(20)]
    assert [d.sequence for d in durable] == sorted(d.sequence for d in durable)


def test_eager_flush_sends_a_lone_produce_without_waiting_out_the_linger(mem_store: InMemoryStore) -> None:
    with _producer(mem_store, flush_interval=HOUR, eager_flush=True) as p:
        durable = p.produce([b"a"]).wait_durable(5)  # an hour's linger, no flush(): nothing else was in flight
        assert decode_batch(mem_store.get(durable.location).data, durable.location) == [b"a"]


def test_eager_flush_batches_what_arrives_while_a_batch_is_in_flight(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)
    in_flight, release = threading.Event(), threading.Event()

    def held(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        if not in_flight.is_set():  # the first batch's manifest write waits until the test lets it go
            in_flight.set()
            assert release.wait(5)
        return apply()

    with _producer(store, flush_interval=HOUR, eager_flush=True) as p:
        store.on_conditional = held  # after the constructor's claim of the data prefix
        first = p.produce([b"a"])
        assert in_flight.wait(5)
        later = [p.produce([b"b"]), p.produce([b"c"])]  # the first is in flight: these linger together
        time.sleep(0.1)
        assert not any(h.done() for h in later)
        release.set()  # the first lands: nothing in flight, so the lingering batch goes at once
        a, b, c = first.wait_durable(5), later[0].wait_durable(5), later[1].wait_durable(5)
    assert a.location != b.location == c.location and (b.start_index, c.start_index) == (0, 1)
    assert [len(decode_batch(mem_store.get(e.location).data, "k")) for e in _entries(mem_store)] == [1, 2]


def test_without_eager_flush_a_lone_produce_waits_out_the_linger(mem_store: InMemoryStore) -> None:
    with _producer(mem_store, flush_interval=HOUR) as p:
        h = p.produce([b"a"])
        time.sleep(0.2)
        assert not h.done() and _entries(mem_store) == []  # the default: the linger stands


def test_flush_by_size(mem_store: InMemoryStore) -> None:
    with _producer(mem_store, flush_interval=HOUR, flush_size_bytes=10) as p:
        first = p.produce([b"12345"], b"m")  # 6 bytes with the metadata: below the limit
        time.sleep(0.2)
        assert not first.done() and _entries(mem_store) == []
        second = p.produce([b"abc", b"d"])  # 10 bytes: reaches the limit
        a, b = first.wait_durable(5), second.wait_durable(5)
        assert a.location == b.location and (a.start_index, b.start_index) == (0, 1)
        entries = _entries(mem_store)
        assert len(entries) == 1
        assert [(m.start_index, m.payload) for m in entries[0].metadata] == [(0, b"m"), (1, b"")]
        assert decode_batch(mem_store.get(a.location).data, "k") == [b"12345", b"abc", b"d"]


def test_backpressure_blocks_produce_until_the_flush_thread_takes_inputs(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)
    uploading, release = threading.Event(), threading.Event()

    def slow_put(key: str, data: bytes) -> None:
        uploading.set()
        assert release.wait(10)

    store.on_put = slow_put
    p = _producer(store, flush_interval=0.01, max_buffered_inputs=2)
    first = p.produce([b"0"])
    assert uploading.wait(5)  # the flush thread is stuck uploading the first batch
    queued = [p.produce([b"1"]), p.produce([b"2"])]  # fills the buffer
    blocked: list[WriteHandle] = []
    t = threading.Thread(target=lambda: blocked.append(p.produce([b"3"])))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not blocked  # produce() blocks while the buffer is full
    release.set()
    t.join(5)
    assert not t.is_alive() and len(blocked) == 1
    for h in [first, *queued, *blocked]:
        h.wait_durable(5)
    p.close()


def test_close_flushes_and_later_produce_raises(mem_store: InMemoryStore) -> None:
    p = _producer(mem_store, flush_interval=HOUR)
    h = p.produce([b"x", b""], b"meta")
    assert not h.done()
    p.close()
    assert h.done() and h.wait_durable(0).sequence == 0
    assert _entries(mem_store)[0].metadata[0].payload == b"meta"
    with pytest.raises(IllegalQueueStateError):
        p.produce([b"y"])
    p.close()  # idempotent


def test_flush_waits_for_durability(mem_store: InMemoryStore) -> None:
    with _producer(mem_store, flush_interval=HOUR) as p:
        hs = [p.produce([bytes([i])]) for i in range(5)]
        p.flush()
        assert all(h.done() for h in hs)
        assert len({h.wait_durable(0).location for h in hs}) == 1  # one batch


def test_upload_failure_fails_every_handle_of_the_batch_with_the_same_error(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)

    def failing_put(key: str, data: bytes) -> None:
        raise StoreError("disk full (test)")

    store.on_put = failing_put
    p = _producer(store, flush_interval=HOUR)
    hs = [p.produce([b"a"]), p.produce([b"b"]), p.produce([b"c"])]
    with pytest.raises(StoreError, match="disk full"):
        p.flush()
    errors = [h.exception(1) for h in hs]
    assert isinstance(errors[0], StoreError) and all(e is errors[0] for e in errors)
    with pytest.raises(StoreError):
        hs[1].try_result()
    store.on_put = None
    after = p.produce([b"d"])  # the producer keeps working
    p.close()
    assert after.wait_durable(0).sequence == 0
    assert _entries(mem_store)[0].location == after.wait_durable(0).location


@pytest.mark.parametrize("applied", [False, True], ids=["fails-before-writing", "reply-lost-after-writing"])
def test_producer_starts_when_the_store_fails_the_owner_records_create(applied: bool, mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)
    failed: list[str] = []

    def once(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        if key.endswith("/osqueue.owner") and not failed:
            failed.append(key)
            if applied:
                apply()
            raise StoreError(f"injected failure of the create of '{key}'")
        return apply()

    store.on_conditional = once
    with Producer(store=store, flush_interval=3600) as p:
        h = p.produce([b"a"])
        p.flush()
        assert h.result(5).sequence == 0
    assert failed == ["ingest/osqueue.owner"]
    owner = mem_store.get("ingest/osqueue.owner")
    assert owner is not None and b'"manifest":"ingest/manifest"' in owner.data


def test_manifest_failure_fails_every_handle(mem_store: InMemoryStore) -> None:
    store = WrappedStore(mem_store)

    def hook(key: str, data: bytes, expected: ObjectVersion | None, apply: Callable[[], CasOutcome]) -> CasOutcome:
        raise StoreError("403 (test)", outcome_known=True)

    p = _producer(store, flush_interval=HOUR)
    store.on_conditional = hook  # after the producer claimed the data prefix
    hs = [p.produce([b"a"]), p.produce([b"b"])]
    with pytest.raises(StoreError):
        p.close()
    assert hs[0].exception(0) is hs[1].exception(0)


def test_handle_is_a_future_that_cannot_be_cancelled(mem_store: InMemoryStore) -> None:
    clock = ManualClock(1767225600500)
    with _producer(mem_store, flush_interval=HOUR, clock=clock) as p:
        h = p.produce([b"a"])
        assert isinstance(h, Future)
        assert h.cancel() is False and not h.cancelled()
        assert h.try_result() is None
        assert h.ingestion_time_ms == 1767225600500
        with pytest.raises(TimeoutError):
            h.wait_durable(0.05)
        p.flush()
        assert h.try_result() == h.wait_durable()
    assert _entries(mem_store)[0].metadata == [MetadataItem(0, 1767225600500, b"")]


@pytest.mark.parametrize(
    "bad",
    [dict(flush_interval=-0.001), dict(flush_size_bytes=0), dict(max_buffered_inputs=0), dict(compression="lz4"),
     dict(manifest_path="/abs"), dict(data_path_prefix="../x"), dict(gc_grace_period=-1), dict(eager_flush="yes")],
)  # fmt: skip
def test_invalid_options(bad: dict[str, Any], mem_store: InMemoryStore) -> None:
    option = next(iter(bad))
    with pytest.raises(InvalidConfigError, match=f"'{option}'"):
        Producer(store=mem_store, **bad)


def test_invalid_produce_arguments(mem_store: InMemoryStore) -> None:
    with _producer(mem_store) as p:
        with pytest.raises(InvalidConfigError, match="at least one entry"):
            p.produce([])
        with pytest.raises(InvalidConfigError):
            p.produce(b"not-a-list")  # type: ignore[arg-type]
        with pytest.raises(InvalidConfigError):
            p.produce(["text"])  # type: ignore[list-item]
    with pytest.raises(InvalidConfigError):
        Producer()
    with pytest.raises(InvalidConfigError):
        Producer("memory://x", store=mem_store)


def test_zstd_producer_writes_zstd_batches(mem_store: InMemoryStore) -> None:
    with _producer(mem_store, flush_interval=HOUR, compression="zstd") as p:
        h = p.produce([b"z" * 1000, b""])
    loc = h.wait_durable(0).location
    data = mem_store.get(loc).data
    assert data[-7] == Compression.ZSTD and len(data) < 200
    assert decode_batch(data, loc) == [b"z" * 1000, b""]


def test_flush_thread_is_named(mem_store: InMemoryStore) -> None:
    with _producer(mem_store):
        assert "osqueue-producer-flush" in {t.name for t in threading.enumerate()}


def test_metrics(mem_store: InMemoryStore) -> None:
    metrics = MetricsRegistry()
    with _producer(mem_store, flush_interval=HOUR, metrics=metrics) as p:
        p.produce([b"abc", b"de"], b"m")
    assert metrics.counter("buffer.batches_flushed").value == 1
    assert metrics.counter("buffer.entries_flushed").value == 2
    assert metrics.counter("buffer.bytes_flushed").value == 6
    assert metrics.counter("buffer.bytes_written").value == 4 + 3 + 4 + 2 + 7
    assert metrics.counter("buffer.manifest_writes", role="producer").value == 1
    assert metrics.histogram("buffer.flush_duration_seconds").count == 1


def _hammer(store: Any, producers: list[Producer], threads: int, calls: int) -> dict[int, list[bytes]]:
    sent: dict[int, list[bytes]] = {t: [] for t in range(threads)}
    errors: list[BaseException] = []

    def work(t: int) -> None:
        p = producers[t % len(producers)]
        try:
            handles = []
            for i in range(calls):
                records = [f"t{t}-{i}-{j}".encode() for j in range(i % 3 + 1)]
                sent[t].extend(records)
                handles.append(p.produce(records, f"t{t}".encode()))
                if i % 5 == 4:
                    time.sleep(0.003)  # spread the calls over several flushes
            for h in handles:
                h.wait_durable(60)
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    return sent


def _consume_all(store: Any) -> tuple[list[bytes], int]:
    got: list[bytes] = []
    batches = 0
    with Consumer(store=store) as c:
        for batch in c:
            batches += 1
            for i, record in enumerate(batch.entries):
                item = batch.metadata_for(i)
                assert item is not None and record.decode().startswith(item.payload.decode() + "-")
            got.extend(batch.entries)
            c.ack(batch.sequence)
    return got, batches


@pytest.mark.parametrize("kind", ["memory", "local"])
@pytest.mark.parametrize("n_producers", [1, 8])
def test_eight_threads_produce_to_one_manifest(
    kind: str, n_producers: int, mem_store: InMemoryStore, local_store: Any
) -> None:
    store = mem_store if kind == "memory" else local_store
    producers = [_producer(store, flush_interval=0.005) for _ in range(n_producers)]
    sent = _hammer(store, producers, threads=8, calls=30)
    for p in producers:
        p.close()
    assert_well_formed(store)
    got, batches = _consume_all(store)
    assert batches > 1
    assert sorted(got) == sorted(r for rs in sent.values() for r in rs)
    for t, records in sent.items():  # each thread's records arrive in its order
        assert [r for r in got if r.startswith(f"t{t}-".encode())] == records


def test_path_based_producers_share_one_store_and_committer(tmp_path: Any) -> None:
    a = Producer(str(tmp_path), flush_interval=HOUR)
    b = Producer(str(tmp_path), flush_interval=HOUR)
    assert a.store is b.store and a._queue._committer is b._queue._committer
    a.produce([b"a"])
    b.produce([b"b"])
    a.close()
    b.close()
    assert len(_entries(a.store)) == 2


def test_producers_sharing_a_path_keep_their_own_committer_settings(tmp_path: Any) -> None:
    """A with K=2 and B with K=2147483647 on one path: B's appends keep the queue RFC v1 and are counted
    in B's registry, not A's (each producer's committer settings apply; issue 24, item 2)."""
    metrics_a, metrics_b = MetricsRegistry(), MetricsRegistry()
    a = Producer(str(tmp_path), flush_interval=HOUR, manifest_segment_entries=2, metrics=metrics_a)
    b = Producer(str(tmp_path), flush_interval=HOUR, manifest_segment_entries=2147483647, metrics=metrics_b)
    try:
        assert a.store is b.store
        for i in range(8):
            b.produce([b"b%d" % i])
            b.flush()
        assert len(_entries(b.store)) == 8  # decode_manifest reads RFC v1 only: the queue stayed v1
        assert metrics_b.counter(MANIFEST_WRITES, role="producer").value == 8
        assert metrics_a.counter(MANIFEST_WRITES, role="producer").value == 0
    finally:
        a.close()
        b.close()


def test_producers_with_the_same_committer_settings_share_one_committer(tmp_path: Any) -> None:
    registry = MetricsRegistry()
    a = Producer(str(tmp_path), flush_interval=HOUR, manifest_segment_entries=4, metrics=registry)
    b = Producer(str(tmp_path), flush_interval=HOUR, manifest_segment_entries=4, metrics=registry)
    c = Producer(str(tmp_path), flush_interval=HOUR, manifest_segment_entries=5, metrics=registry)
    try:
        assert a._queue._committer is b._queue._committer
        assert c._queue._committer is not a._queue._committer
    finally:
        for p in (a, b, c):
            p.close()
