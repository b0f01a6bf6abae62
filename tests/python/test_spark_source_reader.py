"""The Python data source's executor side checks each batch against its producer's integrity record
(docs/format.md §2.1) before delivering it, following failOnDataLoss as the JVM source does."""

from __future__ import annotations

import dataclasses
import pathlib
import threading

import pytest

pytest.importorskip("pyarrow", reason="osqueue.spark_source needs pyarrow (osqueue[spark])")
pytest.importorskip("pyspark.sql.datasource", reason="the Python data source API (pyspark 4)")

import pyarrow as pa  # noqa: E402

from osqueue import Producer  # noqa: E402
from osqueue.errors import CorruptBatchError  # noqa: E402
from osqueue.format import decode_manifest  # noqa: E402
from osqueue.spark_source import partition_reader  # noqa: E402
from osqueue.spark_source.options import BatchReadOptions  # noqa: E402
from osqueue.spark_source.reader import partitions_of, read_partition  # noqa: E402


def _planned(root: pathlib.Path, fail_on_data_loss: bool):  # type: ignore[no-untyped-def]
    location = BatchReadOptions.parse({"path": str(root)}).location
    manifest = decode_manifest((root / location.manifest_path).read_bytes(), location.manifest_path)
    return partitions_of(location, manifest.entries, fail_on_data_loss)


def _partitions(root: pathlib.Path, fail_on_data_loss: bool):  # type: ignore[no-untyped-def]
    """One partition per entry (the planner groups consecutive entries: split them back)."""
    return [dataclasses.replace(p, entries=(e,)) for p in _planned(root, fail_on_data_loss) for e in p.entries]


