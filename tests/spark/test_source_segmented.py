"""The osqueue Spark source on a segmented queue (docs/format.md §2.2, issue 15): real Spark, real files.

The queues are written by the JVM producer (QueueTool, from the connector jar) with a small K
(`--segment-entries`), so their manifests are segmented heads (version 3, docs/adr/0006 item 3) listing segments; each test checks it
is so before reading. Delivery must be exact and in order across segment boundaries: micro-batches,
the batch read, a real-time query, and a query killed with -9 and restarted. Micro-batches and
AvailableNow across segments are tested in Scala (SegmentedSourceSuite, OsqueueMicroBatchStreamSuite).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

import osqueue
from osqueue.format import decode_head
from osqueue.queue import ManifestStore, SegmentTree
from osqueue.store import open_store

from .test_source import _kill_twice_then_drain

HERE = pathlib.Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="the JVM producer needs java")


def produce_jvm(queue: pathlib.Path, batches: int, per_batch: int, k: int, tag: str = "v") -> list[str]:
    """`batches` batch files of `per_batch` entries (one manifest entry each) through the JVM producer
    with K = `k`; the entries in queue order."""
    import pyspark

    jars = pathlib.Path(pyspark.__file__).parent / "jars"
    cmd = [
        shutil.which("java") or "java",
        "-cp",
        f"{osqueue.jar_path()}:{jars}/*",
        "osqueue.tools.QueueTool",
        "produce",
        str(queue),
        tag,
        str(batches * per_batch),
        "--per-call",
        str(per_batch),
        "--sync",
        "true",
        "--segment-entries",
        str(k),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return [f"{tag}-{i}" for i in range(batches * per_batch)]


def head_of(queue: pathlib.Path):
    return decode_head((queue / "ingest" / "manifest").read_bytes(), "manifest")


def assert_segmented(queue: pathlib.Path, at_least: int) -> None:
    store = open_store(str(queue))
    try:
        ms = ManifestStore(store, "ingest/manifest")
        head = ms.head(ms.read_raw()[0])
        # through the index objects the producers folded segments into
        segments = len(list(SegmentTree(ms).leaves(head, head.refs[0].first_sequence))) if head.refs else 0
    finally:
        store.close()
    assert head.version == 3 and segments >= at_least, f"not segmented: {segments} segments"  # v3: docs/adr/0006 item 3


def test_kill_dash_nine_mid_stream_on_a_segmented_queue_and_restart_delivers_each_entry_exactly_once(
    queue_dir, tmp_path
):
    expected = produce_jvm(queue_dir, batches=30, per_batch=3, k=4)
    assert_segmented(queue_dir, 6)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    rows = _kill_twice_then_drain(queue_dir, ckpt, out)  # kills inside the first segments, then further on
    assert [r["value"] for r in rows] == expected
    assert len({(r["sequence"], r["index"]) for r in rows}) == len(rows)
    h = head_of(queue_dir)
    assert h.next_sequence == 30 and h.depth == 0


@pytest.mark.skipif(
    tuple(int(x) for x in __import__("pyspark").__version__.split(".")[:2]) < (4, 1),
    reason="real-time mode needs Spark 4.1+",
)
def test_real_time_query_reads_a_segmented_backlog_once_in_order(queue_dir, tmp_path):
    from .test_realtime import kill, rows_in, start_job, wait_for_commit_through, wait_for_rows

    expected = produce_jvm(queue_dir, batches=25, per_batch=2, k=3)
    assert_segmented(queue_dir, 6)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    job = start_job(queue_dir, ckpt, out)
    try:
        wait_for_rows(out, len(expected), job)
        wait_for_commit_through(ckpt, 25, job)
    finally:
        kill(job)
    assert [r["value"] for r in rows_in(out)] == expected, "entries lost, duplicated or out of order"
