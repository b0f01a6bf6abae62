"""Entry-integrity records (docs/format.md §2.1, docs/adr/0006 part 1): the golden vectors, what the
producer writes, and what every reader does with a flipped byte."""

from __future__ import annotations

import json
import pathlib
import zlib

import pytest
from click.testing import CliRunner

from osqueue import metrics as m
from osqueue.cli.app import cli
from osqueue.consumer import Consumer
from osqueue.errors import CorruptBatchError, CorruptManifestError
from osqueue.format import Compression, EntryTag, decode_batch, decode_manifest, encode_batch
from osqueue.format.batch_integrity import (
    EntryIntegrity,
    integrity_of,
    record,
    sink_tag_bytes,
    verify_entry,
    walk,
)
from osqueue.format.manifest import ManifestEntry, MetadataItem
from osqueue.format.manifest_codec import encode_entry
from osqueue.format.manifest_edits import append_entries
from osqueue.producer import Producer
from osqueue.queue.queue_consumer import QueueConsumer
from osqueue.store import InMemoryStore
from osqueue.store.object_store import VersionedObject

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
VECTORS = {v["name"]: v for v in json.loads((GOLDEN / "vectors.json").read_text(encoding="utf-8"))["vectors"]}
MANIFEST = "ingest/manifest"


def _golden_entries() -> list[tuple[ManifestEntry, dict]]:
    v = VECTORS["manifest_integrity"]
    decoded = decode_manifest((GOLDEN / v["file"]).read_bytes(), "golden")
    return list(zip(decoded.entries, v["manifest"]["entries"], strict=True))


def test_golden_integrity_records_decode_verify_and_match_their_batches() -> None:
    checked = 0
    for entry, j in _golden_entries():
        want = j["integrity"]
        got = verify_entry(entry, "golden")
        assert integrity_of(entry.extension) == got
        if want is None:  # a type-3 record of the wrong length: ignored
            assert got is None
            continue
        assert got == EntryIntegrity(want["byte_length"], want["batch_crc32"], want["entry_crc32"])
        batch = (GOLDEN / want["batch_file"]).read_bytes()
        assert (len(batch), zlib.crc32(batch)) == (got.byte_length, got.batch_crc32)
        tag = EntryTag(**j["tag"]) if "tag" in j else None
        assert EntryTag.decode(entry.extension) == tag  # the sink tag after the records
        checked += 1
    assert checked == 3


def test_encode_entry_computes_the_golden_entry_crc() -> None:
    for entry, j in _golden_entries():
        if j["integrity"] is None:
            continue
        zeroed = bytearray(entry.extension)
        zeroed[7 + 8 : 7 + 12] = b"\0\0\0\0"  # the record is first: its entry_crc32 field
        sealed = encode_entry(entry.sequence, entry.location, entry.metadata, bytes(zeroed))
        assert sealed.endswith(entry.extension)


def test_a_flipped_byte_anywhere_in_an_entry_is_corrupt_manifest_naming_the_sequence() -> None:
    entry, _ = _golden_entries()[0]
    payload = bytes([entry.metadata[0].payload[0] ^ 0x20])
    bad = ManifestEntry(entry.sequence, entry.location, [MetadataItem(0, entry.metadata[0].ingestion_time_ms, payload)],
                        entry.extension)  # fmt: skip
    with pytest.raises(CorruptManifestError, match=f"'golden'.*sequence {entry.sequence}"):
        verify_entry(bad, "golden")
    moved = ManifestEntry(entry.sequence + 1, entry.location, entry.metadata, entry.extension)
    with pytest.raises(CorruptManifestError):
        verify_entry(moved, "golden")  # the sequence is covered too


def test_records_walk_never_fails_and_ignores_what_is_not_a_record() -> None:
    assert walk(b"") == ([], None)
    assert walk(b"\x07future\x00\xff") == ([], None)  # not a record: the walk ends
    assert walk(b"OSQ1\x05\xff\xff") == ([], None)  # body_len past the end
    assert walk(b"OSQ1\x02") == ([], None)  # type 2 is not a record
    tag = EntryTag("w", 1, "a").encode()
    assert sink_tag_bytes(b"OSQ1\x09\x00\x00" + tag) == tag  # an empty unknown record skipped
    assert integrity_of(b"OSQ1\x03\x0c\x00" + b"\0" * 11) is None  # truncated body


