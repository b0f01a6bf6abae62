"""The osqueue sink's driver commit: failures after the append, writer ids, metrics in query progress."""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
import threading

import pytest

from osqueue.gc import GarbageCollector
from osqueue.store import LocalFileSystemStore

from .support import make_input, manifest, native_values, produce_entries


def start_stream(spark, inp, queue, ckpt, **options):
    writer = (
        spark.readStream.option("maxFilesPerTrigger", 1)
        .text(str(inp))
        .writeStream.format("osqueue")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer.start(str(queue))


def run_stream(spark, inp, queue, ckpt, **options):
    q = start_stream(spark, inp, queue, ckpt, **options)
    q.awaitTermination()
    return q


def read_values(spark, queue) -> list[str]:
    rows = spark.read.format("osqueue").load(str(queue)).orderBy("sequence", "index").collect()
    return [bytes(r.value).decode() for r in rows]


def missing_files(queue: pathlib.Path) -> list[str]:
    return [e.location for e in manifest(queue).entries if not (queue / e.location).exists()]


@contextlib.contextmanager
def fault_at(spark, point: str, kind: str = "failAt"):
    """The connector's test-only fault hook: the driver throws at `point` (Spark then aborts);
    kind "pauseAt" with point "<point>:<ms>" sleeps there instead."""
    system = spark.sparkContext._jvm.java.lang.System
    system.setProperty(f"osqueue.test.{kind}", point)
    try:
        yield
    finally:
        system.clearProperty(f"osqueue.test.{kind}")


@contextlib.contextmanager
def gc_running(queue: pathlib.Path):
    """GC cycles every 50 ms on the queue (its recorded grace period applies), in this process. Each
    cycle first rewrites the manifest unchanged, as a busy queue's writers would: GC ages files by the
    store's clock against the head's last write (docs/format.md §6)."""
    store = LocalFileSystemStore(str(queue))
    gc = GarbageCollector(store, grace_period=0.001)
    stop = threading.Event()

    def loop():
        while not stop.wait(0.05):
            head = store.get("ingest/manifest")
            if head is not None:
                store.put_if_version_matches("ingest/manifest", head.data, head.version)
            gc.run_once()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(10)


@pytest.mark.parametrize("point", ["between-append-and-state", "after-append"])
def test_a_commit_failing_after_the_append_keeps_the_appended_files(spark, tmp_path, point):
    """Spark aborts when the driver's commit throws; the append had landed, so the abort must not
    delete files the manifest references. A restart then delivers every row exactly once."""
    expected = make_input(tmp_path / "in", files=2, lines=4)
    first_epoch = expected[:4]
    with fault_at(spark, point):
        q = start_stream(spark, tmp_path / "in", tmp_path / "q", tmp_path / "ckpt")
        with pytest.raises(Exception, match="test fault injected"):
            q.awaitTermination()
    assert len(manifest(tmp_path / "q").entries) >= 1, "the append did not land before the fault"
    assert missing_files(tmp_path / "q") == [], "the abort deleted files the manifest references"
    assert read_values(spark, tmp_path / "q") == first_epoch

    run_stream(spark, tmp_path / "in", tmp_path / "q", tmp_path / "ckpt")
    assert read_values(spark, tmp_path / "q") == expected
    assert native_values(tmp_path / "q") == expected  # acks (dequeues): the last check


def test_a_batch_write_failing_after_the_append_keeps_the_appended_files(spark, tmp_path):
    df = spark.createDataFrame([(f"r{i}",) for i in range(6)], "value string").coalesce(1)
    with fault_at(spark, "between-append-and-state"):
        with pytest.raises(Exception, match="test fault injected"):
            df.write.format("osqueue").mode("append").save(str(tmp_path / "q"))
    assert missing_files(tmp_path / "q") == [], "the abort deleted files the manifest references"
    assert read_values(spark, tmp_path / "q") == [f"r{i}" for i in range(6)]


def test_an_abort_before_any_manifest_write_deletes_the_files(spark, tmp_path):
    """The other side of the rule: nothing was sent, so nothing references the task files."""
    make_input(tmp_path / "in", files=1, lines=4)
    with fault_at(spark, "before-append"):
        q = start_stream(spark, tmp_path / "in", tmp_path / "q", tmp_path / "ckpt")
        with pytest.raises(Exception, match="test fault injected"):
            q.awaitTermination()
    assert not (tmp_path / "q" / "ingest" / "manifest").exists() or manifest(tmp_path / "q").entries == []
    assert list((tmp_path / "q").rglob("*.batch")) == [], "an aborted epoch left files behind"


def test_a_replayed_epoch_whose_files_gc_deleted_commits(spark, tmp_path):
    """Issue 14 item 5: an epoch whose driver commit comes later than the queue's grace period after
    its tasks wrote their files, while GC runs. Its files are unreferenced and past the grace period,
    so GC deletes them and the commit cannot enqueue them: that attempt fails with an error naming
    the cause. Every replay used to fail the same way (the committer re-uploaded by reading the
    deleted originals). Now the replay's tasks stage their files where GC never deletes, and the
    commit copies them on the executors: the replay commits, every row once."""
    queue = tmp_path / "q"
    produce_entries(str(queue), 1, 1, gc_grace_period=1.0)  # the queue's grace: 1 s
    native_values(queue)  # an empty manifest: GC may delete every unreferenced file past 1 s
    expected = make_input(tmp_path / "in", files=1, lines=4)
    with gc_running(queue), fault_at(spark, "before-append:2500", kind="pauseAt"):
        q = start_stream(spark, tmp_path / "in", queue, tmp_path / "ckpt")
        with pytest.raises(Exception, match="OSQUEUE_SINK_FILES_EXPIRED"):
            q.awaitTermination()
        assert manifest(queue).entries == []
        # The replay is just as slow, and GC keeps running.
        run_stream(spark, tmp_path / "in", queue, tmp_path / "ckpt")
    assert missing_files(queue) == []
    assert read_values(spark, queue) == expected
    assert native_values(queue) == expected
    assert list((queue / "ingest" / "manifest.staging").rglob("*.batch")) == [], "staged files left behind"


# --- writer ids -------------------------------------------------------------------------------


def writer_states(queue: pathlib.Path) -> dict[str, dict]:
    d = queue / "ingest" / "manifest.writers"
    if not d.exists():
        return {}
    return {p.name: json.loads(p.read_text()) for p in d.iterdir() if not p.name.startswith(".")}  # not lock files


def state_key(writer_id: str) -> str:
    return base64.urlsafe_b64encode(writer_id.encode()).decode().rstrip("=")


def batch_write(spark, queue, values, **options):
    writer = (
        spark.createDataFrame([(v,) for v in values], "value string").coalesce(1).write.format("osqueue").mode("append")
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save(str(queue))


def test_batch_writes_with_a_writer_id_are_deduplicated_by_writer_batch_id(spark, tmp_path):
    q = tmp_path / "q"
    batch_write(spark, q, ["a0", "a1"], writerId="daily", writerBatchId="1")
    batch_write(spark, q, ["a0", "a1"], writerId="daily", writerBatchId="1")  # a retry of the same write
    batch_write(spark, q, ["b0"], writerId="daily", writerBatchId="2")  # the next write
    batch_write(spark, q, ["a0", "a1"], writerId="daily", writerBatchId="1")  # a late retry of an older one
    assert read_values(spark, q) == ["a0", "a1", "b0"]
    assert len(manifest(q).entries) == 2, "a retried write was appended again"
    assert len(list((q / "ingest").glob("*.batch"))) == 2, "skipped writes left files behind"
    state = writer_states(q)[state_key("daily")]
    assert state["lastCommittedBatch"] == 2 and state["owner"] == "df.write"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"writerId": "daily"}, "'writerid' ('daily') on a batch write (df.write) needs option 'writerbatchid'"),
        ({"writerBatchId": "3"}, "option 'writerbatchid' needs option 'writerid'"),
        ({"writerId": "daily", "writerBatchId": "-1"}, "'writerbatchid': '-1'"),
    ],
)
def test_bad_writer_id_options_of_a_batch_write_fail_before_any_write(spark, tmp_path, options, message):
    with pytest.raises(Exception) as err:
        batch_write(spark, tmp_path / "q", ["x"], **options)
    assert message in str(err.value)
    assert not list(tmp_path.rglob("*.batch")), "files were written"


