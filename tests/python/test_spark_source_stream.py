"""The Python data source's stream reader driven as Spark drives it, without a Spark session: named
subscriptions (their position, their own fence, OSQUEUE_NO_SUBSCRIPTION / OSQUEUE_FOREIGN_SUBSCRIPTION as
the JVM source) and admission control (pyspark 4.2's latestOffset(start, limit): maxBatchesPerTrigger,
minBatchesPerTrigger with maxTriggerDelay, Trigger.AvailableNow's target)."""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

pytest.importorskip("pyarrow", reason="osqueue.spark_source needs pyarrow (osqueue[spark])")
pytest.importorskip("pyspark.sql.datasource", reason="the Python data source API (pyspark 4)")

from helpers import ManualClock  # noqa: E402

from osqueue import Producer  # noqa: E402
from osqueue.errors import FencedError  # noqa: E402
from osqueue.format.manifest_codec import decode_manifest  # noqa: E402
from osqueue.queue import ManifestStore  # noqa: E402
from osqueue.queue.subscriptions import Subscriptions  # noqa: E402
from osqueue.spark_source.options import BatchReadOptions, OsqueueSparkError, StreamOptions  # noqa: E402
from osqueue.spark_source.reader import OsqueueBatchReader, OsqueueStreamReader, store_of  # noqa: E402


@dataclass
class ReadMaxFiles:  # pyspark 4.2's limits, as its registry rebuilds them (type name and fields)
    max_files: int


@dataclass
class ReadMinRows:
    min_rows: int


@dataclass
class ReadAllAvailable:
    pass


def _produce(root: pathlib.Path, batches: int, tag: str = "v") -> list[str]:
    """``batches`` queue entries of one record each."""
    values = []
    with Producer(str(root), flush_interval=3600) as producer:
        for i in range(batches):
            values.append(f"{tag}{i}")
            handle = producer.produce([values[-1].encode()])
            producer.flush()
            handle.wait_durable(30)
    return values


def _reader(root: pathlib.Path, clock: ManualClock | None = None, **options: str) -> OsqueueStreamReader:
    parsed = StreamOptions.parse({"path": str(root), **options}, admission_control=True)
    return OsqueueStreamReader(parsed, random.Random(7), clock or ManualClock())


def _values(reader: OsqueueStreamReader, start: dict, end: dict) -> list[str]:
    return [
        v.decode()
        for p in reader.partitions(start, end)
        for batch in reader.read(p)
        for v in batch.column(0).to_pylist()
    ]


def _head(root: pathlib.Path):  # type: ignore[no-untyped-def]
    store = store_of(StreamOptions.parse({"path": str(root)}).location)
    manifests = ManifestStore(store, "ingest/manifest")
    raw, _ = manifests.read_raw()
    return manifests.head(raw)


def _run_batch(reader: OsqueueStreamReader, start: dict, limit: object = None) -> tuple[dict, list[str]]:
    end = reader.latestOffset(start, limit)
    values = _values(reader, start, end)
    reader.commit(end)
    return end, values


