"""JVM and Python speak one format and one CAS protocol: shared queues, cross reads, on files and S3."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from fixtures import new_bucket, s3_server  # noqa: F401  (s3_server: the session's S3 servers)

import osqueue
from osqueue.format import decode_batch, decode_head, decode_manifest
from osqueue.store import open_store

from . import jvm_tool


def _s3_options(server) -> dict[str, str]:
    return {
        "fs.s3a.endpoint": server.endpoint,
        "fs.s3a.access.key": server.access_key,
        "fs.s3a.secret.key": server.secret_key,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": server.region,
    }


@pytest.fixture(params=["local", "localstack"])
def shared_queue(request, tmp_path):
    """A fresh queue root and its store options: a local directory, or a bucket on LocalStack's S3."""
    if request.param == "local":
        return str(tmp_path / "q"), None
    server = request.getfixturevalue("s3_server")("localstack")
    return f"s3a://{new_bucket(server)}/q", _s3_options(server)


def _manifest(path, store_options=None):
    store = open_store(path, store_options)
    try:
        obj = store.get("ingest/manifest")
        return None if obj is None else decode_manifest(obj.data, "ingest/manifest")
    finally:
        store.close()


def _tags_in_manifest_order(path, store_options=None) -> list[str]:
    """Each entry's writer: the producers here give every entry their tag as metadata."""
    m = _manifest(path, store_options)
    return [] if m is None else [e.metadata[0].payload.decode() for e in m.entries]


def _await_writing(path, tags, procs, store_options=None, timeout=180.0):
    """The start barrier: returns once every tag has an entry in the manifest, i.e. each JVM is past
    its startup and hammering the manifest (a JVM takes seconds to start, Python none)."""
    deadline = time.monotonic() + timeout
    while not set(tags) <= set(_tags_in_manifest_order(path, store_options)):
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(
                    f"a JVM producer ended before the start barrier ({p.returncode}): {p.stderr.read()}"
                )
        assert time.monotonic() < deadline, f"no entries from all of {tags} within {timeout} s"
        time.sleep(0.02)


def _python_producer(path, tag, count, store_options=None, compression=None):
    with osqueue.Producer(path, flush_interval=0.01, compression=compression, store_options=store_options) as p:
        for i in range(count):  # one durable write at a time: a manifest CAS per entry, maximum contention
            p.produce([f"{tag}-{i}".encode()], metadata=tag.encode()).wait_durable(120)


def _assert_exact_union(path, expected: set[str], store_options=None):
    store = open_store(path, store_options)
    m = decode_manifest(store.get("ingest/manifest").data, "ingest/manifest")
    assert [e.sequence for e in m.entries] == list(range(len(m.entries))), "sequences not contiguous from 0"
    assert len({e.location for e in m.entries}) == len(m.entries), "duplicate manifest entries"
    values = [v.decode() for e in m.entries for v in decode_batch(store.get(e.location).data, e.location)]
    assert len(values) == len(set(values)), "an entry was delivered twice"
    assert set(values) == expected, f"lost: {sorted(expected - set(values))[:5]}"
    return m


