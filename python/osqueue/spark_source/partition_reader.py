"""The executor side of the Python data source: partitions of consecutive entries and their read
(JVM: ``OsqueuePlanner.runs`` and ``OsqueuePartitionReader``).

A partition is a run of consecutive entries cut by the JVM planner's rule (at most
:data:`SLICE_ENTRIES` entries and :data:`SLICE_BYTES` batch-file bytes) with a larger byte budget: a
Python task costs far more than a JVM one before its first row (docs/performance.md §2.3, session 14).
The task fetches a few batch files ahead and yields one Arrow record batch per batch file, built
column-wise.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from osqueue.errors import BatchNotFoundError, CorruptBatchError
from osqueue.format.batch_integrity import EntryIntegrity, verify, verify_entry
from osqueue.format.manifest import ManifestEntry, MetadataItem
from osqueue.spark_source.arrow_records import record_column
from osqueue.spark_source.options import OsqueueSparkError, QueueLocation
from osqueue.store.local_file_system_store import LocalFileSystemStore
from osqueue.store.object_store import ObjectStore
from osqueue.store.object_stores import open_store

_log = logging.getLogger(__name__)

SLICE_ENTRIES = 128
"""Entries per partition at most (JVM: ``OsqueuePlanner.SliceEntries``)."""
SLICE_BYTES = 128 << 20
"""Batch-file bytes per partition at most, by the entries' integrity records (an entry without one
counts 0; a larger batch file is a partition of its own). Four times the JVM planner's
(``OsqueuePlanner.SliceBytes``, 32 MiB) and Spark's file source's default
(``spark.sql.files.maxPartitionBytes``): each Python task pays pyspark's per-task set-up in its worker
(on pyspark 4.0 and 4.1 ``importlib.invalidate_caches()`` re-reads pyspark.zip's directory once per
package imported from it, 50-130 ms of CPU per task; on 4.2+ still ~30 ms of Python and JVM CPU),
which at 32 MiB cost as much as reading the partition. A task's memory does not grow with it (the read-ahead below
bounds it)."""

READ_AHEAD_BATCHES = 8
"""Batch files fetched at once by a task (JVM: ``ReadAheadLimits.Default``)."""
READ_AHEAD_BYTES = 64 << 20
"""Bytes of batch files in flight at most, by their integrity records; the first always goes (JVM: the
same limit, counted by the largest batch file fetched so far)."""

ARROW_SCHEMA = pa.schema(
    [
        ("value", pa.binary()),
        ("sequence", pa.int64()),
        ("index", pa.int32()),
        ("location", pa.string()),
        ("ingestionTime", pa.timestamp("us", tz="UTC")),
        ("metadata", pa.binary()),
    ]
)

_stores: dict[tuple[str, tuple[tuple[str, str], ...]], ObjectStore] = {}


def store_of(location: QueueLocation) -> ObjectStore:
    """The store of ``location``, opened once per Python worker process."""
    key = (location.uri, tuple(sorted(location.store_options.items())))
    store = _stores.get(key)
    if store is None:
        store = open_store(location.uri, dict(location.store_options) or None)
        _stores[key] = store
    return store


def data_loss(location: QueueLocation, reason: str) -> OsqueueSparkError:
    return OsqueueSparkError(
        "OSQUEUE_DATA_LOSS",
        f"{reason} (queue '{location.identity}'). If you want the query to continue anyway, set the option "
        "'failOnDataLoss' to false (the entries are then skipped and the event is logged).",
    )


@dataclass(frozen=True)
class EntryRead:
    """One queue entry (a batch file) of a partition."""

    sequence: int
    key: str
    metadata: tuple[MetadataItem, ...]
    integrity: EntryIntegrity | None  # its producer's length and CRC (None: an RFC writer's entry, unverified)


@dataclass(frozen=True)
class BatchPartition(InputPartition):
    """Consecutive queue entries to read on an executor, in order."""

    location: QueueLocation
    entries: tuple[EntryRead, ...]
    fail_on_data_loss: bool


A = TypeVar("A")


def runs(entries: Sequence[A], size: Callable[[A], int]) -> Iterator[Sequence[A]]:
    """``entries`` in order, cut into runs of at most :data:`SLICE_ENTRIES` entries and :data:`SLICE_BYTES`
    bytes (``size`` of each); an entry larger than :data:`SLICE_BYTES` is a run of its own."""
    start = 0
    while start < len(entries):
        at, total = start + 1, size(entries[start])
        while at < len(entries) and at - start < SLICE_ENTRIES and total + size(entries[at]) <= SLICE_BYTES:
            total += size(entries[at])
            at += 1
        yield entries[start:at]
        start = at


def partitions_of(
    location: QueueLocation, entries: Sequence[ManifestEntry], fail_on_data_loss: bool
) -> list[BatchPartition]:
    """Runs of consecutive entries; each entry's own CRC is checked here, on the driver (CorruptManifest)."""
    reads = [
        EntryRead(e.sequence, e.location, tuple(e.metadata), verify_entry(e, location.manifest_path)) for e in entries
    ]
    return [
        BatchPartition(location, tuple(run), fail_on_data_loss)
        for run in runs(reads, lambda r: 0 if r.integrity is None else r.integrity.byte_length)
    ]


