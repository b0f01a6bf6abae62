"""Intent objects of cooperative commit (docs/format.md §2.4, docs/adr/0007 part 1): a producer
announces batches it uploaded, so that whichever producer's CAS wins appends them too.

``<manifestPath>.intents/<ULID>-<writer_id hex>-<first_batch>-<count>.intent``; integers little-endian
as the manifest's. JVM: `osqueue.format.IntentCodec`.
"""

from __future__ import annotations

import base64
import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from osqueue.errors import CorruptManifestError
from osqueue.format.batch_integrity import INTEGRITY_TYPE, integrity_of, record_of, walk
from osqueue.format.manifest import MAX_START_INDEX, MetadataItem, NewEntry
from osqueue.format.manifest_codec import decode_manifest, encode_entry, footer_bytes
from osqueue.format.writer_sequence import sequence_record

INTENT_MAGIC = b"OSQI"
INTENT_VERSION = 1
INTENTS_SUFFIX = ".intents"
MAX_INTENT_BATCHES = 0xFFFF
_HEAD = struct.Struct("<4sB16sQH")
_NAME = re.compile(
    r"([0-9A-HJKMNP-TV-Z]{26})-([0-9a-f]{32})-([0-9]{1,20})-([0-9]{1,5})(?:-([A-Za-z0-9_-]{1,1024}))?\.intent"
)
MAX_KEY_BYTES = 1024
"""The longest key an in-key intent takes (S3's, GCS's and Azure's key limit)."""
MAX_FILE_NAME_BYTES = 255
"""The longest in-key intent name (after ``.intents/``) on the local file system store: one file name."""
_TIME_LIMIT = 1 << 53  # in-key ingestion times are in [0, 2^53): their deltas fit 54 bits


@dataclass(frozen=True)
class Intent:
    """A decoded intent: batches ``first_batch ..`` of ``writer_id``, one manifest entry each (their
    integrity records' ``entry_crc32`` 0: the committer's encoder fills it at the sequence it assigns)."""

    writer_id: bytes
    first_batch: int
    entries: tuple[NewEntry, ...]

    @property
    def last_batch(self) -> int:
        return self.first_batch + len(self.entries) - 1


@dataclass(frozen=True)
class IntentName:
    """What an intent's name says (a committer skips intents of landed batches without reading them)."""

    ulid: str
    writer_id: bytes
    first_batch: int
    count: int
    payload: str | None = None
    """The in-key form's batches (base64url, §2.4 "In-key intents"); None: the body has to be read."""


def intents_prefix(manifest_path: str) -> str:
    """Where a manifest's intents live, with the trailing ``/``."""
    return f"{manifest_path}{INTENTS_SUFFIX}/"


def intent_key(manifest_path: str, ulid: str, writer_id: bytes, first_batch: int, count: int) -> str:
    return f"{intents_prefix(manifest_path)}{ulid}-{writer_id.hex()}-{first_batch}-{count}.intent"


def parse_intent_name(manifest_path: str, key: str) -> IntentName | None:
    """The fields of an intent's key, or None if it is not one of this manifest's intents."""
    prefix = intents_prefix(manifest_path)
    if not key.startswith(prefix):
        return None
    m = _NAME.fullmatch(key[len(prefix) :])
    if m is None:
        return None
    first, count = int(m.group(3)), int(m.group(4))
    if count < 1 or count > MAX_INTENT_BATCHES or first >= 1 << 63:
        return None
    return IntentName(m.group(1), bytes.fromhex(m.group(2)), first, count, m.group(5))


# -- in-key intents (§2.4 "In-key intents"): the name carries the batches, a committer reads no body ----------


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zigzag(v: int) -> int:
    return v * 2 if v >= 0 else -v * 2 - 1


