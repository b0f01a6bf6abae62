"""Segmented manifests (docs/format.md §2.2) in Python: the codec reads the golden head and its
segments, and producers, consumers and GC work on it (an RFC v1 reader refuses it cleanly)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from helpers import ManualClock, WrappedStore

from osqueue.consumer import Consumer
from osqueue.errors import CorruptManifestError, UnsupportedFormatVersionError
from osqueue.format import (
    HEAD_VERSION,
    ManifestEntry,
    MetadataItem,
    SegmentRef,
    decode_head,
    decode_manifest,
    decode_segment,
)
from osqueue.gc import GarbageCollector
from osqueue.queue import ManifestStore, QueueProducer, SegmentTree
from osqueue.store import InMemoryStore, ObjectStore, VersionedObject, open_store

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
HEADS = json.loads((GOLDEN / "heads.json").read_text(encoding="utf-8"))
KEY = "ingest/manifest"


def _entry(e: dict) -> ManifestEntry:
    import base64

    def b(s: str) -> bytes:
        return base64.b64decode(s)

    metadata = [MetadataItem(m["start_index"], m["ingestion_time_ms"], b(m["payload_b64"])) for m in e["metadata"]]
    return ManifestEntry(e["sequence"], e["location"], metadata, b(e["extension_b64"]))


def _ref(s: dict) -> SegmentRef:
    return SegmentRef(s["first_sequence"], s["entry_count"], s["level"], s["byte_length"], s["oldest_batch_ms"],
                      bytes.fromhex(s["sha256_hex"]), s["key"])  # fmt: skip


@pytest.mark.parametrize("vector", HEADS["heads"], ids=[v["name"] for v in HEADS["heads"]])
def test_golden_head_and_its_segments_decode(vector: dict) -> None:
    data = (GOLDEN / vector["file"]).read_bytes()
    expected = vector["head"]
    head = decode_head(data, vector["name"])
    assert head.version == HEAD_VERSION
    assert (head.next_sequence, head.epoch, head.low_water) == (
        expected["next_sequence"],
        expected["epoch"],
        expected["low_water"],
    )
    assert head.refs == [_ref(s) for s in expected["refs"]]
    assert head.tail == [_entry(e) for e in expected["tail"]]
    queued = []
    for ref, s in zip(head.refs, expected["refs"]):
        if ref.level > 0:
            queued += list(range(ref.first_sequence, ref.last_sequence + 1))  # walked in test_segment_tree.py
            continue
        entries = decode_segment((GOLDEN / s["file"]).read_bytes(), ref)
        queued += [e.sequence for e in entries if e.sequence >= head.low_water]
    queued += [e.sequence for e in head.tail]
    assert queued == expected["queued_sequences"] and head.depth == len(queued)


def test_a_v1_reader_refuses_the_head_with_its_unsupported_version_error() -> None:
    for vector in HEADS["heads"]:
        with pytest.raises(UnsupportedFormatVersionError) as info:
            decode_manifest((GOLDEN / vector["file"]).read_bytes(), "some/key")
        assert "some/key" in str(info.value) and vector["v1_error"] == "UnsupportedFormatVersion"


@pytest.mark.parametrize("vector", HEADS["rejected"], ids=[v["name"] for v in HEADS["rejected"]])
def test_rejected_heads_raise_corrupt_manifest_naming_the_object(vector: dict) -> None:
    with pytest.raises(CorruptManifestError) as info:
        decode_head((GOLDEN / vector["file"]).read_bytes(), f"some/key/{vector['name']}")
    assert type(info.value) is CorruptManifestError and f"some/key/{vector['name']}" in str(info.value)


def test_a_v1_manifest_reads_as_a_head_without_segments() -> None:
    data = (GOLDEN / "manifest_after_dequeue.bin").read_bytes()
    head = decode_head(data, "m")
    assert head.version == 1 and head.refs == [] and head.tail == decode_manifest(data, "m").entries


def test_a_segment_that_differs_from_its_ref_is_corrupt_naming_the_segment() -> None:
    vector = HEADS["heads"][0]
    s = vector["head"]["refs"][0]
    data = bytearray((GOLDEN / s["file"]).read_bytes())
    data[10] ^= 1
    with pytest.raises(CorruptManifestError, match="SHA-256") as info:
        decode_segment(bytes(data), _ref(s))
    assert s["key"] in str(info.value)


def _golden_queue(store: InMemoryStore) -> None:
    vector = HEADS["heads"][0]
    store.put(KEY, (GOLDEN / vector["file"]).read_bytes())
    for key, file in vector["objects"].items():
        store.put(key, (GOLDEN / file).read_bytes())


def test_python_consumer_producer_and_gc_read_the_golden_segmented_queue(
    mem_store: InMemoryStore, clock: ManualClock
) -> None:
    clock.advance(-3600)  # the golden objects were written an hour ago by the store's clock
    _golden_queue(mem_store)
    clock.advance(3600)
    expected = HEADS["heads"][0]["head"]
    with QueueProducer(mem_store, KEY) as producer:
        appended = producer.enqueue("ingest/01J5T4RTZ9Y8X7W6V5T4S3R2Q2.batch", timeout=30)
    assert appended.sequence == expected["next_sequence"]
    consumer = Consumer(store=mem_store, run_gc=False)
    got = [d.sequence for d in consumer.next_descriptors(100)]
    got += [d.sequence for d in consumer.next_descriptors(100)]
    got += [d.sequence for d in consumer.next_descriptors(100)]
    assert got == [*expected["queued_sequences"], appended.sequence]
    consumer.ack_through(13)  # drops segment a (10..12), low water 13 in segment b
    head = decode_head(mem_store.get(KEY).data, KEY)
    assert [r.key for r in head.refs] == [expected["refs"][1]["key"]] and head.low_water == 14
    result = GarbageCollector(mem_store, KEY, "ingest", grace_period=600).run_once(dry_run=True)
    # The dropped segment is an orphan written an hour before the head: collected; the listed one is kept.
    assert expected["refs"][0]["key"] in result.deleted
    assert expected["refs"][1]["key"] not in result.deleted
    consumer.ack_through(appended.sequence)
    assert decode_head(mem_store.get(KEY).data, KEY).version == 1  # no segment left: v1 again
    consumer.close()


def test_a_listed_segment_that_is_missing_is_corrupt_manifest_not_skipped(mem_store: InMemoryStore) -> None:
    _golden_queue(mem_store)
    missing = HEADS["heads"][0]["head"]["refs"][0]["key"]
    mem_store.delete(missing)
    consumer = Consumer(store=mem_store, run_gc=False)
    with pytest.raises(CorruptManifestError, match="listed but missing") as info:
        consumer.next_descriptors(10)
    assert missing in str(info.value)
    consumer.close()


def test_rfc_v1_reader_still_refuses_a_segmented_head(mem_store: InMemoryStore) -> None:
    with pytest.raises(UnsupportedFormatVersionError, match="version 2"):
        decode_manifest((GOLDEN / "head_v2.bin").read_bytes(), KEY)


def test_inspect_shows_a_segmented_heads_depth_and_segments(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from osqueue.cli import cli

    (tmp_path / "ingest").mkdir()
    (tmp_path / "ingest" / "manifest").write_bytes((GOLDEN / "head_v2.bin").read_bytes())
    expected = HEADS["heads"][0]["head"]
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    dumped = json.loads(result.stdout)
    assert (dumped["format_version"], dumped["depth"], dumped["low_water"]) == (
        2,
        len(expected["queued_sequences"]),
        11,
    )
    assert [s["key"] for s in dumped["refs"]] == [s["key"] for s in expected["refs"]]
    assert [s["level"] for s in dumped["refs"]] == [0, 0] and dumped["refs_per_level"] == {"0": 2}
    assert dumped["tail_sequences"] == [15, 16] and dumped["next_sequence"] == 17
    table = CliRunner().invoke(cli, ["inspect", str(tmp_path)], catch_exceptions=False)
    assert table.exit_code == 0
    rows = {}
    for line in table.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│|").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    assert rows["entries (depth)"].startswith("6 (from the head") and rows["sequences"] == "11..16"
    assert rows["refs"].startswith("2 in the head (level 0: 2 segments)") and "low water 11" in rows["refs"]
    assert "format version 2" in rows["manifest"]


def test_inspect_shows_the_refs_of_a_tree_by_level_and_the_depth_from_the_head(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from osqueue.cli import cli

    vector = next(v for v in HEADS["heads"] if v["name"] == "head_v2_tree")
    (tmp_path / "ingest").mkdir()
    (tmp_path / "ingest" / "manifest").write_bytes((GOLDEN / vector["file"]).read_bytes())  # no object below it
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path), "--json"], catch_exceptions=False)
    dumped = json.loads(result.stdout)
    assert dumped["depth"] == len(vector["head"]["queued_sequences"]) == 14
    assert dumped["refs_per_level"] == {"0": 2, "2": 1}
    assert [(r["level"], r["first_sequence"], r["last_sequence"]) for r in dumped["refs"]] == [
        (0, 10, 12),
        (2, 13, 20),
        (0, 21, 22),
    ]
    table = CliRunner().invoke(cli, ["inspect", str(tmp_path)], catch_exceptions=False).stdout
    assert "14 (from the head: no segment read)" in table
    assert "3 in the head (level 0: 2 segments, level 2: 1 index)" in table


@pytest.mark.parametrize("file", ["head_v2.bin", "head_v2_tree.bin"])
def test_mutated_and_truncated_heads_decode_or_raise_a_typed_error(file: str) -> None:
    import random

    valid = (GOLDEN / file).read_bytes()
    rnd = random.Random(7)
    for i in range(3000):
        b = bytearray(valid)
        if i % 3 == 0:
            for _ in range(1 + rnd.randrange(3)):
                b[rnd.randrange(len(b))] = rnd.randrange(256)
        data = bytes(b)
        if i % 3 == 1:
            data = data[rnd.randrange(len(data)) :]
        elif i % 3 == 2:
            data = data[: rnd.randrange(len(data))]
        try:
            decode_head(data, "m")
        except (CorruptManifestError, UnsupportedFormatVersionError):
            pass


def test_cli_produce_seals_past_its_k_and_tail_and_inspect_read_the_segmented_queue(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from osqueue.cli import cli

    root = str(tmp_path / "q")
    runner = CliRunner()
    for i in range(9):  # one producer (one manifest entry) per run
        r = runner.invoke(cli, ["produce", root, "--manifest-segment-entries", "2"], input=f"v{i}\n")
        assert r.exit_code == 0, r.output
    inspected = json.loads(runner.invoke(cli, ["inspect", root, "--json"], catch_exceptions=False).stdout)
    # K = 2, F = 2: segments sealed at the 3rd, 5th, 7th and 9th run; the 2nd and 3rd were folded into a
    # level-1 index (the first ref never is), the 4th stays beside it (their levels differ)
    assert inspected["format_version"] == 3 and inspected["depth"] == 9
    assert [r["level"] for r in inspected["refs"]] == [0, 1, 0] and inspected["refs_per_level"] == {"0": 2, "1": 1}
    tail = runner.invoke(cli, ["tail", root], catch_exceptions=False)
    assert tail.stdout.split("\n")[:-1] == [f"v{i}" for i in range(9)], "tail walks the index objects"
    some = runner.invoke(cli, ["tail", root, "--max-batches", "5"], catch_exceptions=False)
    assert some.stdout.split("\n")[:-1] == [f"v{i}" for i in range(5)]
    bad = runner.invoke(cli, ["produce", root, "--manifest-segment-entries", "0"], input="x\n")
    assert bad.exit_code == 2 and "--manifest-segment-entries" in bad.output


def _nine_batch_queue(root: str) -> list[SegmentRef]:
    """v0..v8 at K = 2, one manifest entry each: refs [segment 0-1, index (2-3, 4-5), segment 6-7], tail [8]."""
    from osqueue.producer import Producer

    with Producer(root, manifest_segment_entries=2, flush_interval=3600.0) as producer:
        for i in range(9):
            producer.produce([f"v{i}".encode()])
            producer.flush()
    store = open_store(root)
    try:
        refs = decode_head(store.get(KEY).data, KEY).refs
    finally:
        store.close()
    assert [r.level for r in refs] == [0, 1, 0]
    return list(refs)


def _dequeue_and_collect(store: ObjectStore, through: int) -> None:
    """A consumer drains and acks through ``through`` (dequeued), then the segments and index objects that
    dropped are deleted, as GC deletes them once they are a grace period old (GC's timing is not the point)."""
    tree = SegmentTree(ManifestStore(store, KEY))
    before = tree.reachable_keys(decode_head(store.get(KEY).data, KEY))
    consumer = Consumer(store=store, run_gc=False)
    acked = -1
    while acked < through:
        for d in consumer.next_descriptors(through - acked):
            consumer.ack(d.sequence)
            acked = d.sequence
    consumer.close()
    after = tree.reachable_keys(decode_head(store.get(KEY).data, KEY))
    assert isinstance(before, set) and isinstance(after, set) and before - after
    for key in before - after:
        store.delete(key)


def _tail_with_store(monkeypatch: pytest.MonkeyPatch, root: str, store: ObjectStore) -> Any:
    from click.testing import CliRunner

    from osqueue.cli import cli
    from osqueue.cli.options import QueueTarget

    monkeypatch.setattr(QueueTarget, "open", lambda self, must_exist: store)
    return CliRunner().invoke(cli, ["tail", root])


@pytest.mark.parametrize("missing", ["segment", "index object"])
def test_tail_goes_on_past_a_segment_or_index_object_dequeued_and_collected_while_it_read(
    missing: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24, item 4: between tail's head read and its GET of the first segment (or of the index object),
    a consumer dequeues through sequence 3 and GC collects the dropped objects. Tail re-reads the head, which
    no longer reaches the object, and goes on from it: v4..v8 (v0, v1 too when only the index object is
    gone), exit 0, instead of "corrupt queue manifest … listed but missing"."""
    root = str(tmp_path / "q")
    refs = _nine_batch_queue(root)
    target = refs[0].key if missing == "segment" else refs[1].key
    inner = open_store(root)
    store = WrappedStore(inner)
    raced: list[str] = []

    def get(key: str) -> VersionedObject | None:
        if key == target and not raced:
            raced.append(key)
            _dequeue_and_collect(inner, through=3)
        return inner.get(key)

    store.get = get  # type: ignore[method-assign]
    result = _tail_with_store(monkeypatch, root, store)
    assert raced and inner.get(target) is None, "the race happened: the object was collected before the GET"
    assert result.exit_code == 0, result.output
    printed = result.stdout.split("\n")[:-1]
    assert printed == ([] if missing == "segment" else ["v0", "v1"]) + [f"v{i}" for i in range(4, 9)]


def test_tail_still_calls_a_segment_the_head_lists_but_that_is_missing_corrupt(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "q")
    refs = _nine_batch_queue(root)
    store = open_store(root)
    store.delete(refs[2].key)
    result = _tail_with_store(monkeypatch, root, store)
    assert result.exit_code == 2 and "listed but missing" in result.output and refs[2].key in result.output