def _values(partition) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [v for batch in read_partition(partition) for v in batch.column(0).to_pylist()]


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_flipped_byte_in_a_batch_is_never_delivered(tmp_path: pathlib.Path, compression: str) -> None:
    root = tmp_path / "q"
    with Producer(str(root), flush_interval=3600, compression=compression) as producer:
        for values in ([b"a", b"b"], [b"c"]):  # one batch each
            handle = producer.produce(values)
            producer.flush()
            handle.wait_durable(30)
    first, second = _partitions(root, fail_on_data_loss=True)
    assert first.entries[0].integrity is not None and second.entries[0].integrity is not None
    batch = root / first.entries[0].key
    data = bytearray(batch.read_bytes())
    data[len(data) // 2] ^= 0x01
    batch.write_bytes(bytes(data))

    with pytest.raises(CorruptBatchError, match=first.entries[0].key):
        _values(first)
    assert _values(second) == [b"c"]

    lenient, second = _partitions(root, fail_on_data_loss=False)
    assert _values(lenient) == []  # skipped (and logged), not delivered corrupted
    assert _values(second) == [b"c"]


def _queue(root: pathlib.Path, batches: list[list[bytes]]) -> None:
    with Producer(str(root), flush_interval=3600) as producer:
        for values in batches:  # one batch file each
            handle = producer.produce(values)
            producer.flush()
            handle.wait_durable(30)


def test_consecutive_entries_share_a_partition_as_the_jvm_planner_cuts_them(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "q"
    _queue(root, [[b"%d-%d" % (b, i) for i in range(b + 1)] for b in range(5)])
    (whole,) = _planned(root, fail_on_data_loss=True)
    assert [e.sequence for e in whole.entries] == [0, 1, 2, 3, 4]
    batches = list(read_partition(whole))  # one Arrow record batch per batch file
    assert [b.num_rows for b in batches] == [1, 2, 3, 4, 5]
    rows = [r for b in batches for r in b.to_pylist()]
    assert [(r["value"], r["sequence"], r["index"]) for r in rows] == [
        (b"%d-%d" % (b, i), b, i) for b in range(5) for i in range(b + 1)
    ]
    assert {r["location"] for r in rows if r["sequence"] == 3} == {whole.entries[3].key}
    assert all(r["ingestionTime"] is not None for r in rows)

    monkeypatch.setattr(partition_reader, "SLICE_ENTRIES", 2)
    assert [[e.sequence for e in p.entries] for p in _planned(root, True)] == [[0, 1], [2, 3], [4]]
    sizes = [e.integrity.byte_length for e in whole.entries]  # type: ignore[union-attr]
    monkeypatch.setattr(partition_reader, "SLICE_ENTRIES", 128)
    monkeypatch.setattr(partition_reader, "SLICE_BYTES", sizes[0] + sizes[1])
    planned = [[e.sequence for e in p.entries] for p in _planned(root, True)]
    assert planned[0] == [0, 1] and [s for run in planned for s in run] == [0, 1, 2, 3, 4]
    monkeypatch.setattr(partition_reader, "SLICE_BYTES", 1)  # each batch file is larger: a partition of its own
    assert [[e.sequence for e in p.entries] for p in _planned(root, True)] == [[0], [1], [2], [3], [4]]


def test_a_partition_holds_128_mib_of_batch_files_not_the_jvm_planners_32() -> None:
    # 489 batch files of 1 MiB (the bench's large queue): 4 Python tasks, not 16; a Python task's set-up
    # in its worker cost as much as reading 32 MiB (docs/performance.md §2.3, session 14)
    mib = 1 << 20
    cut = [len(run) for run in partition_reader.runs([mib] * 489, lambda size: size)]
    assert cut == [128, 128, 128, 105]
    assert [len(run) for run in partition_reader.runs([1000] * 300, lambda size: size)] == [128, 128, 44]
    assert [len(run) for run in partition_reader.runs([100 * mib] * 3, lambda size: size)] == [1, 1, 1]


def test_a_lost_entry_inside_a_partition_skips_only_that_entry(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    _queue(root, [[b"a"], [b"b"], [b"c"]])
    (lenient,) = _planned(root, fail_on_data_loss=False)
    (root / lenient.entries[1].key).unlink()
    assert _values(lenient) == [b"a", b"c"]
    (strict,) = _planned(root, fail_on_data_loss=True)
    batches = read_partition(strict)
    assert next(batches).column(0).to_pylist() == [b"a"]  # in order: the loss is raised at its entry's turn
    with pytest.raises(Exception, match="OSQUEUE_DATA_LOSS"):
        next(batches)


def test_a_task_fetches_its_batch_files_ahead(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "q"
    _queue(root, [[b"%d" % b] for b in range(6)])
    (whole,) = _planned(root, fail_on_data_loss=True)
    store = partition_reader.store_of(whole.location)
    together = threading.Barrier(3, timeout=30)  # broken (an error) unless 3 GETs are in flight at once

    class Gated:
        def get(self, key: str):  # type: ignore[no-untyped-def]
            if key in (whole.entries[0].key, whole.entries[1].key, whole.entries[2].key):
                together.wait()
            return store.get(key)

    monkeypatch.setattr(partition_reader, "store_of", lambda location: Gated())
    assert _values(whole) == [b"%d" % b for b in range(6)]


def test_metadata_columns_follow_each_item_range() -> None:
    from osqueue.format.manifest import MetadataItem

    items = (MetadataItem(2, 5, b"x"), MetadataItem(4, 7, b"y"), MetadataItem(4, 8, b"z"))
    times, payloads = partition_reader._metadata_columns(items, 6)
    assert payloads.to_pylist() == [None, None, b"x", b"x", b"z", b"z"]
    assert [None if t is None else t.timestamp() * 1000 for t in times.to_pylist()] == [None, None, 5, 5, 8, 8]
    assert partition_reader._metadata_columns((), 3)[1].to_pylist() == [None, None, None]
    assert partition_reader._metadata_columns(items, 0)[0].to_pylist() == []


def _batches_to_decode() -> list[tuple[str, bytes]]:
    """Batch files of every shape: records of one size, of many sizes, empty ones, none, zstd."""
    import random

    from osqueue.format.batch_codec import Compression, encode_batch

    rng = random.Random(27)
    shapes = {
        "one size": [b"%04d" % i * 256 for i in range(300)],
        "many sizes": [rng.randbytes(rng.randrange(0, 2000)) for _ in range(300)],
        "empty records": [b"", b"", b""],
        "one empty among others": [b"abcd", b"", b"abcd"],
        "no records": [],
        "one record": [b"x" * 5000],
        "sizes that look like one stride": [b"aaaa", b"bbbbbbbb", b"", b"cccc"],
    }
    out = [(name, encode_batch(records)) for name, records in shapes.items()]
    return out + [(f"{name}, zstd", encode_batch(r, Compression.ZSTD)) for name, r in shapes.items()]


def test_the_record_column_holds_decode_batchs_records() -> None:
    """The source builds each batch file's value column from its block (no Python object per record):
    the same records as decode_batch, for every shape of batch."""
    from osqueue.format.batch_codec import decode_batch
    from osqueue.spark_source.arrow_records import record_column

    for name, data in _batches_to_decode():
        column = record_column(data, "k")
        assert column.type == pa.binary(), name
        assert column.to_pylist() == decode_batch(data, "k"), name


def test_the_record_column_raises_decode_batchs_error_on_a_corrupt_batch() -> None:
    """A block whose records do not walk to its end exactly: the same CorruptBatchError (message and
    all) as decode_batch, for a truncated record, a wrong count, trailing bytes and a short object."""
    from osqueue.format.batch_codec import decode_batch, encode_batch
    from osqueue.spark_source.arrow_records import record_column

    good = encode_batch([b"abcd", b"efgh", b"ij"])
    uniform = encode_batch([b"abcd", b"efgh"])
    body, footer = good[:-7], good[-7:]
    corrupt = {
        "record runs past the block": body[:-1] + footer,
        "trailing bytes": body + b"\x00" + footer,
        "count too high": body + bytes([0, 4]) + footer[2:],
        "count too low": body + bytes([0, 2]) + footer[2:],
        "uniform, count too low": uniform[:-7] + bytes([0, 1]) + uniform[-5:],
        "short object": b"\x00\x01",
        "unknown compression": body + bytes([9]) + footer[1:],
    }
    for name, data in corrupt.items():
        with pytest.raises(CorruptBatchError) as expected:
            decode_batch(data, "k")
        with pytest.raises(CorruptBatchError) as got:
            record_column(data, "k")
        assert str(got.value) == str(expected.value), name


def test_the_local_store_reads_a_batch_file_without_hashing_it(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task reads the local store's batch files with get_bytes (JVM: getBytes): no SHA-256 of each
    file for a version nobody uses; the values are those of the queue."""
    from osqueue.store import local_file_system_store

    root = tmp_path / "q"
    _queue(root, [[b"a", b"b"], [b"c"]])
    (whole,) = _planned(root, fail_on_data_loss=True)
    hashed: list[int] = []
    real = local_file_system_store._content_version
    monkeypatch.setattr(local_file_system_store, "_content_version", lambda data: hashed.append(1) or real(data))
    assert _values(whole) == [b"a", b"b", b"c"]
    assert hashed == []
    assert partition_reader.store_of(whole.location).get(whole.entries[0].key) is not None  # get still versions
    assert hashed == [1]