def in_key_payload(writer_id: bytes, first_batch: int, entries: Sequence[NewEntry]) -> str | None:
    """The in-key form of these batches (base64url, no padding), or None if one of them does not have its
    shape: a location, metadata items in ``start_index`` order with times in [0, 2^53), and an extension that
    is exactly an integrity record (``entry_crc32`` 0) or none, then the type-4 record of its ``(writer_id, batch)``."""
    out = bytearray()
    time, payload = 0, b""
    for i, e in enumerate(entries):
        location, metadata = e[0], e[1]
        ext = bytes(e[2]) if len(e) == 3 else b""
        rec = integrity_of(ext)
        integrity = b"" if rec is None else record_of(rec.byte_length, rec.batch_crc32)
        if ext != integrity + sequence_record(writer_id, first_batch + i):
            return None
        loc = location.encode("utf-8")
        out += _varint(len(loc)) + loc
        if rec is None:
            out += _varint(0)
        else:
            out += _varint(rec.byte_length + 1) + struct.pack("<I", rec.batch_crc32)
        out += _varint(len(metadata))
        start = -1  # per batch; time and payload run on across the intent's batches
        for item in metadata:
            if item.start_index < max(start, 0) or not 0 <= item.ingestion_time_ms < _TIME_LIMIT:
                return None
            own_start, own_payload = item.start_index - start != 1, bytes(item.payload) != payload
            out += _varint(_zigzag(item.ingestion_time_ms - time) * 4 + own_start + 2 * own_payload)
            if own_start:
                out += _varint(item.start_index - start)
            if own_payload:
                out += _varint(len(item.payload)) + item.payload
            start, time, payload = item.start_index, item.ingestion_time_ms, bytes(item.payload)
    return base64.urlsafe_b64encode(bytes(out)).rstrip(b"=").decode("ascii")


def in_key_intent_key(
    manifest_path: str,
    ulid: str,
    writer_id: bytes,
    first_batch: int,
    entries: Sequence[NewEntry],
    max_name_bytes: int = MAX_KEY_BYTES,
) -> str | None:
    """The in-key intent key of these batches, or None when they do not have the shape (:func:`in_key_payload`)
    or the key would pass 1,024 bytes or its name (after ``.intents/``) ``max_name_bytes``: announce them
    with :func:`intent_key` then (a committer GETs its body)."""
    payload = in_key_payload(writer_id, first_batch, entries)
    if payload is None:
        return None
    name = f"{ulid}-{writer_id.hex()}-{first_batch}-{len(entries)}-{payload}.intent"
    key = intents_prefix(manifest_path) + name
    if len(name) > max_name_bytes or len(key.encode("utf-8")) > MAX_KEY_BYTES:
        return None
    return key


class _Reader:
    def __init__(self, data: bytes, key: str) -> None:
        self.data, self.pos, self.key = data, 0, key

    def fail(self, msg: str) -> CorruptManifestError:
        return CorruptManifestError(self.key, f"in-key intent: {msg}")

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise self.fail("runs past the end")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def varint(self) -> int:
        v = shift = 0
        while True:
            (b,) = self.take(1)
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                if b == 0 and shift:
                    raise self.fail("a varint is not in its shortest form")
                return v
            shift += 7
            if shift >= 63:
                raise self.fail("a varint is longer than 9 bytes")


def decode_in_key_intent(name: IntentName, key: str) -> Intent:
    """The intent an in-key name announces (no GET; the name decides, its body is not read).

    Raises:
        CorruptManifestError: A payload that does not decode exactly (the committer skips and counts it).
    """
    if name.payload is None:
        raise CorruptManifestError(key, "in-key intent: the name carries no batches")
    text = name.payload
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as e:
        raise CorruptManifestError(key, "in-key intent: not base64url") from e
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii") != text:
        raise CorruptManifestError(key, "in-key intent: not canonical base64url")
    r = _Reader(data, key)
    entries: list[NewEntry] = []
    time, payload = 0, b""
    for i in range(name.count):
        try:
            location = r.take(r.varint()).decode("utf-8")
        except UnicodeDecodeError as e:
            raise r.fail(f"batch {i}: its location is not UTF-8") from e
        length_1 = r.varint()  # 0: no integrity record, else its byte_length + 1 (then its batch_crc32)
        integrity = b"" if length_1 == 0 else record_of(length_1 - 1, struct.unpack("<I", r.take(4))[0])
        if length_1 > 0x100000000 or not location or len(location.encode("utf-8")) > 0xFFFF:
            raise r.fail(f"batch {i}: byte_length or location out of range")
        metadata: list[MetadataItem] = []
        start = -1
        for _ in range(r.varint()):
            tag = r.varint()
            z = tag >> 2
            time += -(z + 1) // 2 if z & 1 else z // 2
            start += r.varint() if tag & 1 else 1
            if tag & 2:
                payload = r.take(r.varint())
            if not 0 <= start <= MAX_START_INDEX or not 0 <= time < _TIME_LIMIT:
                raise r.fail(f"batch {i}: a metadata item is out of range")
            metadata.append(MetadataItem(start, time, payload))
        ext = integrity + sequence_record(name.writer_id, name.first_batch + i)
        entries.append((location, metadata, ext))
    if r.pos != len(data):
        raise r.fail(f"{len(data) - r.pos} bytes after the last batch")
    return Intent(name.writer_id, name.first_batch, tuple(entries))


