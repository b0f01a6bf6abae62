"""The golden vectors of tests/golden: decode, re-encode, reject."""

from __future__ import annotations

import base64
import importlib.util
import json
import pathlib

import pytest

from osqueue.consumer import Consumer
from osqueue.errors import CorruptBatchError, CorruptManifestError, UnsupportedFormatVersionError
from osqueue.format import (
    Compression,
    DequeueReceipts,
    EntryTag,
    Manifest,
    ManifestEntry,
    MetadataItem,
    decode_batch,
    decode_manifest,
    encode_batch,
    encode_manifest,
)
from osqueue.store import InMemoryStore

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
VECTORS = json.loads((GOLDEN / "vectors.json").read_text(encoding="utf-8"))["vectors"]
ERRORS = {
    "CorruptManifest": CorruptManifestError,
    "CorruptBatch": CorruptBatchError,
    "UnsupportedFormatVersion": UnsupportedFormatVersionError,
}


def _b(text: str) -> bytes:
    return base64.b64decode(text)


def _expected_manifest(j: dict) -> Manifest:
    return Manifest(
        [
            ManifestEntry(
                e["sequence"],
                e["location"],
                [MetadataItem(m["start_index"], m["ingestion_time_ms"], _b(m["payload_b64"])) for m in e["metadata"]],
                _b(e["extension_b64"]),
            )
            for e in j["entries"]
        ],
        j["next_sequence"],
        j["epoch"],
    )


def _ids(vectors: list[dict]) -> list[str]:
    return [v["name"] for v in vectors]


VALID = [v for v in VECTORS if "error" not in v]
REJECTED = [v for v in VECTORS if "error" in v]


@pytest.mark.parametrize("vector", VALID, ids=_ids(VALID))
def test_valid_vector_decodes_and_reencodes(vector: dict) -> None:
    data = (GOLDEN / vector["file"]).read_bytes()
    if vector["kind"] == "manifest":
        decoded = decode_manifest(data, vector["name"])
        assert decoded == _expected_manifest(vector["manifest"])
        assert vector["reencode_identical"] is True
        assert encode_manifest(decoded) == data
    else:
        records = decode_batch(data, vector["name"])
        assert records == [_b(r) for r in vector["batch"]["records_b64"]]
        compression = Compression.ZSTD if vector["batch"]["compression"] == "zstd" else Compression.NONE
        reencoded = encode_batch(records, compression)
        if vector["reencode_identical"]:
            assert reencoded == data
        assert decode_batch(reencoded, "reencoded") == records
        assert reencoded[-7] == data[-7] == int(compression)


@pytest.mark.parametrize("vector", REJECTED, ids=_ids(REJECTED))
def test_rejected_vector_raises_typed_error_naming_the_object(vector: dict) -> None:
    data = (GOLDEN / vector["file"]).read_bytes()
    expected = ERRORS[vector["error"]]
    decode = decode_manifest if vector["kind"] == "manifest" else decode_batch
    with pytest.raises(expected) as info:
        decode(data, f"some/key/{vector['name']}")
    assert type(info.value) is expected  # not a subclass or another corrupt-kind error
    assert f"some/key/{vector['name']}" in str(info.value)
    assert info.value.kind.value == "PersistentState"


def test_every_rejection_case_of_the_spec_has_a_vector() -> None:
    names = set(_ids(REJECTED))
    required = {
        "manifest_zero_bytes", "manifest_short", "manifest_bad_version", "manifest_entries_past_end",
        "manifest_entry_len_too_small", "manifest_metadata_past_entry_end", "manifest_invalid_utf8_location",
        "manifest_trailing_bytes", "manifest_non_contiguous", "manifest_last_seq_not_below_next",
        "batch_short", "batch_bad_version", "batch_unknown_compression_02", "batch_unknown_compression_ff",
        "batch_record_past_end", "batch_fewer_records", "batch_trailing_bytes", "batch_corrupt_zstd",
    }  # fmt: skip
    assert required <= names
    assert (GOLDEN / "manifest_empty.bin").stat().st_size == 22


def test_vectors_json_schema() -> None:
    for v in VECTORS:
        assert v["kind"] in ("manifest", "batch")
        assert (GOLDEN / v["file"]).is_file()
        if "error" in v:
            assert set(v) == {"name", "file", "kind", "error"}
            assert v["error"] in ERRORS
        else:
            assert set(v) == {"name", "file", "kind", v["kind"], "reencode_identical"}
            if v["kind"] == "batch":
                assert v["batch"]["compression"] in ("none", "zstd")


def test_vectors_are_reproducible_from_make_vectors(tmp_path: pathlib.Path) -> None:
    spec = importlib.util.spec_from_file_location("make_vectors", GOLDEN / "make_vectors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["make_vectors.py", str(tmp_path)])
    fresh = json.loads((tmp_path / "vectors.json").read_text(encoding="utf-8"))["vectors"]
    assert fresh == VECTORS
    for v in VECTORS:
        zstd = v["kind"] == "batch" and "zstd" in v["name"]
        if not zstd:  # zstd bytes depend on the compressor build
            assert (tmp_path / v["file"]).read_bytes() == (GOLDEN / v["file"]).read_bytes(), v["name"]


def _manifest_entries() -> list[dict]:
    return [e for v in VALID if v["kind"] == "manifest" for e in v["manifest"]["entries"]]


def test_sink_tags_decode_and_python_encode_gives_the_golden_bytes() -> None:
    entries = _manifest_entries()
    assert sum("tag" in e for e in entries) >= 4
    for e in entries:
        ext = _b(e["extension_b64"])
        if "tag" in e:
            tag = EntryTag(e["tag"]["writer_id"], e["tag"]["batch_id"], e["tag"]["attempt_id"])
            assert EntryTag.decode(ext) == tag
            # the bytes the JVM's EntryTag.encode must give too: the last of the extension records
            assert ext.endswith(tag.encode())
        else:
            assert EntryTag.decode(ext) is None


def test_consumer_skips_the_replayed_copy_of_the_golden_manifest(mem_store: InMemoryStore) -> None:
    vector = next(v for v in VALID if v["name"] == "manifest_sink_tags")
    store = mem_store
    store.put("ingest/manifest", (GOLDEN / vector["file"]).read_bytes())
    for e in vector["manifest"]["entries"]:
        store.put(e["location"], encode_batch([str(e["sequence"]).encode()]))
    with Consumer(store=store) as c:
        batches = list(c)
        assert [b.sequence for b in batches] == [10, 11, 12, 14]
        c.ack_through(14)
    assert decode_manifest(store.get("ingest/manifest").data, "m").entries == []


def test_dequeue_receipts_golden_file() -> None:
    data = (GOLDEN / "receipts_v1.bin").read_bytes()
    # The content make_vectors.py wrote (its RECEIPTS), spelled out: the Scala suite checks the same.
    expected = DequeueReceipts(7, ("ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch", "ingest/ü.batch"))
    assert DequeueReceipts.decode(data) == expected
    assert expected.encode() == data
    v2 = (GOLDEN / "receipts_v2.bin").read_bytes()
    of_incarnation = DequeueReceipts(expected.first, expected.locations, incarnation=42)
    assert DequeueReceipts.decode(v2) == of_incarnation and of_incarnation.encode() == v2
    assert DequeueReceipts.decode(v2[:-1]) is None and DequeueReceipts.decode(v2 + b"\x01") is None
