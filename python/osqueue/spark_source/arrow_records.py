"""Records as Arrow columns and back, without a Python object per record (issue 27): the sink's
``value`` column becomes batch files' record blocks, and the source's batch file becomes a ``value``
column (:func:`record_column`).

A batch file's record block (docs/format.md §3) is each record's u32 little-endian length, then its
bytes. For a binary (or string, viewed as binary) column, Arrow gives the lengths from the offsets
buffer; ``binary_join_element_wise`` of a column of 4-byte length prefixes with the values lays the
block out in one kernel call, and each file's block is a slice of its data buffer. Files are cut where
the row-wise writer cuts them (:func:`osqueue.spark_source.writer.write_task`: after the row that
brings the file's bytes to ``flushSizeBytes``), so the files' bytes and their split are those of the
row-wise path (``tests/python/test_spark_source_sink.py`` compares them). The row-wise path remains
for a ``metadata`` column (a metadata item per run of equal payloads) and for a big-endian host.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from osqueue.errors import InvalidConfigError
from osqueue.format.batch_codec import decode_batch, decode_batch_block
from osqueue.format.manifest_codec import U32, U32_MAX
from osqueue.spark_source.options import OsqueueSparkError

COLUMN_WISE = sys.byteorder == "little"
"""Arrow's buffers are in the host's byte order; the block's lengths are little-endian."""


@dataclass(frozen=True)
class FramedColumn:
    """One Arrow batch's values as a record block: ``data[ends[i - 1]:ends[i]]`` is record i framed
    (its length, then its bytes), and ``sizes[i]`` the values' bytes through record i."""

    data: memoryview
    ends: np.ndarray  # int64, n + 1 entries, ends[0] the first record's start
    sizes: np.ndarray  # int64, n + 1 entries, sizes[0] == 0

    def __len__(self) -> int:
        return len(self.ends) - 1


def null_value() -> OsqueueSparkError:
    return OsqueueSparkError(
        "OSQUEUE_SINK_NULL_VALUE", "the osqueue sink got a row whose 'value' is null; queue entries cannot be null"
    )


def framed(column: pa.Array) -> FramedColumn:
    """The record block of a binary or string column (large ones too)."""
    if pa.types.is_string(column.type):
        column = column.view(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.view(pa.large_binary())
    if column.null_count:
        raise null_value()
    n = len(column)
    lengths = pc.binary_length(column)
    if n and pc.max(lengths).as_py() > U32_MAX:
        raise InvalidConfigError("record", pc.max(lengths).as_py(), "a record is at most 2^32 - 1 bytes")
    prefixes = pc.cast(lengths, pa.uint32())
    buffer = prefixes.buffers()[1]
    assert buffer is not None
    large = pa.types.is_large_binary(column.type)
    width = np.int64 if large else np.int32
    prefix_offsets = pa.py_buffer(np.arange(0, 4 * n + 1, 4, dtype=width).tobytes())
    prefix_column = pa.Array.from_buffers(
        column.type, n, [None, prefix_offsets, buffer.slice(prefixes.offset * 4, 4 * n)]
    )
    joined = pc.binary_join_element_wise(prefix_column, column, pa.scalar(b"", column.type))
    offsets, data = joined.buffers()[1], joined.buffers()[2]
    assert offsets is not None
    ends = np.frombuffer(offsets, dtype=width)[joined.offset : joined.offset + n + 1].astype(np.int64)
    sizes = np.zeros(n + 1, dtype=np.int64)
    if n:
        np.cumsum(np.diff(ends) - 4, out=sizes[1:])
    return FramedColumn(memoryview(data) if data is not None else memoryview(b""), ends, sizes)


@dataclass
class Pending:
    """The records of the file being filled: its block's pieces, its record count and value bytes."""

    pieces: list[memoryview]
    count: int = 0
    size: int = 0


def file_blocks(
    batches: Iterator[pa.RecordBatch], value: int, flush_size_bytes: int
) -> Iterator[tuple[list[memoryview], int]]:
    """Each file's record block (as pieces to join) and record count, cut as the row-wise writer cuts:
    a file ends after the row whose value bytes bring it to ``flush_size_bytes``."""
    pending = Pending([])
    for batch in batches:
        col = framed(batch.column(value))
        n, start = len(col), 0
        while start < n:
            # The first row i >= start after which the file holds flush_size_bytes: sizes[i + 1] - base.
            base = col.sizes[start] - pending.size
            cut = int(np.searchsorted(col.sizes, base + flush_size_bytes, side="left"))
            stop = min(max(cut, start + 1), n)  # rows [start, stop) go into the file
            pending.pieces.append(col.data[int(col.ends[start]) : int(col.ends[stop])])
            pending.count += stop - start
            pending.size += int(col.sizes[stop] - col.sizes[start])
            start = stop
            if pending.size >= flush_size_bytes:
                yield pending.pieces, pending.count
                pending = Pending([])
    if pending.count:
        yield pending.pieces, pending.count


def record_column(data: bytes, key: str) -> pa.Array:
    """The records of a batch file as an Arrow binary column: :func:`decode_batch`'s records, and its
    errors (a block whose records do not walk to its end exactly, or past 2 GiB, is decoded by
    :func:`decode_batch`, which raises the error naming it). The block is the column's data buffer with each record's length
    prefix in its value; one ``binary_slice`` kernel call drops the prefixes (no Python object per record)."""
    block, count = decode_batch_block(data, key)
    starts = record_starts(block, count)
    if starts is None:  # decode_batch raises the CorruptBatchError naming the first inconsistency
        return pa.array(decode_batch(data, key), pa.binary())  # (or decodes a block past int32 offsets)
    framed = pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(starts.astype(np.int32)), pa.py_buffer(block)]
    )
    longest = int(np.diff(starts).max()) if count else 4
    return pc.binary_slice(framed, 4, longest)  # an explicit stop: pyarrow 26 fails on the default one


def record_starts(block: bytes, count: int) -> np.ndarray | None:
    """Where each of the block's ``count`` records (its length prefix) starts, then the block's size
    (``count + 1`` int64s); None unless the records walk to the block's end exactly. Records of one size
    (the common case) are checked at once, others walked record by record. A block is below 2 GiB (the
    decompression cap), so int32 offsets hold it."""
    size = len(block)
    if count == 0:
        return np.zeros(1, dtype=np.int64) if size == 0 else None
    if size < 4 or size > (1 << 31) - 1:
        return None
    (first,) = U32.unpack_from(block, 0)
    stride = 4 + first
    if stride * count == size:
        starts: np.ndarray = np.arange(count + 1, dtype=np.int64) * stride
        lengths = np.frombuffer(block, dtype=np.uint8)[starts[:-1, None] + np.arange(4)].view("<u4")
        if bool((lengths == first).all()):
            return starts
    positions: list[int] = []
    pos = 0
    unpack = U32.unpack_from
    for _ in range(count):
        if pos + 4 > size:
            return None
        positions.append(pos)
        pos += 4 + unpack(block, pos)[0]
    if pos != size:
        return None
    positions.append(size)
    return np.array(positions, dtype=np.int64)
