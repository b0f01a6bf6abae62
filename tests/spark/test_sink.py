"""The osqueue Spark sink: round trips, crash points, contention, bad input."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest

import osqueue
from osqueue.format import Compression, decode_batch

from .support import make_input, manifest, native_values, standalone_cluster

HERE = pathlib.Path(__file__).resolve().parent


def sink_job(input_dir, queue, ckpt, *extra, timeout=300):
    return subprocess.run(
        [sys.executable, str(HERE / "sink_job.py"), str(input_dir), str(queue), str(ckpt), *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_queue(spark, queue, options=None):
    reader = spark.read.format("osqueue")
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    rows = reader.load(str(queue)).orderBy("sequence", "index").collect()
    return [(bytes(r.value).decode(), bytes(r.metadata).decode()) for r in rows]


def test_streaming_sink_round_trip_in_epoch_order_with_metadata(tmp_path):
    expected = make_input(tmp_path / "in", files=4, lines=5)
    p = sink_job(tmp_path / "in", tmp_path / "q", tmp_path / "ckpt")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert native_values(tmp_path / "q") == expected, "native consumer: rows lost, duplicated or reordered"


def test_sink_output_reads_back_through_the_source_with_metadata(spark, tmp_path):
    expected = make_input(tmp_path / "in", files=3, lines=4)
    p = sink_job(tmp_path / "in", tmp_path / "q", tmp_path / "ckpt")
    assert p.returncode == 0, p.stderr[-3000:]
    rows = read_queue(spark, tmp_path / "q")
    assert [v for v, _ in rows] == expected
    assert all(m == v.split("-")[0] + ".txt" for v, m in rows)
    # One epoch per input file (maxFilesPerTrigger=1): every batch file holds rows of one epoch, and
    # the files are enqueued in epoch order; each file's metadata range is its input file's name.
    m = manifest(tmp_path / "q")
    epochs = []
    for e in m.entries:
        records = decode_batch((tmp_path / "q" / e.location).read_bytes(), e.location)
        (epoch,) = {r.decode().split("-")[0] for r in records}
        assert [mi.payload for mi in e.metadata] == [f"{epoch}.txt".encode()]
        epochs.append(epoch)
    assert epochs == sorted(epochs) and set(epochs) == {"f0", "f1", "f2"}


@pytest.mark.parametrize("point", ["during-task-write", "before-append", "after-append", "between-append-and-state"])
def test_driver_crash_points_leave_each_row_exactly_once(spark, tmp_path, point):
    expected = make_input(tmp_path / "in", files=3, lines=4)
    crashed = sink_job(tmp_path / "in", tmp_path / "q", tmp_path / "ckpt", "--crash-at", point)
    assert crashed.returncode != 0, "the crash point was not reached"
    # The state the named point implies for epoch 0: task files uploaded; appended or not.
    uploaded = list((tmp_path / "q").rglob("*.batch"))
    manifest_file = tmp_path / "q" / "ingest" / "manifest"
    appended = len(manifest(tmp_path / "q").entries) if manifest_file.exists() else 0
    assert uploaded, f"crash at {point}: no task file was uploaded"
    if point in ("during-task-write", "before-append"):
        assert appended == 0, f"crash at {point}: the epoch was already appended"
    else:
        assert appended >= 1, f"crash at {point}: the epoch was not appended yet"
    p = sink_job(tmp_path / "in", tmp_path / "q", tmp_path / "ckpt")
    assert p.returncode == 0, p.stderr[-3000:]
    assert [v for v, _ in read_queue(spark, tmp_path / "q")] == expected
    locations = [e.location for e in manifest(tmp_path / "q").entries]
    if point == "between-append-and-state":
        # The replay appended a second copy of epoch 0; osqueue readers delivered one.
        assert len(locations) > 3
    else:
        assert len(locations) == 3, "a replayed epoch was appended again"
    assert native_values(tmp_path / "q") == expected, "native consumer: a row lost or delivered twice"


def _wait_for(condition, timeout: float, what: str, proc=None, log=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited ({proc.returncode}): {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f": {log.read_text()[-3000:]}" if log else ""))
        time.sleep(0.2)


def test_an_old_driver_of_the_same_query_is_fenced_and_lands_nothing(spark, tmp_path):
    """Two drivers of one query (the checkpoint copied, as shared storage would let happen): the
    new run claims the writer; the old one, still running, fails its next commit and lands nothing."""
    inp, q, ckpt, ckpt2 = tmp_path / "in", tmp_path / "q", tmp_path / "ckpt", tmp_path / "ckpt-new"

    def add_file(tag: str) -> list[str]:
        rows = make_input(inp, files=1, lines=5, tag=tag)
        now = time.time()
        os.utime(inp / f"{tag}0.txt", (now, now))
        return rows

    first = add_file("a")
    log = tmp_path / "old-driver.log"
    with open(log, "w") as out:
        old = subprocess.Popen(
            [sys.executable, str(HERE / "sink_job.py"), str(inp), str(q), str(ckpt), "--trigger-ms", "200"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for(lambda: (ckpt / "commits" / "0").exists(), 240, "the old driver's first epoch", old, log)
        shutil.copytree(ckpt, ckpt2)  # the same query id, so the same writer id
        second = add_file("b")  # both drivers may pick this one up; either way it must land once
        new = sink_job(inp, q, ckpt2)
        assert new.returncode == 0, new.stderr[-3000:]

        landed_before = manifest(q).next_sequence
        third = add_file("c")  # only the old driver runs now: its commit must be refused
        _wait_for(lambda: old.poll() is not None, 240, "the old driver to fail", log=log)
        assert old.returncode != 0
        text = log.read_text()
        assert "WriterFencedException" in text and "was fenced" in text, text[-3000:]
        assert manifest(q).next_sequence == landed_before, "a write of the fenced driver landed"
        assert not any(v.startswith("c") for v, _ in read_queue(spark, q))

        again = sink_job(inp, q, ckpt2)  # a new run of the new driver delivers the rest
        assert again.returncode == 0, again.stderr[-3000:]
        assert [v for v, _ in read_queue(spark, q)] == first + second + third
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()


def test_two_sink_queries_and_a_native_producer_share_one_queue(spark, tmp_path):
    a = make_input(tmp_path / "a", files=4, lines=10, tag="a")
    b = make_input(tmp_path / "b", files=4, lines=10, tag="b")
    native: list[str] = []
    sinks_done = threading.Event()

    def produce():  # until both sink queries are done, so native appends contend with their commits
        with osqueue.Producer(str(tmp_path / "q"), flush_interval=0.005) as p:
            while not sinks_done.is_set() or len(native) < 60:
                v = f"native-{len(native)}"
                p.produce([v.encode()]).wait_durable(60)
                native.append(v)

    t = threading.Thread(target=produce)
    t.start()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "sink_job.py"),
                str(tmp_path / x),
                str(tmp_path / "q"),
                str(tmp_path / f"ckpt-{x}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for x in ("a", "b")
    ]
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
    finally:
        sinks_done.set()
        t.join(120)
    values = [v for v, _ in read_queue(spark, tmp_path / "q")]
    assert sorted(values) == sorted(a + b + native) and len(values) == len(set(values))
    m = manifest(tmp_path / "q")
    assert [e.sequence for e in m.entries] == list(range(len(m.entries)))
    for tag, rows in (("a", a), ("b", b)):  # each writer's epochs stay in order
        assert [v for v in values if v.startswith(tag)] == rows
    sink_positions = [i for i, v in enumerate(values) if not v.startswith("native")]
    assert any(v.startswith("native") for v in values[sink_positions[0] : sink_positions[-1]]), (
        "no native append landed between the sinks' commits: nothing contended"
    )


def test_sink_on_localstack(spark, s3_queue, tmp_path):
    uri, options = s3_queue
    expected = make_input(tmp_path / "in", files=2, lines=3)
    p = sink_job(
        tmp_path / "in", uri, tmp_path / "ckpt", *[x for k, v in options.items() for x in ("--option", f"{k}={v}")]
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert [v for v, _ in read_queue(spark, uri, options)] == expected
    assert native_values(uri, options) == expected


def test_batch_write_appends_once(spark, tmp_path):
    df = spark.createDataFrame([(f"r{i}", f"m{i % 2}") for i in range(10)], "value string, metadata string")
    df = df.selectExpr("value", "cast(metadata as binary) as metadata")
    df.coalesce(1).write.format("osqueue").mode("append").option("compression", "zstd").save(str(tmp_path / "q"))
    rows = read_queue(spark, tmp_path / "q")
    assert rows == [(f"r{i}", f"m{i % 2}") for i in range(10)]
    item_starts = [mi.start_index for mi in manifest(tmp_path / "q").entries[0].metadata]
    assert item_starts == list(range(10)), "alternating metadata: one range per row"


def test_a_batch_write_of_several_tasks_appends_split_compressed_files_in_partition_order(spark, tmp_path):
    """Three tasks, each over the flush size several times: their files enter the manifest by
    partition id then file order, each file zstd-compressed under a ULID name, with one metadata
    range per run of equal metadata."""
    q = tmp_path / "q"
    rows = [(f"p{i // 6}-r{i % 6}", f"g{i // 3}".encode()) for i in range(18)]
    # parallelize slices a list into contiguous partitions: partition k holds rows 6k..6k+5.
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 3), "value string, metadata binary")
    (
        df.write.format("osqueue")
        .mode("append")
        .option("compression", "zstd")
        .option("flushSizeBytes", "20")
        .save(str(q))
    )
    m = manifest(q)
    assert len(m.entries) > 3, "each task split its rows over several files"
    assert [e.sequence for e in m.entries] == list(range(len(m.entries)))
    delivered, metas = [], []
    for e in m.entries:
        assert re.fullmatch(r"ingest/[0-9A-HJKMNP-TV-Z]{26}\.batch", e.location), e.location
        data = (q / e.location).read_bytes()
        assert data[-7] == int(Compression.ZSTD), f"{e.location} is not zstd-compressed"
        records = decode_batch(data, e.location)
        starts = [mi.start_index for mi in e.metadata] + [len(records)]
        payloads = [mi.payload for mi in e.metadata]
        assert starts[0] == 0 and all(a < b for a, b in zip(starts, starts[1:])), starts
        assert all(a != b for a, b in zip(payloads, payloads[1:])), f"{e.location}: equal neighbours not merged"
        for k, payload in enumerate(payloads):
            metas += [payload] * (starts[k + 1] - starts[k])
        delivered += [r.decode() for r in records]
    assert delivered == [v for v, _ in rows], "partition id order, then file order within a task"
    assert metas == [meta for _, meta in rows]


@pytest.mark.parametrize(
    "columns, options, message",
    [
        ("cast(id as string) as v", {}, "needs a 'value' column"),
        ("id as value", {}, "must be binary or string, not bigint"),
        ("cast(id as string) as value, id as extra", {}, "got 'extra'"),
        ("cast(id as string) as value, cast(id as string) as metadata", {}, "'metadata' column must be binary"),
        ("cast(id as string) as value", {"compression": "lz4"}, "expected 'none' or 'zstd'"),
        ("cast(id as string) as value", {"flushSizeBytes": "0"}, "'flushsizebytes': '0'"),
        ("cast(id as string) as value", {"writerID": " "}, "'writerid'"),
        ("cast(id as string) as value", {"maxBatchesPerTrigger": "2"}, "unknown option 'maxbatchespertrigger'"),
    ],
)
def test_bad_sink_input_fails_before_any_write(spark, tmp_path, columns, options, message):
    df = spark.range(3).selectExpr(*[c.strip() for c in columns.split(",")])
    writer = df.write.format("osqueue").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception) as err:
        writer.save(str(tmp_path / "q"))
    assert message in str(err.value)
    assert not (tmp_path / "q").exists() or not list((tmp_path / "q").rglob("*.batch")), "files were written"


@pytest.mark.parametrize(
    "columns, message", [("value as v", "needs a 'value' column"), ("value, value as extra", "got 'extra'")]
)
def test_bad_streaming_sink_input_fails_before_any_write(spark, tmp_path, columns, message):
    make_input(tmp_path / "in", files=1, lines=2)
    stream = spark.readStream.text(str(tmp_path / "in")).selectExpr(*[c.strip() for c in columns.split(",")])
    with pytest.raises(Exception) as err:
        q = (
            stream.writeStream.format("osqueue")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start(str(tmp_path / "q"))
        )
        q.awaitTermination(120)
    assert message in str(err.value)
    assert not (tmp_path / "q").exists() or not list((tmp_path / "q").rglob("*.batch")), "files were written"


def test_sink_on_a_standalone_cluster(tmp_path):
    expected = make_input(tmp_path / "in", files=3, lines=4)
    with standalone_cluster(tmp_path) as master:
        p = sink_job(tmp_path / "in", tmp_path / "q", tmp_path / "ckpt", "--master", master)
        assert p.returncode == 0, p.stderr[-3000:]
    assert list((tmp_path / "work").glob("app-*/*/stderr")), "tasks did not run in the worker's JVM"
    assert native_values(tmp_path / "q") == expected
