"""Intent objects of cooperative commit (docs/format.md §2.4, docs/adr/0007 part 1): a producer
announces batches it uploaded, so that whichever producer's CAS wins appends them too.

``<manifestPath>.intents/<ULID>-<writer_id hex>-<first_batch>-<count>.intent``; integers little-endian
as the manifest's. JVM: `osqueue.format.IntentCodec`.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from osqueue.errors import CorruptManifestError
from osqueue.format.batch_integrity import INTEGRITY_TYPE, walk
from osqueue.format.manifest import NewEntry
from osqueue.format.manifest_codec import decode_manifest, encode_entry, footer_bytes

INTENT_MAGIC = b"OSQI"
INTENT_VERSION = 1
INTENTS_SUFFIX = ".intents"
MAX_INTENT_BATCHES = 0xFFFF
_HEAD = struct.Struct("<4sB16sQH")
_NAME = re.compile(r"([0-9A-HJKMNP-TV-Z]{26})-([0-9a-f]{32})-([0-9]{1,20})-([0-9]{1,5})\.intent")


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
    if count < 1 or count > MAX_INTENT_BATCHES:
        return None
    return IntentName(m.group(1), bytes.fromhex(m.group(2)), first, count)


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
