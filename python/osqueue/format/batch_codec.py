"""Batch files: the record codec, its compression and the decompression cap (JVM: ``BatchCodec``)."""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence

from osqueue.errors import CorruptBatchError, InvalidConfigError, UnsupportedFormatVersionError
from osqueue.format.manifest_codec import FORMAT_VERSION, U32, U32_MAX

BATCH_FOOTER_LEN = 7
MAX_DECOMPRESSED_BLOCK = (1 << 31) - 1
"""A zstd record block that decompresses past 2 GiB − 1 is rejected."""
_BATCH_FOOTER = struct.Struct("<BIH")  # compression, record_count, version


class Compression(enum.IntEnum):
    """Compression of a batch's record block (the footer's ``compression`` byte)."""

    NONE = 0
    ZSTD = 1


# Data batches


def encode_batch(records: Sequence[bytes], compression: Compression = Compression.NONE) -> bytes:
    """Encodes records as a data batch (docs/format.md §3).

    Args:
        records: The records, in order (empty records are allowed).
        compression: ``Compression.ZSTD`` compresses the record block at level 3.
    """
    if len(records) > U32_MAX:
        raise InvalidConfigError("records", len(records), "at most 2^32 - 1 records per batch")
    parts: list[bytes] = []
    for r in records:
        if len(r) > U32_MAX:
            raise InvalidConfigError("record", len(r), "a record is at most 2^32 - 1 bytes")
        parts.append(U32.pack(len(r)))
        parts.append(bytes(r))
    return encode_batch_block(b"".join(parts), len(records), compression)


def encode_batch_block(block: bytes, count: int, compression: Compression = Compression.NONE) -> bytes:
    """A data batch from its record block laid out already: each record's u32 little-endian length,
    then its bytes (docs/format.md §3); :func:`encode_batch` of the same records gives the same bytes.

    Args:
        block: The uncompressed record block.
        count: How many records it holds.
        compression: ``Compression.ZSTD`` compresses the record block at level 3.
    """
    return encode_batch_pieces([block], count, compression)


def encode_batch_pieces(
    pieces: Sequence[bytes | memoryview], count: int, compression: Compression = Compression.NONE
) -> bytes:
    """:func:`encode_batch_block` of the block ``b"".join(pieces)``, copied once (uncompressed): the
    Python data source's sink lays the block out column-wise from Arrow batches, in pieces.

    Args:
        pieces: The uncompressed record block, in pieces (bytes or memoryviews), in order.
        count: How many records it holds.
        compression: ``Compression.ZSTD`` compresses the record block at level 3.
    """
    compression = Compression(compression)
    if count > U32_MAX:
        raise InvalidConfigError("records", count, "at most 2^32 - 1 records per batch")
    footer = _BATCH_FOOTER.pack(int(compression), count, FORMAT_VERSION)
    if compression is Compression.ZSTD:
        import zstandard

        compressor = zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=True)
        return compressor.compress(b"".join(pieces)) + footer
    return b"".join([*pieces, footer])


def _zstd_decompress(block: bytes, key: str) -> bytes:
    """Decompresses every concatenated zstd frame of ``block``; a truncated frame, garbage or
    more than ``MAX_DECOMPRESSED_BLOCK`` bytes of output raise ``CorruptBatchError``.

    Input is fed 4 KiB at a time, so one step can only produce a bounded amount of output
    (a decompression bomb is stopped near the cap, not after allocating its whole output).
    """
    import zstandard

    out = bytearray()
    dctx = zstandard.ZstdDecompressor()
    pos, n = 0, len(block)
    step = 4096
    try:
        while pos < n:
            frame = dctx.decompressobj()
            while not frame.eof:
                if pos >= n:
                    raise CorruptBatchError(key, "zstd block ends inside a frame (truncated)")
                chunk = block[pos : pos + step]
                out += frame.decompress(chunk)
                if len(out) > MAX_DECOMPRESSED_BLOCK:
                    raise CorruptBatchError(key, "zstd block decompresses past 2 GiB - 1")
                pos += len(chunk) - (len(frame.unused_data) if frame.eof else 0)
    except zstandard.ZstdError as e:
        raise CorruptBatchError(key, f"zstd block does not decompress: {e}") from e
    return bytes(out)


def decode_batch_block(data: bytes, key: str) -> tuple[bytes, int]:
    """A data batch's record block (decompressed) and its footer's record count, the footer checked;
    :func:`decode_batch` walks the block's records. The Python data source's reader builds its Arrow
    column from the block (the walk's checks are :func:`decode_batch`'s).

    Raises:
        CorruptBatchError: A short object, an unknown compression or a block that does not decompress.
        UnsupportedFormatVersionError: The version is not 1.
    """
    n = len(data)
    if n < BATCH_FOOTER_LEN:
        raise CorruptBatchError(key, f"shorter than the 7-byte footer ({n} bytes)")
    compression, count, version = _BATCH_FOOTER.unpack_from(data, n - BATCH_FOOTER_LEN)
    if version != FORMAT_VERSION:
        raise UnsupportedFormatVersionError(key, "batch", version)
    if compression == Compression.NONE:
        return bytes(data[: n - BATCH_FOOTER_LEN]), count
    if compression == Compression.ZSTD:
        return _zstd_decompress(bytes(data[: n - BATCH_FOOTER_LEN]), key), count
    raise CorruptBatchError(key, f"unknown compression type 0x{compression:02x}")


def decode_batch(data: bytes, key: str) -> list[bytes]:
    """Decodes a data batch into its records.

    Args:
        data: The batch object's bytes.
        key: The object's key, named in errors.

    Raises:
        CorruptBatchError: See the table in docs/format.md §3.
        UnsupportedFormatVersionError: The version is not 1.
    """
    block, count = decode_batch_block(data, key)
    size = len(block)
    if count * 4 > size:
        raise CorruptBatchError(key, f"fewer records than record_count {count} ({size}-byte block)")
    records: list[bytes] = []
    pos = 0
    for i in range(count):
        if pos + 4 > size:
            raise CorruptBatchError(key, f"fewer records than record_count {count} (record {i} missing)")
        (length,) = U32.unpack_from(block, pos)
        pos += 4
        if pos + length > size:
            raise CorruptBatchError(key, f"record {i} ({length} bytes) runs past the block")
        records.append(block[pos : pos + length])
        pos += length
    if pos != size:
        raise CorruptBatchError(key, f"trailing bytes: {size - pos} bytes after {count} records")
    return records