def test_a_streaming_write_refuses_writer_batch_id(spark, tmp_path):
    make_input(tmp_path / "in", files=1, lines=2)
    with pytest.raises(Exception, match="'writerbatchid' applies only to batch writes"):
        run_stream(spark, tmp_path / "in", tmp_path / "q", tmp_path / "ckpt", writerId="w", writerBatchId="1")
    assert not list(tmp_path.rglob("*.batch")), "files were written"


def test_a_one_off_batch_write_adds_no_tags_and_no_writer_state(spark, tmp_path):
    batch_write(spark, tmp_path / "q", ["x", "y"])
    assert [e.extension for e in manifest(tmp_path / "q").entries] == [b""]
    assert writer_states(tmp_path / "q") == {}
    assert read_values(spark, tmp_path / "q") == ["x", "y"]


def test_a_writer_id_reused_by_a_new_checkpoint_fails_loudly(spark, tmp_path):
    """A new checkpoint restarts batch ids at 0; with the old writer id they would be skipped as replays."""
    inp, q = tmp_path / "in", tmp_path / "q"
    first = make_input(inp, files=2, lines=3)
    run_stream(spark, inp, q, tmp_path / "ckpt-a", writerId="enrich")
    landed = manifest(q).next_sequence

    with pytest.raises(Exception) as err:
        run_stream(spark, inp, q, tmp_path / "ckpt-b", writerId="enrich")
    text = str(err.value)
    assert "OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY" in text and "sink writer 'enrich'" in text, text[-2000:]
    assert "new 'writerid'" in text and "original query" in text
    assert manifest(q).next_sequence == landed, "the refused query appended entries"

    more = make_input(inp, files=3, lines=3)[len(first) :]  # the original checkpoint still works
    run_stream(spark, inp, q, tmp_path / "ckpt-a", writerId="enrich")
    run_stream(spark, inp, q, tmp_path / "ckpt-c", writerId="enrich-2")  # a new writer id: all rows again
    assert read_values(spark, q) == first + more + first + more


