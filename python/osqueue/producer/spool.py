"""A producer's local spool: the directory, its lock, the calls and batches it holds, the cap (JVM: ``Spool``).

docs/adr/0006, part 2 (docs/format.md §9)::

    <spool_dir>/.lock        POSIX record lock (fcntl), held while the producer lives
    <spool_dir>/owner.json   {"version":1,"pid":…,"host":…,"startedAtMs":…}, for the error message
    <spool_dir>/writer.id    16 random bytes, hex; written once, never changed
    <spool_dir>/<20-digit first record no>.log   the log (:mod:`osqueue.producer.spool_log`)

A call (one ``produce()``) is *settled* once its batch is LANDED or it was DROPPED; a log file whose
calls and batches are all settled is deleted (truncation). The cap counts the bytes of the unsettled
calls' records (``buffer.spool_bytes``): what a landing or a drop frees.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import random
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from osqueue import metrics as m
from osqueue.clock import Clock
from osqueue.errors import InvalidConfigError, QueueFullError
from osqueue.producer.spool_log import (
    DEFAULT_ROTATE_BYTES,
    OVERHEAD,
    AttemptRecord,
    BatchRecord,
    DroppedRecord,
    EntriesRecord,
    LandedRecord,
    SpoolLog,
    encode_entries,
)

DEFAULT_SPOOL_MAX_BYTES = 1 << 30
DEFAULT_SPOOL_FULL_TIMEOUT = 30.0
FULL_POLICIES = ("backpressure", "drop_oldest")

_held_dirs: set[str] = set()  # fcntl locks are per process: this excludes a second spool in this one
_held_lock = threading.Lock()


@dataclass(eq=False)
class SpooledCall:
    record: EntriesRecord
    size: int
    path: str
    batch_no: int | None = None  # -1: being batched (claimed, not yet named)


@dataclass(eq=False)
class SpooledBatch:
    record: BatchRecord
    paths: set[str] = field(default_factory=set)
    attempts: list[AttemptRecord] = field(default_factory=list)
    landed: bool = False


def _atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Spool:
    """One producer's spool directory, locked for the life of the object.

    Args:
        directory: The spool directory (created if absent).
        max_bytes: ``spool_max_bytes``: the cap on the unsettled calls' bytes.
        full_policy: ``"backpressure"`` (block up to ``full_timeout``, then ``QueueFullError``) or
            ``"drop_oldest"`` (drop the oldest calls in no batch; their handles fail).
        full_timeout: ``spool_full_timeout`` in seconds.
        on_drop: Told the call numbers dropped by ``drop_oldest``.

    Raises:
        InvalidConfigError: Another producer holds the directory (naming it), or an option is bad.
        CorruptSpoolError: A log file is damaged in its middle.
    """

    def __init__(
        self,
        directory: str,
        *,
        max_bytes: int = DEFAULT_SPOOL_MAX_BYTES,
        full_policy: str = "backpressure",
        full_timeout: float = DEFAULT_SPOOL_FULL_TIMEOUT,
        clock: Clock,
        rng: random.Random | None = None,
        metrics: m.MetricsRegistry | None = None,
        on_drop: Callable[[list[int]], None] | None = None,
        rotate_bytes: int = DEFAULT_ROTATE_BYTES,
    ) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise InvalidConfigError("spool_max_bytes", max_bytes, "must be a positive number of bytes")
        if full_policy not in FULL_POLICIES:
            raise InvalidConfigError("spool_full_policy", full_policy, "use 'backpressure' or 'drop_oldest'")
        if isinstance(full_timeout, bool) or not isinstance(full_timeout, (int, float)) or full_timeout < 0:
            raise InvalidConfigError("spool_full_timeout", full_timeout, "must be a number of seconds >= 0")
        self.directory = os.path.abspath(directory)
        self._max_bytes = max_bytes
        self._policy = full_policy
        self._timeout = float(full_timeout)
        self._clock = clock
        self._metrics = metrics or m.REGISTRY
        self._bytes_gauge = self._metrics.gauge(m.SPOOL_BYTES)  # set on every call: looked up once
        self._age_gauge = self._metrics.gauge(m.SPOOL_OLDEST_ENTRY_AGE_SECONDS)
        self._on_drop = on_drop
        os.makedirs(self.directory, exist_ok=True)
        self._lock_fd = self._take_lock(clock)
        try:
            self.writer_id = self._writer_id(rng or random.Random())
            self._log = SpoolLog(self.directory, rotate_bytes)
            self._cond = threading.Condition()
            self.calls: dict[int, SpooledCall] = {}  # unsettled calls, in call order
            self.batches: dict[int, SpooledBatch] = {}  # unsettled batches, in batch order
            self.next_call = 0
            self.next_batch = 0
            self._live_bytes = 0
            self._replay()
        except BaseException:
            self._release_lock()
            raise

    # -- directory ----------------------------------------------------------------------------

    def _take_lock(self, clock: Clock) -> int:
        with _held_lock:
            held_here = self.directory in _held_dirs
            if not held_here:
                _held_dirs.add(self.directory)
        fd = -1
        try:
            if held_here:
                raise BlockingIOError(errno.EAGAIN, "held by this process")
            fd = os.open(os.path.join(self.directory, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if fd >= 0:
                os.close(fd)
            if not held_here:
                with _held_lock:
                    _held_dirs.discard(self.directory)
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise InvalidConfigError("spool_dir", self.directory, f"cannot lock it: {e}") from e
            raise InvalidConfigError("spool_dir", self.directory, f"owned by {self._owner()}") from None
        owner = {"version": 1, "pid": os.getpid(), "host": socket.gethostname(), "startedAtMs": clock.now_ms()}
        _atomic_write(os.path.join(self.directory, "owner.json"), json.dumps(owner).encode())
        return fd

    def _owner(self) -> str:
        try:
            with open(os.path.join(self.directory, "owner.json"), "rb") as f:
                o = json.loads(f.read())
            return f"pid {o['pid']} on {o['host']} since {o['startedAtMs']} (epoch ms); another producer uses it"
        except (OSError, ValueError, KeyError, TypeError):
            return "another producer (owner.json unreadable)"

    def _writer_id(self, rng: random.Random) -> str:
        path = os.path.join(self.directory, "writer.id")
        try:
            with open(path, "rb") as f:
                text = f.read().decode().strip()
            bytes.fromhex(text)
            if len(text) == 32:
                return text
        except FileNotFoundError:
            pass
        except (ValueError, UnicodeDecodeError) as e:
            raise InvalidConfigError("spool_dir", self.directory, f"writer.id is not 16 bytes of hex: {e}") from e
        text = rng.getrandbits(128).to_bytes(16, "big").hex()
        _atomic_write(path, text.encode())
        return text

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # drops the fcntl lock
            self._lock_fd = -1
            with _held_lock:
                _held_dirs.discard(self.directory)

    # -- replay -------------------------------------------------------------------------------

    def _replay(self) -> None:
        landed: set[int] = set()
        dropped: list[tuple[int, int]] = []
        for path, r in self._log.read_all():
            if isinstance(r, EntriesRecord):
                self.calls[r.call_no] = SpooledCall(r, _size(r), path)
                self.next_call = max(self.next_call, r.call_no + 1)
            elif isinstance(r, BatchRecord):
                b = self.batches.get(r.batch_no)
                if b is None:
                    b = self.batches[r.batch_no] = SpooledBatch(r)
                else:  # re-named on replay (other bytes): the new name is the one to PUT
                    b.record = r
                b.paths.add(path)
                self.next_batch = max(self.next_batch, r.batch_no + 1)
            elif isinstance(r, AttemptRecord):
                for n in r.batch_nos:
                    if n in self.batches:
                        self.batches[n].attempts.append(r)
                        self.batches[n].paths.add(path)
            elif isinstance(r, LandedRecord):
                landed.update(r.batch_nos)
            else:
                dropped.append((r.first_call, r.last_call))
        for first, last in dropped:
            for c in range(first, last + 1):
                self.calls.pop(c, None)
        for n, b in list(self.batches.items()):
            for c in range(b.record.first_call, b.record.last_call + 1):
                call = self.calls.get(c)
                if call is not None:
                    call.batch_no = n
            if n in landed:
                self._settle(n)
        self._live_bytes = sum(c.size for c in self.calls.values())
        self._gauges()
        self._truncate()

    def pending_batches(self) -> list[SpooledBatch]:
        """Batches named but not known to have landed, in batch order (replay's work)."""
        with self._cond:
            return [self.batches[n] for n in sorted(self.batches)]

    def unbatched_calls(self) -> list[EntriesRecord]:
        """Spooled calls in no batch, in call order (replay batches them again)."""
        with self._cond:
            return [c.record for n, c in sorted(self.calls.items()) if c.batch_no is None]

    def attempts_of(self, batch_no: int) -> list[AttemptRecord]:
        with self._cond:
            b = self.batches.get(batch_no)
            return [] if b is None else list(b.attempts)

    def batch_calls(self, batch_no: int) -> list[EntriesRecord]:
        with self._cond:
            b = self.batches[batch_no].record
            return [self.calls[c].record for c in range(b.first_call, b.last_call + 1) if c in self.calls]

    # -- the producer's steps -----------------------------------------------------------------

    def append_entries(self, entries: Sequence[bytes], metadata: bytes, time_ms: int) -> tuple[int, int]:
        """Step 1: spools one call (cap first); returns (call_no, ticket): ``sync(ticket)`` makes it durable.

        Raises:
            QueueFullError: ``backpressure`` and the spool stayed full for ``spool_full_timeout``.
        """
        entries = tuple(entries)
        with self._cond:
            call_no = self.next_call
            data = encode_entries(call_no, time_ms, metadata, entries)
            size = len(data) - 4  # _size(record), the cap's measure, without a pass over the entries
            self._make_room(size)
            self.next_call += 1
            ticket, path = self._log.append_encoded(data, 1)
            self.calls[call_no] = SpooledCall(EntriesRecord(call_no, time_ms, metadata, entries), size, path)
            self._live_bytes += size
            self._gauges()
            return call_no, ticket

    def sync(self, ticket: int) -> None:
        self._log.sync(ticket)

    def _make_room(self, size: int) -> None:
        if self._live_bytes == 0 or self._live_bytes + size <= self._max_bytes:
            return
        if self._policy == "drop_oldest":
            droppable = [c for c in self.calls.values() if c.batch_no is None]
            run: list[int] = []
            for c in droppable:
                if self._live_bytes + size <= self._max_bytes or (run and c.record.call_no != run[-1] + 1):
                    break
                run.append(c.record.call_no)
                self._live_bytes -= c.size
            if run:
                self._log.write([DroppedRecord(run[0], run[-1])])  # fsync'd before the space is reused
                entries = sum(len(self.calls.pop(n).record.entries) for n in run)
                self._metrics.counter(m.SPOOL_DROPPED_ENTRIES).inc(entries)
                self._gauges()
                if self._on_drop is not None:
                    self._on_drop(run)
                self._truncate()
        if self._live_bytes == 0 or self._live_bytes + size <= self._max_bytes:
            return
        self._metrics.counter(m.SPOOL_FULL_WAITS).inc()
        deadline = self._clock.monotonic() + self._timeout
        while self._live_bytes > 0 and self._live_bytes + size > self._max_bytes:
            left = deadline - self._clock.monotonic()
            if left <= 0:
                raise QueueFullError(
                    f"producer spool '{self.directory}' is full: {self._live_bytes} of spool_max_bytes "
                    f"{self._max_bytes} bytes wait for the store, and none were freed within spool_full_timeout "
                    f"{self._timeout} s (spool_full_policy={self._policy})"
                )
            self._cond.wait(left)

    def claim_batch(self, first_call: int, last_call: int) -> list[int]:
        """Marks the calls as about to be batched (so ``drop_oldest`` leaves them); the dropped ones of the range."""
        with self._cond:
            gone = [c for c in range(first_call, last_call + 1) if c not in self.calls]
            for c in range(first_call, last_call + 1):
                if c in self.calls:
                    self.calls[c].batch_no = -1
            return gone

    def name_batch(self, first_call: int, last_call: int, byte_length: int, crc: int, location: str) -> int:
        """Step 2: names a batch of calls before its PUT; its batch_no.

        The record is not fsync'd before the PUT: the ATTEMPT record's fsync, before any manifest CAS that
        could carry the name, makes it durable (docs/adr/0006 part 2)."""
        with self._cond:
            record = BatchRecord(self.next_batch, first_call, last_call, byte_length, crc, location)
            self.next_batch += 1
            _, path = self._log.append([record])
            self._named(record, path)
        return record.batch_no

    def rename_batch(self, record: BatchRecord) -> int:
        path = self._log.write([record])
        with self._cond:
            self._named(record, path)
        return record.batch_no

    def _named(self, record: BatchRecord, path: str) -> None:
        b = self.batches.setdefault(record.batch_no, SpooledBatch(record))
        b.record = record
        b.paths.add(path)
        for c in range(record.first_call, record.last_call + 1):
            if c in self.calls:
                self.calls[c].batch_no = record.batch_no

    def record_attempt(self, base: int, batch_nos: Sequence[int], locations: Sequence[str]) -> None:
        """Step 4: before a manifest CAS that carries these batches (fsync'd)."""
        record = AttemptRecord(base, tuple(batch_nos), tuple(locations))
        path = self._log.write([record])
        with self._cond:
            for n in batch_nos:
                if n in self.batches:
                    self.batches[n].attempts.append(record)
                    self.batches[n].paths.add(path)

    def append_landed(self, first_sequence: int, batch_nos: Sequence[int]) -> int:
        """Step 6: writes the LANDED record of batches in the manifest, not fsync'd; its ticket (``sync`` it,
        then ``settle_landed``)."""
        ticket, _ = self._log.append([LandedRecord(first_sequence, tuple(batch_nos))])
        return ticket

    def settle_landed(self, batch_nos: Sequence[int]) -> None:
        """Once their LANDED record is on disk: the batches are settled, then truncation (step 7). Never
        before: truncation must not unlink a file whose LANDED record could still be lost."""
        with self._cond:
            for n in batch_nos:
                self._settle(n)
            self._gauges()
            self._truncate()
            self._cond.notify_all()

    def _settle(self, batch_no: int) -> None:
        b = self.batches.pop(batch_no, None)
        if b is None:
            return
        for c in range(b.record.first_call, b.record.last_call + 1):
            call = self.calls.pop(c, None)
            if call is not None:
                self._live_bytes -= call.size

    def _truncate(self) -> None:
        """Deletes the oldest log files that hold nothing unsettled; rotates first when all is settled."""
        if not self.calls and not self.batches:
            self._log.rotate()
        needed = {c.path for c in self.calls.values()}
        for b in self.batches.values():
            needed |= b.paths
        doomed: list[str] = []
        for _, path in self._log.files[:-1]:
            if path in needed:
                break
            doomed.append(path)
        self._log.delete(doomed)

    def _gauges(self) -> None:
        """``buffer.spool_bytes`` and ``buffer.spool_oldest_entry_age_seconds`` (0 when nothing waits)."""
        self._bytes_gauge.set(self._live_bytes)
        first = next(iter(self.calls.values()), None)
        age = 0.0 if first is None else (self._clock.now_ms() - first.record.ingestion_time_ms) / 1000
        self._age_gauge.set(max(0.0, age))

    def log_files(self) -> list[str]:
        with self._cond:
            return [p for _, p in self._log.files]

    def live_bytes(self) -> int:
        with self._cond:
            return self._live_bytes

    def close(self) -> None:
        self._log.close()
        self._release_lock()


def _size(record: EntriesRecord) -> int:
    return OVERHEAD + 20 + len(record.metadata) + sum(4 + len(e) for e in record.entries)