def _contend(path, store_options=None, jvm_count=80, py_count=80):
    jvms = [
        jvm_tool.start(
            "produce", path, f"jvm{i}", str(jvm_count), "--flush-ms", "1", "--sync", "true", store_options=store_options
        )
        for i in range(2)
    ]
    _await_writing(path, ["jvm0", "jvm1"], jvms, store_options)
    threads = [
        threading.Thread(target=_python_producer, args=(path, f"py{i}", py_count, store_options)) for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for j in jvms:
        out, err = j.communicate(timeout=300)
        assert j.returncode == 0, err
    expected = {f"{t}-{i}" for t in ("jvm0", "jvm1") for i in range(jvm_count)} | {
        f"{t}-{i}" for t in ("py0", "py1") for i in range(py_count)
    }
    return _assert_exact_union(path, expected, store_options)


def test_jvm_and_python_producers_share_one_local_queue(tmp_path):
    path = str(tmp_path / "q")
    m = _contend(path, jvm_count=300, py_count=150)
    assert len(m.entries) == 2 * 300 + 2 * 150, "each entry should have had its own manifest write"
    # The processes really contended: in manifest order, the languages' writes interleave.
    langs = ["jvm" if t.startswith("jvm") else "py" for t in _tags_in_manifest_order(path)]
    runs = [(lang, len(list(group))) for lang, group in itertools.groupby(langs)]
    assert len(runs) >= 20, f"JVM and Python writes barely overlapped: runs {runs[:30]}"


def test_jvm_and_python_producers_share_one_queue_on_localstack(s3_server):
    server = s3_server("localstack")
    m = _contend(f"s3a://{new_bucket(server)}/shared", _s3_options(server), jvm_count=40, py_count=40)
    assert len(m.entries) == 4 * 40


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_jvm_consumer_reads_python_batches(shared_queue, compression):
    path, opts = shared_queue
    _python_producer(path, "py", 25, store_options=opts, compression=compression)
    lines = jvm_tool.run("consume", path, store_options=opts).splitlines()
    assert [line.split("\t")[2] for line in lines] == [f"py-{i}" for i in range(25)]
    m = _manifest(path, opts)
    assert m.entries == [] and m.epoch & 0xFFFFFFFF == 1, (
        "the JVM consumer should have taken over and dequeued everything"
    )
    assert m.next_sequence == 25


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_python_consumer_reads_jvm_batches(shared_queue, compression):
    path, opts = shared_queue
    jvm_tool.run("produce", path, "jvm", "40", "--per-call", "4", "--compression", compression, store_options=opts)
    c = osqueue.Consumer(path, store_options=opts)
    values, metas = [], set()
    while (b := c.next_batch()) is not None:
        values += [v.decode() for v in b.entries]
        metas |= {m.payload for m in b.metadata}
        c.ack(b.sequence)
    c.close()
    assert values == [f"jvm-{i}" for i in range(40)] and metas == {b"jvm"}
    m = _manifest(path, opts)
    assert m.entries == [] and m.epoch & 0xFFFFFFFF == 1, (
        "the Python consumer should have taken over and dequeued everything"
    )


def test_jvm_consumer_fences_a_python_consumer(shared_queue):
    path, opts = shared_queue
    _python_producer(path, "py", 3, store_options=opts)
    py = osqueue.Consumer(path, store_options=opts)
    assert py.next_batch() is not None
    jvm_tool.run("consume", path, store_options=opts)
    # Entries it read while it owned the queue are handed out without a manifest read (docs/format.md
    # §5 "Handout"); its next manifest read finds the fence, and none of its dequeues can land.
    assert [py.next_batch().sequence for _ in range(2)] == [1, 2]
    with pytest.raises(osqueue.FencedError):
        py.next_batch()
    with pytest.raises(osqueue.FencedError):
        py.ack_through(2)


def test_jvm_tool_reports_a_corrupt_manifest_in_one_line(tmp_path):
    (tmp_path / "q" / "ingest").mkdir(parents=True)
    (tmp_path / "q" / "ingest" / "manifest").write_bytes(b"\x01" * 30)
    with pytest.raises(AssertionError) as err:
        jvm_tool.run("consume", str(tmp_path / "q"))
    assert "format version 257" in str(err.value) and "ingest/manifest" in str(err.value)


# -- segmented manifests (docs/format.md §2.2): each language reads the other's sealed segments -----


def _sealed(head) -> int:
    """Entries the head's refs cover (segments, some of them folded into index objects)."""
    return (head.tail[0].sequence if head.tail else head.next_sequence) - head.refs[0].first_sequence


def _head(path, store_options=None):
    store = open_store(path, store_options)
    try:
        return decode_head(store.get("ingest/manifest").data, "ingest/manifest")
    finally:
        store.close()


def test_python_consumer_reads_a_jvm_producers_segmented_queue_exactly(shared_queue):
    path, opts = shared_queue
    # One awaited produce() per entry: one manifest write each, so many seals at K = 3.
    jvm_tool.run(
        "produce", path, "jvm", "40", "--sync", "true", "--flush-ms", "5", "--segment-entries", "3", store_options=opts
    )
    head = _head(path, opts)
    assert head.version == 3 and _sealed(head) >= 30 and len(head.tail) <= 3, "the JVM sealed past K = 3"
    c = osqueue.Consumer(path, store_options=opts)
    values, n = [], 0
    while (b := c.next_batch()) is not None:
        values += [v.decode() for v in b.entries]
        n += 1
        if n % 7 == 0:  # dequeues drop whole segments and move low_water in between
            c.flush()
        c.ack(b.sequence)
    c.close()
    assert values == [f"jvm-{i}" for i in range(40)]
    head = _head(path, opts)
    assert head.version == 1 and head.tail == [] and head.next_sequence == 40, "drained: v1 again"


def test_jvm_consumer_reads_a_python_producers_segmented_queue_exactly(shared_queue):
    path, opts = shared_queue
    with osqueue.Producer(path, flush_interval=0.005, manifest_segment_entries=3, store_options=opts) as p:
        for i in range(25):
            p.produce([f"py-{i}".encode()], metadata=b"py").wait_durable(120)
    head = _head(path, opts)
    assert head.version == 3 and _sealed(head) >= 18 and len(head.tail) <= 3, "Python sealed past K = 3"
    lines = jvm_tool.run("consume", path, store_options=opts).splitlines()
    assert [line.split("\t")[2] for line in lines] == [f"py-{i}" for i in range(25)]
    head = _head(path, opts)
    assert head.version == 1 and head.tail == [] and head.next_sequence == 25 and head.epoch & 0xFFFFFFFF == 1


def test_jvm_and_python_producers_seal_one_queue_together(tmp_path):
    """Both languages append and seal (K = 2) concurrently: every entry once, each producer's in order."""
    path = str(tmp_path / "q")
    jvm = threading.Thread(
        target=jvm_tool.run,
        args=("produce", path, "jvm", "30", "--sync", "true", "--flush-ms", "2", "--segment-entries", "2"),
    )
    jvm.start()
    deadline = time.monotonic() + 120
    while _manifest_exists(path) is False and time.monotonic() < deadline:
        time.sleep(0.05)
    with osqueue.Producer(path, flush_interval=0.002, manifest_segment_entries=2) as p:
        for i in range(30):
            p.produce([f"py-{i}".encode()], metadata=b"py").wait_durable(120)
    jvm.join(300)
    assert _head(path).refs, "the queue was sealed"
    c = osqueue.Consumer(path)
    values = []
    while (b := c.next_batch()) is not None:
        values += [v.decode() for v in b.entries]
        c.ack(b.sequence)
    c.close()
    assert sorted(values) == sorted([f"jvm-{i}" for i in range(30)] + [f"py-{i}" for i in range(30)])
    for tag in ("jvm", "py"):
        assert [v for v in values if v.startswith(tag)] == [f"{tag}-{i}" for i in range(30)]


def _manifest_exists(path) -> bool:
    store = open_store(path)
    try:
        return store.get("ingest/manifest") is not None
    finally:
        store.close()