def test_batch_writes_and_a_stream_cannot_share_a_writer_id(spark, tmp_path):
    """Their batch ids would mix: each side refuses a writer the other committed to."""
    inp, q = tmp_path / "in", tmp_path / "q"
    make_input(inp, files=1, lines=2)
    batch_write(spark, q, ["x"], writerId="mixed", writerBatchId="0")
    with pytest.raises(Exception, match=r"sink writer 'mixed' belongs to batch writes \(df.write\)"):
        run_stream(spark, inp, q, tmp_path / "ckpt", writerId="mixed")
    run_stream(spark, inp, q, tmp_path / "ckpt-2", writerId="streamed")
    with pytest.raises(Exception, match="sink writer 'streamed' belongs to streaming query"):
        batch_write(spark, q, ["y"], writerId="streamed", writerBatchId="5")
    assert read_values(spark, q) == ["x", "f0-line0", "f0-line1"]


def test_a_writer_state_without_an_owner_still_loads_and_gains_one(spark, tmp_path):
    """States written before owners were recorded (no `owner`, no `generation`) keep working."""
    inp, q = tmp_path / "in", tmp_path / "q"
    expected = make_input(inp, files=2, lines=3)
    states = q / "ingest" / "manifest.writers"
    states.mkdir(parents=True)
    (states / state_key("old")).write_text('{"version":1,"writerId":"old","lastCommittedBatch":-1}')
    query = run_stream(spark, inp, q, tmp_path / "ckpt", writerId="old")
    assert read_values(spark, q) == expected
    state = writer_states(q)[state_key("old")]
    assert state["owner"] == query.id and state["generation"] == 1 and state["lastCommittedBatch"] == 1


# --- metrics ----------------------------------------------------------------------------------


def test_sink_metrics_appear_in_streaming_query_progress(spark, tmp_path):
    inp, q = tmp_path / "in", tmp_path / "q"
    make_input(inp, files=3, lines=4)
    query = run_stream(spark, inp, q, tmp_path / "ckpt")
    progresses = [p for p in query.recentProgress if p.numInputRows > 0]
    assert len(progresses) == 3, [p.json for p in query.recentProgress]
    sizes = {e.location: (q / e.location).stat().st_size for e in manifest(q).entries}
    for p, entry in zip(progresses, manifest(q).entries):  # one epoch per file, one entry per epoch
        m = p.sink.metrics
        assert m["batchId"] == str(p.batchId)
        assert int(m["rowsWritten"]) == p.numInputRows
        assert int(m["batchesWritten"]) == 1
        assert int(m["bytesWritten"]) == sizes[entry.location]
        assert int(m["manifestConflicts"]) >= 0 and int(m["commitLatencyMs"]) >= 0
        assert m["replaysSkipped"] == "0"
