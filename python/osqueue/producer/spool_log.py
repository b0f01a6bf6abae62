"""The producer spool's log: records, their codec, files, group fsync, torn tails (JVM: ``SpoolLog``).

Bytes (docs/adr/0006, part 2; docs/format.md §9)::

    record:  magic "OSQS" | body_len u32 | type u8 | body | crc32 u32 (CRC-32 of every byte before it)

Files are ``<dir>/<20-digit first record no>.log``, rotated at ``rotate_bytes``. At open, every file
is read to its end; at the first record that does not check, the rest of the file is scanned for a
valid record: none is a torn tail (written, never fsync'd: its ``produce()`` never returned) or the
zero-filled tail of a preallocated file, cut off; one is damage in the middle,
:class:`~osqueue.errors.CorruptSpoolError`.

Preallocation (issue 28): records that would pass the zeros already written are written together
with a chunk of zeros after them (the file's size so far, within 64 KiB and 1 MiB), so most
``fdatasync`` calls find the file's size and blocks unchanged and write only data, not the
filesystem's journal. ``close()`` cuts the zeros off.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from osqueue.errors import CorruptSpoolError
from osqueue.store.local_file_system_store import fsync_directory

MAGIC = b"OSQS"
_HEADER = struct.Struct(">4sIB")  # magic, body_len, type
_CRC = struct.Struct(">I")
OVERHEAD = _HEADER.size + _CRC.size
DEFAULT_ROTATE_BYTES = 64 * 1024 * 1024
PREALLOC_MIN_BYTES = 64 * 1024
PREALLOC_MAX_BYTES = 1024 * 1024
"""Zeros written ahead of the log's end: the file's size so far, within these bounds."""

ENTRIES = 1
BATCH = 2
ATTEMPT = 3
LANDED = 4
DROPPED = 5


@dataclass(frozen=True)
class EntriesRecord:
    """One ``produce()`` call."""

    call_no: int
    ingestion_time_ms: int
    metadata: bytes
    entries: tuple[bytes, ...]

    def body(self) -> bytes:
        parts = [struct.pack(">QqI", self.call_no, self.ingestion_time_ms, len(self.metadata)), self.metadata]
        parts.append(struct.pack(">I", len(self.entries)))
        for e in self.entries:
            parts += [struct.pack(">I", len(e)), e]
        return b"".join(parts)


@dataclass(frozen=True)
class BatchRecord:
    """A batch's name, written before its PUT."""

    batch_no: int
    first_call: int
    last_call: int
    byte_length: int
    batch_crc32: int
    location: str

    def body(self) -> bytes:
        loc = self.location.encode()
        return (
            struct.pack(
                ">QQQIIH", self.batch_no, self.first_call, self.last_call, self.byte_length, self.batch_crc32, len(loc)
            )
            + loc
        )


@dataclass(frozen=True)
class AttemptRecord:
    """A manifest CAS about to be sent: the sequence its first location would get, and its batches."""

    base: int
    batch_nos: tuple[int, ...]
    locations: tuple[str, ...]

    def body(self) -> bytes:
        parts = [struct.pack(">QH", self.base, len(self.batch_nos))]
        parts += [struct.pack(">Q", n) for n in self.batch_nos]
        for loc in self.locations:
            raw = loc.encode()
            parts += [struct.pack(">H", len(raw)), raw]
        return b"".join(parts)


@dataclass(frozen=True)
class LandedRecord:
    """A CAS known to have landed: its batches are in the manifest from ``first_sequence`` on."""

    first_sequence: int
    batch_nos: tuple[int, ...]

    def body(self) -> bytes:
        return struct.pack(">QH", self.first_sequence, len(self.batch_nos)) + b"".join(
            struct.pack(">Q", n) for n in self.batch_nos
        )


@dataclass(frozen=True)
class DroppedRecord:
    """Calls dropped by ``drop_oldest`` (none of them in a batch)."""

    first_call: int
    last_call: int

    def body(self) -> bytes:
        return struct.pack(">QQ", self.first_call, self.last_call)


SpoolRecord = EntriesRecord | BatchRecord | AttemptRecord | LandedRecord | DroppedRecord
_TYPES: dict[type, int] = {EntriesRecord: ENTRIES, BatchRecord: BATCH, AttemptRecord: ATTEMPT}
_TYPES.update({LandedRecord: LANDED, DroppedRecord: DROPPED})


_ENTRIES_HEAD = struct.Struct(">4sIBQqI")  # magic, body_len, type, call_no, ingestion_time_ms, metadata_len
_U32 = struct.Struct(">I")