def test_each_subscription_reads_every_entry_and_entries_leave_after_both(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    _produce(root, 0)
    subs = Subscriptions(store_of(StreamOptions.parse({"path": str(root)}).location), "ingest/manifest")
    subs.create("audit")
    subs.create("billing")
    expected = _produce(root, 3)
    audit, billing = _reader(root, subscription="audit"), _reader(root, subscription="billing")

    start = audit.initialOffset()
    assert start["subscription"] == "audit" and isinstance(start["subscriptionIncarnation"], int)
    end, values = _run_batch(audit, start, ReadAllAvailable())
    assert values == expected
    assert len(_head(root).tail_entries()) == 3, "billing has not read them: they stay queued"
    assert _head(root).sections.subscription("audit").next == end["nextSequence"]

    b_start = billing.initialOffset()
    b_end, b_values = _run_batch(billing, b_start, ReadAllAvailable())
    assert b_values == expected and b_end["nextSequence"] == end["nextSequence"]
    assert _head(root).tail_entries() == [], "both subscriptions passed: the entries left the queue"

    # A checkpoint of one reader is refused by another, as the JVM source refuses it.
    with pytest.raises(OsqueueSparkError) as foreign:
        billing.partitions(start, end)
    assert foreign.value.condition == "OSQUEUE_FOREIGN_SUBSCRIPTION"
    assert "subscription 'audit'" in str(foreign.value) and "subscription 'billing'" in str(foreign.value)
    unnamed = _reader(root)
    with pytest.raises(OsqueueSparkError, match=r"OSQUEUE_FOREIGN_SUBSCRIPTION.*the unnamed reader"):
        unnamed.latestOffset(start, ReadAllAvailable())


def test_a_second_reader_of_a_subscription_fences_only_that_subscription(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    _produce(root, 0)
    subs = Subscriptions(store_of(StreamOptions.parse({"path": str(root)}).location), "ingest/manifest")
    subs.create("audit")
    subs.create("billing")
    _produce(root, 2)
    first, other = _reader(root, subscription="audit"), _reader(root, subscription="billing")
    start, other_start = first.initialOffset(), other.initialOffset()
    second = _reader(root, subscription="audit")
    second.initialOffset()
    with pytest.raises(FencedError):
        first.latestOffset(start, ReadAllAvailable())
    _, values = _run_batch(other, other_start, ReadAllAvailable())  # billing's reader is not fenced
    assert values == ["v0", "v1"]


def test_a_missing_subscription_is_refused_unless_created(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    expected = _produce(root, 2)
    with pytest.raises(OsqueueSparkError) as missing:
        _reader(root, subscription="audit").initialOffset()
    assert missing.value.condition == "OSQUEUE_NO_SUBSCRIPTION" and "'audit'" in str(missing.value)
    with pytest.raises(OsqueueSparkError, match="OSQUEUE_NO_SUBSCRIPTION"):
        OsqueueBatchReader(BatchReadOptions.parse({"path": str(root), "subscription": "audit"})).partitions()
    created = _reader(root, subscription="audit", createSubscription="true")
    start = created.initialOffset()
    _, values = _run_batch(created, start, ReadAllAvailable())
    assert values == expected  # created at the queue's first entry
    # A batch read from the subscription's position: nothing left for it, and it acks nothing.
    later = _produce(root, 1, tag="late")
    batch = OsqueueBatchReader(BatchReadOptions.parse({"path": str(root), "subscription": "audit"}))
    assert [e.sequence for p in batch.partitions() for e in p.entries] == [_head(root).next_sequence - 1]
    assert later == ["late0"] and _head(root).sections.subscription("audit").next == _head(root).next_sequence - 1


def test_max_batches_per_trigger_caps_each_micro_batch(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    expected = _produce(root, 5)
    reader = _reader(root, maxBatchesPerTrigger="2")
    start = reader.initialOffset()
    seen, sizes = [], []
    for _ in range(4):
        end, values = _run_batch(reader, start, ReadMaxFiles(2))
        if end == start:
            break
        sizes.append(end["nextSequence"] - start["nextSequence"])
        seen += values
        start = end
    assert sizes == [2, 2, 1] and seen == expected
    assert _head(root).tail_entries() == []
    # Spark's ReadAllAvailable overrides the options.
    more = _produce(root, 3, tag="w")
    end, values = _run_batch(reader, start, ReadAllAvailable())
    assert values == more


def test_min_batches_per_trigger_waits_up_to_max_trigger_delay(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    clock = ManualClock()
    _produce(root, 2)
    reader = _reader(root, clock, minBatchesPerTrigger="3", maxTriggerDelay="10s")
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadMinRows(3)) == start, "2 < 3 queued and no delay passed: wait"
    clock.advance(11)
    end = reader.latestOffset(start, ReadMinRows(3))
    assert end["nextSequence"] - start["nextSequence"] == 2, "the delay passed: read what there is"
    reader.commit(end)
    _produce(root, 3, tag="w")
    after = reader.latestOffset(end, ReadMinRows(3))
    assert after["nextSequence"] - end["nextSequence"] == 3


def test_available_now_reads_up_to_the_queue_end_when_the_run_began(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    expected = _produce(root, 3)
    reader = _reader(root, minBatchesPerTrigger="10", maxBatchesPerTrigger="20")
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    _produce(root, 2, tag="after")  # lands after the run began: not this run's
    seen = []
    for _ in range(3):
        end, values = _run_batch(reader, start, ReadMaxFiles(2))
        if end == start:
            break
        seen += values
        start = end
    assert seen == expected, "capped at 2 per batch, never waiting for minBatchesPerTrigger, stopping at the target"
    assert [e.sequence for e in _head(root).tail_entries()] == [3, 4]


def test_available_now_dequeues_its_last_micro_batch_without_stop(tmp_path: pathlib.Path) -> None:
    """Spark (4.2+, Trigger.AvailableNow) never calls commit(end) for a run's last micro-batch: it is
    committed to the source when the next one is planned, and the run ends first. Its last call is a
    latestOffset that plans nothing. Driven in Spark's order, with no stop() (pyspark tears the Python
    worker down, and stop() can lose that race), the run leaves nothing it delivered queued, and never
    dequeues a micro-batch before Spark has asked past it."""
    root = tmp_path / "q"
    expected = _produce(root, 3)
    reader = _reader(root, maxBatchesPerTrigger="2")
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    end0 = reader.latestOffset(start, ReadMaxFiles(2))  # batch 0: offset log, then run
    seen = _values(reader, start, end0)
    end1 = reader.latestOffset(end0, ReadMaxFiles(2))  # batch 1 planned once batch 0 is in the commit log
    reader.commit(end0)  # Spark commits batch 0 to the source after writing batch 1's offsets
    seen += _values(reader, end0, end1)
    assert seen == expected
    assert [e.sequence for e in _head(root).tail_entries()] == [2], "batch 1 is not committed yet"
    assert reader.latestOffset(end1, ReadMaxFiles(2)) == end1  # the run's last call: nothing more to plan
    assert _head(root).tail_entries() == [], "the last micro-batch stayed queued"


def test_outside_available_now_only_commit_dequeues(tmp_path: pathlib.Path) -> None:
    """A trigger other than AvailableNow keeps the last micro-batch queued until Spark commits it (at
    the next micro-batch, or stop() through the checkpoint's commit log)."""
    root = tmp_path / "q"
    _produce(root, 2)
    reader = _reader(root)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    _values(reader, start, end)
    assert reader.latestOffset(end, ReadAllAvailable()) == end
    assert [e.sequence for e in _head(root).tail_entries()] == [0, 1]


_TEARDOWN = r"""
import contextlib, json, os, pathlib, random, signal, sys, time
import osqueue.store.local_file_system_store as local_store
from osqueue import Producer
from osqueue.spark_source.options import StreamOptions
from osqueue.spark_source.reader import OsqueueStreamReader

root, ckpt = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
with Producer(str(root), flush_interval=3600) as producer:
    handle = producer.produce([b"a", b"b"])
    producer.flush()
    handle.wait_durable(30)
reader = OsqueueStreamReader(StreamOptions.parse({"path": str(root), "checkpointLocation": str(ckpt)}), random.Random(7))
start = reader.initialOffset()  # takes the queue over (and installs the SIGTERM handler: the main thread)
end = reader.latestOffset()
reader.partitions(start, end)
for log, text in (("offsets", 'v1\n{}\n' + json.dumps(end)), ("commits", 'v1\n{"nextBatchWatermarkMs":0}')):
    (ckpt / log).mkdir(parents=True, exist_ok=True)
    (ckpt / log / "0").write_text(text)

# Spark's second SIGTERM (PythonWorkerFactory.stop() destroys the worker again) lands while stop()'s
# dequeue holds the local store's write lock.
real_held, armed = local_store.held, [True]

@contextlib.contextmanager
def held(*args, **kwargs):
    with real_held(*args, **kwargs):
        if armed and armed.pop():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # bytecodes: the pending handler runs here
                pass
        yield

local_store.held = held
os.kill(os.getpid(), signal.SIGTERM)  # the first SIGTERM (stopWorker)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # the worker's main thread, waiting on its socket
    signal.pause()
print("still alive")
"""


def test_a_second_sigterm_during_stop_does_not_lose_the_dequeue(tmp_path: pathlib.Path) -> None:
    """Spark ends the stream reader's worker with two SIGTERMs back to back. The second one, handled
    while stop() held the local store's write lock, re-entered stop() on the same thread: it waited 30 s
    for that lock, then ended the process before the last micro-batch was dequeued (the intermittent
    Connect failure of tests/spark/python_source_scenario.py). Now the worker ends, dequeued, at once."""
    root, ckpt = tmp_path / "q", tmp_path / "ckpt"
    python = str(pathlib.Path(__file__).resolve().parents[2] / "python")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [python, os.environ.get("PYTHONPATH")]))}
    child = subprocess.run(
        [sys.executable, "-c", _TEARDOWN, str(root), str(ckpt)], capture_output=True, text=True, timeout=60, env=env
    )
    assert child.returncode == -signal.SIGTERM, (child.returncode, child.stdout, child.stderr[-2000:])
    assert _head(root).tail_entries() == [], "stop() did not dequeue the committed micro-batch"


def test_the_source_runs_gc_on_its_schedule(tmp_path: pathlib.Path) -> None:
    """As the JVM source (GcSchedule): a stream that takes the queue over runs a GC cycle at once and one
    every gcInterval, with the source's gcGracePeriod, until it stops; gc=false runs none."""
    root = tmp_path / "q"
    with Producer(str(root), flush_interval=3600, gc_grace_period=0.2) as producer:  # the queue's grace: 200 ms
        for value in (b"a", b"b"):
            handle = producer.produce([value])
            producer.flush()
            handle.wait_durable(30)
    # The entries' files, from the manifest: with a 200 ms grace a batch PUT more than 100 ms before its
    # append is uploaded again under a new name (under load), leaving an unreferenced copy beside them.
    entries = decode_manifest((root / "ingest" / "manifest").read_bytes(), "ingest/manifest").entries
    files = [root / e.location for e in entries]
    assert len(files) == 2 and all(f.exists() for f in files)
    first = _reader(root, gc="false", maxBatchesPerTrigger="1")
    assert first.driver.gc is None
    start = first.initialOffset()
    first.commit(first.latestOffset(start, ReadMaxFiles(1)))  # entry 0 dequeued: its batch file is garbage
    # A file is collected once the manifest (the store's clock, docs/format.md §6) is a grace period newer
    # than it: the takeover's manifest write below must come 200 ms after the dequeued file was written.
    time.sleep(max(0.0, files[0].stat().st_mtime + 0.25 - time.time()))
    reader = _reader(root, gcGracePeriod="200ms", gcInterval="50ms")
    reader.initialOffset()  # takes the queue over: a cycle at once, then every 50 ms
    deadline = time.monotonic() + 30
    while files[0].exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not files[0].exists(), "the source's GC did not collect the dequeued entry's file"
    assert files[1].exists(), "a queued entry's file was collected"
    assert reader.driver.gc is not None and reader.driver.gc.running
    reader.stop()
    assert not reader.driver.gc.running


def test_the_end_of_available_now_never_dequeues_past_the_checkpoints_commit_log(tmp_path: pathlib.Path) -> None:
    """With a local checkpointLocation, the last latestOffset's dequeue stops at the commit log's last
    micro-batch, whatever position Spark passes."""
    root, ckpt = tmp_path / "q", tmp_path / "ckpt"
    _produce(root, 3)
    reader = _reader(root, maxBatchesPerTrigger="2", checkpointLocation=str(ckpt))
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    end0 = reader.latestOffset(start, ReadMaxFiles(2))
    end1 = reader.latestOffset(end0, ReadMaxFiles(2))
    for log, text in (("offsets", "v1\n{}\n" + json.dumps(end0)), ("commits", "v1\n{}")):  # only batch 0 committed
        (ckpt / log).mkdir(parents=True, exist_ok=True)
        (ckpt / log / "0").write_text(text)
    assert reader.latestOffset(end1, ReadMaxFiles(2)) == end1
    assert [e.sequence for e in _head(root).tail_entries()] == [2], "dequeued past the commit log"