def read_partition(partition: BatchPartition) -> Iterator[pa.RecordBatch]:
    """The entries' records, one Arrow record batch per entry (none for an entry whose file is gone or
    corrupt when data loss is allowed), in order. The batch files are fetched ahead of the one being
    decoded: at most :data:`READ_AHEAD_BATCHES` GETs and :data:`READ_AHEAD_BYTES` (by the integrity
    records) in flight (JVM: ``BatchReadAhead``); an error is raised at its entry's turn."""
    entries = partition.entries
    if len(entries) == 1:
        data = _fetch(partition, entries[0])
        if data is not None:
            yield _record_batch(entries[0], data)
        return
    with ThreadPoolExecutor(READ_AHEAD_BATCHES, thread_name_prefix="osqueue-batch-read-ahead") as pool:
        in_flight: deque[tuple[EntryRead, Future[bytes | None]]] = deque()
        at, held = 0, 0
        try:
            while in_flight or at < len(entries):
                while at < len(entries) and len(in_flight) < READ_AHEAD_BATCHES:
                    size = _size(entries[at])
                    if in_flight and held + size > READ_AHEAD_BYTES:
                        break
                    in_flight.append((entries[at], pool.submit(_fetch, partition, entries[at])))
                    held, at = held + size, at + 1
                entry, fetched = in_flight.popleft()
                held -= _size(entry)
                data = fetched.result()
                if data is not None:
                    yield _record_batch(entry, data)
        finally:
            for _, pending in in_flight:
                pending.cancel()


def _size(entry: EntryRead) -> int:
    return 0 if entry.integrity is None else entry.integrity.byte_length


def _fetch(partition: BatchPartition, entry: EntryRead) -> bytes | None:
    """The entry's batch file, checked against its integrity record (None: skipped, data loss allowed)."""
    location = partition.location
    store = store_of(location)
    data = _get_bytes(store, entry.key)
    if data is None:
        error = BatchNotFoundError(entry.key, entry.sequence)
        if partition.fail_on_data_loss:
            raise data_loss(location, f"the batch file of entry {entry.sequence} is gone ({error})")
        _log.warning("skipping entry %d of '%s': %s", entry.sequence, location.identity, error)
        return None
    if entry.integrity is None:
        return data

    def reread() -> bytes:
        again = _get_bytes(store, entry.key)
        return b"" if again is None else again

    try:
        return verify(entry.integrity, data, entry.key, reread)
    except CorruptBatchError as e:
        if partition.fail_on_data_loss:
            raise  # as the JVM source: the core condition, naming the object
        _log.warning("skipping entry %d of '%s': %s", entry.sequence, location.identity, e)
        return None


def _get_bytes(store: ObjectStore, key: str) -> bytes | None:
    """A batch file's bytes without its version: the local store's read skips the content hash it
    would compute for the version (JVM: ``ObjectStore.getBytes``)."""
    if isinstance(store, LocalFileSystemStore):
        return store.get_bytes(key)
    obj = store.get(key)
    return None if obj is None else obj.data


def _record_batch(entry: EntryRead, data: bytes) -> pa.RecordBatch:
    values = record_column(data, entry.key)
    n = len(values)
    times, payloads = _metadata_columns(entry.metadata, n)
    return pa.RecordBatch.from_arrays(
        [
            values,
            pa.repeat(pa.scalar(entry.sequence, pa.int64()), n),
            pa.array(np.arange(n, dtype=np.int32)),
            pa.repeat(pa.scalar(entry.key, pa.string()), n),
            times,
            payloads,
        ],
        schema=ARROW_SCHEMA,
    )


def _metadata_columns(metadata: Sequence[MetadataItem], n: int) -> tuple[pa.Array, pa.Array]:
    """The ingestion time and metadata payload of each of ``n`` records: each item covers its records
    from its ``start_index`` to the next item's (null before the first), built run by run."""
    time_type, payload_type = ARROW_SCHEMA.field("ingestionTime").type, pa.binary()
    items = sorted(metadata, key=lambda i: i.start_index)
    times: list[pa.Array] = []
    payloads: list[pa.Array] = []
    at = 0
    for i, item in enumerate(items):
        start = min(max(item.start_index, 0), n)
        end = min(max(items[i + 1].start_index if i + 1 < len(items) else n, start), n)
        if start > at:
            times.append(pa.nulls(start - at, time_type))
            payloads.append(pa.nulls(start - at, payload_type))
        if end > max(start, at):
            count = end - max(start, at)
            times.append(pa.repeat(pa.scalar(item.ingestion_time_ms * 1000, time_type), count))
            payloads.append(pa.repeat(pa.scalar(item.payload, payload_type), count))
        at = max(at, end)
    if at < n:
        times.append(pa.nulls(n - at, time_type))
        payloads.append(pa.nulls(n - at, payload_type))
    if not times:
        return pa.nulls(0, time_type), pa.nulls(0, payload_type)
    if len(times) == 1:
        return times[0], payloads[0]
    return pa.concat_arrays(times), pa.concat_arrays(payloads)