def encode_entries(call_no: int, time_ms: int, metadata: bytes, entries: Sequence[bytes]) -> bytes:
    """An ENTRIES record's bytes, CRC included: the bytes of ``encode_record(EntriesRecord(...))``.

    The producer's caller pays for this on every spooled ``produce()`` (issue 28): the header packed
    once with the body's length computed up front, one join and one CRC over it, instead of joining
    the body, then the header and body, then the CRC into new bytes one after the other.
    """
    body_len = 24 + len(metadata) + 4 * len(entries) + sum(map(len, entries))
    pack = _U32.pack
    parts = [_ENTRIES_HEAD.pack(MAGIC, body_len, ENTRIES, call_no, time_ms, len(metadata)), metadata]
    parts.append(pack(len(entries)))
    for e in entries:
        parts += (pack(len(e)), e)
    head = b"".join(parts)
    return head + pack(zlib.crc32(head))


def encode_record(record: SpoolRecord) -> bytes:
    """The record's bytes, CRC included."""
    if isinstance(record, EntriesRecord):
        return encode_entries(record.call_no, record.ingestion_time_ms, record.metadata, record.entries)
    body = record.body()
    head = _HEADER.pack(MAGIC, len(body), _TYPES[type(record)]) + body
    return head + _CRC.pack(zlib.crc32(head))


class _Reader:
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.at = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        s = struct.Struct(">" + fmt)
        values = s.unpack_from(self.body, self.at)
        self.at += s.size
        return values

    def raw(self, n: int) -> bytes:
        if self.at + n > len(self.body):
            raise struct.error("past the body")
        out = self.body[self.at : self.at + n]
        self.at += n
        return out


def _decode_body(kind: int, body: bytes) -> SpoolRecord:
    r = _Reader(body)
    record: SpoolRecord
    if kind == ENTRIES:
        call_no, time_ms, meta_len = r.take("QqI")
        metadata = r.raw(meta_len)
        (count,) = r.take("I")
        record = EntriesRecord(call_no, time_ms, metadata, tuple(r.raw(r.take("I")[0]) for _ in range(count)))
    elif kind == BATCH:
        batch_no, first, last, length, crc, loc_len = r.take("QQQIIH")
        record = BatchRecord(batch_no, first, last, length, crc, r.raw(loc_len).decode())
    elif kind == ATTEMPT:
        base, count = r.take("QH")
        nos = tuple(r.take("Q")[0] for _ in range(count))
        record = AttemptRecord(base, nos, tuple(r.raw(r.take("H")[0]).decode() for _ in range(count)))
    elif kind == LANDED:
        first_sequence, count = r.take("QH")
        record = LandedRecord(first_sequence, tuple(r.take("Q")[0] for _ in range(count)))
    elif kind == DROPPED:
        record = DroppedRecord(*r.take("QQ"))
    else:
        raise ValueError(f"unknown record type {kind}")
    if r.at != len(body):
        raise ValueError(f"{len(body) - r.at} bytes after a type-{kind} record's fields")
    return record


def _record_at(data: bytes, at: int) -> tuple[SpoolRecord, int] | None:
    """The record at ``at`` and its end, or None if the bytes there are not a whole, valid record."""
    if at + OVERHEAD > len(data):
        return None
    magic, body_len, kind = _HEADER.unpack_from(data, at)
    end = at + _HEADER.size + body_len + _CRC.size
    if magic != MAGIC or end > len(data):
        return None
    if zlib.crc32(data[at : end - _CRC.size]) != _CRC.unpack_from(data, end - _CRC.size)[0]:
        return None
    try:
        return _decode_body(kind, data[at + _HEADER.size : end - _CRC.size]), end
    except (struct.error, ValueError, UnicodeDecodeError):
        return None


def decode_records(data: bytes, name: str) -> tuple[list[SpoolRecord], int]:
    """The records of one log file's bytes and where the valid ones end (a torn tail starts there).

    Raises:
        CorruptSpoolError: A record that does not check is followed by a valid one.
    """
    records: list[SpoolRecord] = []
    at = 0
    while at < len(data):
        found = _record_at(data, at)
        if found is None:
            later = data.find(MAGIC, at + 1)
            while later != -1:
                if _record_at(data, later) is not None:
                    raise CorruptSpoolError(name, at, f"a damaged record is followed by a valid one at {later}")
                later = data.find(MAGIC, later + 1)
            return records, at
        records.append(found[0])
        at = found[1]
    return records, at


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def log_file_name(first_record_no: int) -> str:
    return f"{first_record_no:020d}.log"


