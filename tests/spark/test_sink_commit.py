"""The osqueue sink's driver commit: failures after the append, writer ids, metrics in query progress."""
from __future__ import annotations

import contextlib
import os
import pathlib

import pytest

import osqueue
from osqueue.format import decode_manifest


def make_input(d: pathlib.Path, files: int, lines: int, tag: str = "f") -> list[str]:
    d.mkdir(parents=True, exist_ok=True)
    expected = []
    for f in range(files):
        rows = [f"{tag}{f}-line{i}" for i in range(lines)]
        path = d / f"{tag}{f}.txt"
        path.write_text("\n".join(rows) + "\n")
        os.utime(path, (1_700_000_000 + f * 10, 1_700_000_000 + f * 10))  # the file source reads oldest first
        expected += rows
    return expected


def start_stream(spark, inp, queue, ckpt, **options):
    writer = (spark.readStream.option("maxFilesPerTrigger", 1).text(str(inp))
              .writeStream.format("osqueue").option("checkpointLocation", str(ckpt)).trigger(availableNow=True))
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


def native_values(queue) -> list[str]:
    c = osqueue.Consumer(str(queue))
    values = []
    while (b := c.next_batch()) is not None:
        values += [v.decode() for v in b.entries]
        c.ack(b.sequence)
    c.close()
    return values


def manifest(queue: pathlib.Path):
    return decode_manifest((queue / "ingest" / "manifest").read_bytes(), "manifest")


def missing_files(queue: pathlib.Path) -> list[str]:
    return [e.location for e in manifest(queue).entries if not (queue / e.location).exists()]


@contextlib.contextmanager
def fault_at(spark, point: str):
    """The connector's test-only fault hook: the driver throws at `point` (Spark then aborts)."""
    system = spark.sparkContext._jvm.java.lang.System
    system.setProperty("osqueue.test.failAt", point)
    try:
        yield
    finally:
        system.clearProperty("osqueue.test.failAt")


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