def _body(entry: NewEntry) -> bytes:
    """An entry of §2 without ``entry_len`` and ``sequence``, its integrity record's ``entry_crc32`` 0."""
    return encode_entry(0, entry[0], entry[1], entry[2] if len(entry) == 3 else b"", seal_integrity=False)[12:]


def encode_intent(writer_id: bytes, first_batch: int, entries: Sequence[NewEntry]) -> bytes:
    if len(writer_id) != 16 or not 1 <= len(entries) <= MAX_INTENT_BATCHES:
        raise ValueError(f"an intent holds 1 to {MAX_INTENT_BATCHES} batches of a 16-byte writer id")
    parts = [_HEAD.pack(INTENT_MAGIC, INTENT_VERSION, writer_id, first_batch, len(entries))]
    for e in entries:
        body = _body(e)
        parts += [struct.pack("<I", len(body)), body]
    data = b"".join(parts)
    return data + struct.pack("<I", zlib.crc32(data) & 0xFFFFFFFF)


def decode_intent(data: bytes, key: str, name: IntentName | None = None) -> Intent:
    """Decodes an intent exactly; with ``name``, its writer id, first batch and count must match it.

    Raises:
        CorruptManifestError: Anything that does not decode exactly (the committer skips and counts it).
    """
    if len(data) < _HEAD.size + 4:
        raise CorruptManifestError(key, f"intent: {len(data)} bytes is too short")
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if crc != zlib.crc32(data[:-4]) & 0xFFFFFFFF:
        raise CorruptManifestError(key, "intent: crc32 does not match")
    magic, version, wid, first, count = _HEAD.unpack_from(data, 0)
    if magic != INTENT_MAGIC or version != INTENT_VERSION:
        raise CorruptManifestError(key, f"intent: magic {magic!r} version {version} is not OSQI 1")
    if count < 1:
        raise CorruptManifestError(key, "intent: count 0")
    pos, end = _HEAD.size, len(data) - 4
    entries: list[NewEntry] = []
    for i in range(count):
        if end - pos < 4:
            raise CorruptManifestError(key, f"intent: batch {i} runs past the end")
        (n,) = struct.unpack_from("<I", data, pos)
        if n > end - pos - 4 or n > 0xFFFFFFFF - 8:
            raise CorruptManifestError(key, f"intent: batch {i} runs past the end")
        body = data[pos + 4 : pos + 4 + n]
        pos += 4 + n
        one = struct.pack("<IQ", n + 8, 0) + body + footer_bytes(1, 1, 0)
        e = decode_manifest(one, key).entries[0]
        ext = bytes(e.extension)
        if any(
            r.tag_type == INTEGRITY_TYPE and ext[r.body_at + 8 : r.body_at + 12] != b"\0\0\0\0" for r in walk(ext)[0]
        ):
            raise CorruptManifestError(key, f"intent: batch {i}: entry_crc32 is not 0")
        entries.append((e.location, list(e.metadata), ext))
    if pos != end:
        raise CorruptManifestError(key, f"intent: {end - pos} bytes after the last batch")
    intent = Intent(bytes(wid), int(first), tuple(entries))
    if name is not None and (name.writer_id, name.first_batch, name.count) != (wid, first, count):
        raise CorruptManifestError(key, "intent: its name disagrees with its contents")
    return intent