class SpoolLog:
    """The log files of one spool directory: read once at open, then appended to.

    ``append`` writes a record whole and returns its ticket; ``sync(ticket)`` returns once that
    record is fsync'd. One fsync covers every record written while the previous one ran (group fsync).
    """

    def __init__(self, directory: str, rotate_bytes: int = DEFAULT_ROTATE_BYTES) -> None:
        self._dir = directory
        self._rotate_bytes = rotate_bytes
        self._cond = threading.Condition()
        self._written = 0  # tickets handed out
        self._synced = 0
        self._syncing = False
        self._fd: int | None = None
        self._file_size = 0  # where the next record goes (the records' end)
        self._zeroed = 0  # the file's size: zeros from _file_size to here
        self.files: list[tuple[int, str]] = []  # (first record no, path), oldest first
        self.next_record_no = 0

    def read_all(self) -> Iterator[tuple[str, SpoolRecord]]:
        """Every record of every file, oldest first, with its file's path; cuts a torn tail off its file."""
        names = sorted(n for n in os.listdir(self._dir) if n.endswith(".log") and n[:-4].isdigit())
        for n in names:
            path = os.path.join(self._dir, n)
            with open(path, "rb") as f:
                data = f.read()
            records, end = decode_records(data, path)
            if end < len(data):
                with open(path, "r+b") as f:
                    f.truncate(end)
                    os.fsync(f.fileno())
            self.files.append((int(n[:-4]), path))
            self.next_record_no = int(n[:-4]) + len(records)
            for r in records:
                yield path, r

    def current_path(self) -> str:
        """The file the next record goes to (opened on first use)."""
        with self._cond:
            self._open_current()
            return self.files[-1][1]

    def _open_current(self) -> None:
        if self._fd is None:
            if self.files:  # read_all cut it at its records' end
                self._fd = os.open(self.files[-1][1], os.O_WRONLY)
                self._file_size = self._zeroed = os.fstat(self._fd).st_size
            else:
                self._start_file()

    def _start_file(self) -> None:
        path = os.path.join(self._dir, log_file_name(self.next_record_no))
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._file_size = self._zeroed = 0
        self.files.append((self.next_record_no, path))
        fsync_directory(self._dir)

    def append(self, records: Sequence[SpoolRecord]) -> tuple[int, str]:
        """Writes the records (one write) and returns (ticket, path of their file)."""
        return self.append_encoded(b"".join(encode_record(r) for r in records), len(records))

    def append_encoded(self, data: bytes, count: int) -> tuple[int, str]:
        """``append`` for ``count`` records already encoded into ``data`` (whole records, in order)."""
        with self._cond:
            self._open_current()
            if self._file_size > 0 and self._file_size + len(data) > self._rotate_bytes:
                self._rotate()
            assert self._fd is not None
            end = self._file_size + len(data)
            if end > self._zeroed:  # the records and a chunk of zeros after them, in one write
                self._zeroed = end + min(max(self._file_size, PREALLOC_MIN_BYTES), PREALLOC_MAX_BYTES)
                data = data + bytes(self._zeroed - end)
            _write_all(self._fd, data, self._file_size)
            self._file_size = end
            self.next_record_no += count
            self._written += 1
            return self._written, self.files[-1][1]

    def _rotate(self) -> None:
        while self._syncing:  # never close the file under an fdatasync in flight
            self._cond.wait()
        assert self._fd is not None
        os.fdatasync(self._fd)  # its zero tail stays: a clean end, cut if the file is ever read
        os.close(self._fd)
        self._synced = self._written
        self._start_file()

    def rotate(self) -> None:
        """Starts a new file (so the settled ones can be deleted)."""
        with self._cond:
            if self._fd is not None and self._file_size > 0:
                self._rotate()

    def sync(self, ticket: int) -> None:
        """Returns once the record with this ticket is on disk (one fsync for all written meanwhile)."""
        with self._cond:
            while self._synced < ticket:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing = True
                upto, fd = self._written, self._fd
                self._cond.release()
                try:
                    if fd is not None:
                        os.fdatasync(fd)
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    self._synced = max(self._synced, upto)
                    self._cond.notify_all()

    def write(self, records: Sequence[SpoolRecord]) -> str:
        """Appends and fsyncs; the path of the records' file."""
        ticket, path = self.append(records)
        self.sync(ticket)
        return path

    def delete(self, paths: Sequence[str]) -> None:
        """Unlinks settled files (never the current one) and fsyncs the directory."""
        with self._cond:
            current = self.files[-1][1] if self._fd is not None and self.files else None
            doomed = [p for p in paths if p != current]
            for p in doomed:
                os.unlink(p)
            self.files = [f for f in self.files if f[1] not in doomed]
        if doomed:
            fsync_directory(self._dir)

    def close(self) -> None:
        with self._cond:
            if self._fd is not None:
                if self._zeroed > self._file_size:
                    os.ftruncate(self._fd, self._file_size)
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None