def test_zstd_batches_carry_the_frame_checksum_and_a_flipped_byte_fails() -> None:
    data = encode_batch([b"abc" * 50, b"x"], Compression.ZSTD)
    assert data[4] & 0x04  # frame header descriptor: Content_Checksum_flag
    flipped = data[: len(data) - 8] + bytes([data[len(data) - 8] ^ 1]) + data[len(data) - 7 :]
    with pytest.raises(CorruptBatchError):
        decode_batch(flipped, "k")


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD])
def test_producer_writes_the_record_and_the_consumer_refuses_a_flipped_batch(
    mem_store: InMemoryStore, compression: Compression
) -> None:
    with Producer(store=mem_store, compression=compression, flush_interval=0.01) as p:
        p.produce([b"one", b"two" * 40]).result(10)
    entry = decode_manifest(mem_store.get(MANIFEST).data, MANIFEST).entries[0]
    rec = integrity_of(entry.extension)
    data = mem_store.get(entry.location).data
    assert rec is not None and (rec.byte_length, rec.batch_crc32) == (len(data), zlib.crc32(data))
    assert verify_entry(entry, MANIFEST) == rec
    mem_store.put(entry.location, data[:3] + bytes([data[3] ^ 0x10]) + data[4:])
    with Consumer(store=mem_store) as c:
        with pytest.raises(CorruptBatchError, match=rf"{entry.location}.*expected {len(data)} bytes"):
            c.next_batch()
        mem_store.put(entry.location, data)  # repaired: the consumer did not advance past it
        batch = c.next_batch()
        assert batch is not None and batch.entries == [b"one", b"two" * 40]


class _FlipOnce(InMemoryStore):
    """Returns a damaged copy of one object on its first GET (a torn transfer)."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.damaged_key, self.gets = key, 0

    def get(self, key: str) -> VersionedObject | None:
        obj = super().get(key)
        if key == self.damaged_key and obj is not None:
            self.gets += 1
            if self.gets == 1:
                return VersionedObject(obj.data[:-1] + bytes([obj.data[-1] ^ 1]), obj.version)
        return obj


def test_a_damaged_transfer_is_read_once_more() -> None:
    data = encode_batch([b"r"])
    key = "ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch"
    store = _FlipOnce(key)
    store.put(key, data)
    raw, _ = append_entries(None, [(key, [MetadataItem(0, 1, b"")], record(data))], MANIFEST)
    store.put(MANIFEST, raw)
    with Consumer(store=store) as c:
        batch = c.next_batch()
        assert batch is not None and batch.entries == [b"r"] and store.gets == 2


def test_an_entry_without_a_record_is_delivered_and_counted_unverified(mem_store: InMemoryStore) -> None:
    data = encode_batch([b"rfc"])
    key = "ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch"
    mem_store.put(key, data)
    mem_store.put(MANIFEST, append_entries(None, [(key, [MetadataItem(0, 1, b"")])], MANIFEST)[0])
    metrics = m.MetricsRegistry()
    with Consumer(store=mem_store, metrics=metrics) as c:
        batch = c.next_batch()
        assert batch is not None and batch.entries == [b"rfc"]
    assert metrics.counter(m.BATCHES_UNVERIFIED).value == 1


def test_queue_consumer_descriptors_carry_the_checked_record(mem_store: InMemoryStore) -> None:
    with Producer(store=mem_store, flush_interval=0.01) as p:
        p.produce([b"hello"]).result(10)
    q = QueueConsumer(mem_store, MANIFEST)
    q.initialize(None)
    (d,), _ = q.descriptors_after(None, 10)
    assert d.integrity is not None and d.integrity.byte_length == len(mem_store.get(d.location).data)


def test_tail_refuses_a_flipped_batch(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    with Producer(str(root), flush_interval=0.01) as p:
        p.produce([b"hello"]).result(10)
    entry = decode_manifest((root / MANIFEST).read_bytes(), MANIFEST).entries[0]
    path = root / entry.location
    data = path.read_bytes()
    path.write_bytes(data[:4] + bytes([data[4] ^ 1]) + data[5:])  # a record byte: decodes, CRC differs
    result = CliRunner().invoke(cli, ["tail", str(root)])
    assert result.exit_code != 0
    assert "integrity check failed" in result.output + str(result.exception)
