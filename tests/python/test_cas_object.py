"""The CAS register under the manifest (osqueue.queue.cas_object, JVM: CasObjectSuite), on the
in-memory and the local file store."""

from __future__ import annotations

import pathlib
import random
from collections.abc import Callable

import pytest
from helpers import ManualClock, WrappedStore, lost_reply_hook

from osqueue.metrics import MetricsRegistry
from osqueue.queue import CasCounters, CasLoop, CasObject, RetryPolicy
from osqueue.queue.cas_loop import Done, PreviousAttempt, Write
from osqueue.queue.cas_object import Snapshot
from osqueue.store import PRECONDITION_FAILED, InMemoryStore, LocalFileSystemStore, ObjectStore, Written

KEY = "ingest/manifest.writers/w"
FAST = RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=5)


@pytest.fixture(params=["in-memory", "local"])
def open_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Callable[[], ObjectStore]:
    if request.param == "in-memory":
        return lambda: InMemoryStore("cas-object")
    return lambda: LocalFileSystemStore(tmp_path / "queue")


def test_a_missing_object_reads_as_nothing_and_is_created_once(open_store: Callable[[], ObjectStore]) -> None:
    obj = CasObject(open_store(), KEY)
    assert obj.read() == Snapshot(None, None)
    assert isinstance(obj.write(b"1", None), Written)
    created = obj.read()
    assert created.raw == b"1" and created.version is not None
    assert obj.write(b"2", None) == PRECONDITION_FAILED  # a second create loses: the object exists
    assert obj.read().raw == b"1"


def test_an_object_is_overwritten_only_at_the_version_read(open_store: Callable[[], ObjectStore]) -> None:
    obj = CasObject(open_store(), KEY)
    obj.write(b"1", None)
    first = obj.read()
    written = obj.write(b"2", first.version)
    assert isinstance(written, Written)
    assert obj.write(b"3", first.version) == PRECONDITION_FAILED  # a stale version conflicts
    assert obj.read() == Snapshot(b"2", written.version)


def test_a_loop_settles_a_create_of_unknown_outcome_by_re_reading(open_store: Callable[[], ObjectStore]) -> None:
    inner = open_store()
    store = WrappedStore(inner)
    lost = [True]
    store.on_conditional = lost_reply_hook(lambda: lost.pop() if lost else False)
    loop = CasLoop(CasObject(store, KEY), FAST, ManualClock(), random.Random(7), CasCounters.uncounted())  # type: ignore[arg-type]
    steps: list[PreviousAttempt | None] = []

    def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> Done[str] | Write[str]:
        steps.append(previous)
        if snapshot.raw is not None:
            return Done(snapshot.raw.decode())
        return Write(b"mine", lambda: "written")

    assert loop.run(step) == "mine"  # the re-read found the create that landed
    assert len(steps) == 2 and store.conditional_calls == 1
    assert inner.get(KEY) is not None and inner.get(KEY).data == b"mine"  # type: ignore[union-attr]


def test_a_loop_counts_a_conflict_on_the_counters_it_was_given(open_store: Callable[[], ObjectStore]) -> None:
    inner = open_store()
    inner.put_if_absent(KEY, b"1")
    store = WrappedStore(inner)
    raced = [False]

    def other_writer_first(key: str, data: bytes, expected: object, apply: Callable[[], object]) -> object:
        if not raced[0]:
            raced[0] = True
            inner.put(key, b"7")
        return apply()

    store.on_conditional = other_writer_first  # type: ignore[assignment]
    metrics = MetricsRegistry()
    loop = CasLoop(CasObject(store, KEY), FAST, ManualClock(), random.Random(7), CasCounters.manifest(metrics, "t"))  # type: ignore[arg-type]
    seen = loop.run(lambda snapshot, previous: Write(b"3", lambda: snapshot.raw))
    assert seen == b"7"  # the write that landed was based on the other writer's bytes
    assert inner.get(KEY).data == b"3"  # type: ignore[union-attr]
    assert metrics.counter("buffer.manifest_conflicts", role="t").value == 1
    assert metrics.counter("buffer.manifest_writes", role="t").value == 1
