"""The Python data source's executor side checks each batch against its producer's integrity record
(docs/format.md §2.1) before delivering it, following failOnDataLoss as the JVM source does."""

from __future__ import annotations

import pathlib

import pytest

pytest.importorskip("pyarrow", reason="osqueue.spark_source needs pyarrow (osqueue[spark])")
pytest.importorskip("pyspark.sql.datasource", reason="the Python data source API (pyspark 4)")

from osqueue import Producer  # noqa: E402
from osqueue.errors import CorruptBatchError  # noqa: E402
from osqueue.format import decode_manifest  # noqa: E402
from osqueue.spark_source.options import BatchReadOptions  # noqa: E402
from osqueue.spark_source.reader import partitions_of, read_partition  # noqa: E402


def _partitions(root: pathlib.Path, fail_on_data_loss: bool):  # type: ignore[no-untyped-def]
    location = BatchReadOptions.parse({"path": str(root)}).location
    manifest = decode_manifest((root / location.manifest_path).read_bytes(), location.manifest_path)
    return partitions_of(location, manifest.entries, fail_on_data_loss)


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
    assert first.integrity is not None and second.integrity is not None
    batch = root / first.key
    data = bytearray(batch.read_bytes())
    data[len(data) // 2] ^= 0x01
    batch.write_bytes(bytes(data))

    with pytest.raises(CorruptBatchError, match=first.key):
        _values(first)
    assert _values(second) == [b"c"]

    lenient, second = _partitions(root, fail_on_data_loss=False)
    assert _values(lenient) == []  # skipped (and logged), not delivered corrupted
    assert _values(second) == [b"c"]
