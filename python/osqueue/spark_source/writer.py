"""Writing to a queue from the Python data source (JVM: ``OsqueueWrite``, ``OsqueueDataWriter``,
``OsqueueSinkCommitter``).

Tasks write their rows as batch files under the data prefix and return the files; the driver's commit
appends all of an epoch's files in ONE manifest write, tagged (writerId, batchId, attemptId), then records
the batch id in the writer's state object ``<manifestPath>.writers/<base64url(writerId)>`` (the JVM
sink's format), so a replayed batch id adds nothing and the two sinks can share a queue.

The Python data source API gives a sink no query id: a streaming write needs the ``writerId`` option,
and the writer state's owner is ``python:<checkpointLocation>`` (``python`` without one), so a second
query reusing a writer id that another query or ``df.write`` committed under is refused with
OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY, as on the JVM.

Fencing, as the JVM sink's writer generations (docs/adr/0002): each run of a streaming query has a run
id, a ULID made when Spark instantiates the data source for that run (``OsqueueDataSource.__init__``;
Spark pickles that instance once per run and commits every micro-batch of the run through it). A run's
first commit claims the writer (``generation`` + 1, ``run`` = its id) unless a newer run already did;
every manifest write attempt and the state update re-check the claim, so an older driver of the same
writer (its query restarted elsewhere) lands nothing and fails with :class:`WriterFencedError`. Runs
are ordered by their ids (their drivers' clocks): the newer one wins, even over an older run that
commits first.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from osqueue.clock import SystemClock
from osqueue.errors import WriterFencedError
from osqueue.format.batch_codec import encode_batch, encode_batch_pieces
from osqueue.format.batch_integrity import record as integrity_record
from osqueue.format.batch_names import encode_ulid, new_batch_key
from osqueue.format.entry_tag import EntryTag
from osqueue.format.incarnation import new_incarnation_epoch
from osqueue.format.index_object import fold_index
from osqueue.format.manifest import MetadataItem, NewEntry
from osqueue.format.manifest_codec import empty_manifest
from osqueue.format.manifest_head import SealedTail, parse_head
from osqueue.format.segment_ref import SegmentRef
from osqueue.queue.cas_loop import CasCounters, CasLoop, CasStep, Done, PreviousAttempt, Write
from osqueue.queue.cas_object import CasObject, Snapshot
from osqueue.queue.data_prefix_owner import claim_data_prefix
from osqueue.queue.manifest_store import ManifestStore
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.spark_source.arrow_records import COLUMN_WISE, file_blocks, null_value
from osqueue.spark_source.options import OsqueueSparkError, SinkOptions
from osqueue.spark_source.partition_reader import store_of

_log = logging.getLogger(__name__)

BATCH_WRITE_OWNER = "df.write"
"""The writer state's owner of batch writes (JVM: ``OsqueueExceptions.BatchWriteOwner``)."""


def check_input(schema: StructType) -> tuple[int, bool, int | None]:
    """The index of ``value`` (binary or string), whether it is a string, and that of ``metadata``."""
    names = [f.name for f in schema.fields]
    unknown = [n for n in names if n not in ("value", "metadata")]
    if unknown:
        raise OsqueueSparkError(
            "OSQUEUE_SINK_UNKNOWN_COLUMNS",
            f"the osqueue sink takes only 'value' and 'metadata' columns, but got {', '.join(unknown)}; "
            'select("value", "metadata") the columns to write',
        )
    if "value" not in names:
        raise OsqueueSparkError(
            "OSQUEUE_SINK_MISSING_VALUE_COLUMN",
            f"the osqueue sink needs a 'value' column (binary or string); the input has {', '.join(names) or 'none'}",
        )
    value = schema.fields[names.index("value")]
    if not isinstance(value.dataType, (BinaryType, StringType)):
        raise OsqueueSparkError(
            "OSQUEUE_SINK_COLUMN_TYPE",
            f"the osqueue sink's 'value' column must be binary or string, not {value.dataType.simpleString()}",
        )
    meta = names.index("metadata") if "metadata" in names else None
    if meta is not None and not isinstance(schema.fields[meta].dataType, BinaryType):
        raise OsqueueSparkError(
            "OSQUEUE_SINK_COLUMN_TYPE",
            f"the osqueue sink's 'metadata' column must be binary, not {schema.fields[meta].dataType.simpleString()}",
        )
    return names.index("value"), isinstance(value.dataType, StringType), meta


@dataclass(frozen=True)
class WrittenBatch:
    """One batch file a task wrote (JVM: ``WrittenBatch``)."""

    location: str
    metadata: tuple[MetadataItem, ...]
    records: int
    integrity: bytes  # its entry-integrity record (docs/format.md §2.1), which the driver's append carries


@dataclass
class OsqueueCommitMessage(WriterCommitMessage):
    """A task's files, in the order it wrote them."""

    batches: list[WrittenBatch]


def _as_bytes(value: Any) -> bytes:
    if value is None:
        raise null_value()
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


class _TaskUploads:
    """A write task's batch files: each PUT under a new name; an aborted task deletes what it uploaded."""

    def __init__(self, options: SinkOptions) -> None:
        self.store = store_of(options.location)
        self.clock = SystemClock()
        self._prefix = options.location.data_path_prefix
        self.written: list[WrittenBatch] = []

    def put(self, data: bytes, metadata: tuple[MetadataItem, ...], count: int) -> None:
        key = new_batch_key(self._prefix, self.clock)
        self.store.put(key, data)
        self.written.append(WrittenBatch(key, metadata, count, integrity_record(data)))

    def __enter__(self) -> _TaskUploads:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is not None:
            for b in self.written:
                self.store.delete(b.location)


def write_task(options: SinkOptions, rows: Iterator[tuple[Any, Any]]) -> OsqueueCommitMessage:
    """Writes ``(value, metadata)`` rows as batch files of ``flushSizeBytes`` (JVM: ``OsqueueDataWriter``)."""
    records: list[bytes] = []
    metadata: list[MetadataItem] = []
    last_meta: bytes | None = None
    size = 0
    with _TaskUploads(options) as uploads:

        def flush() -> None:
            nonlocal records, metadata, size
            if records:
                uploads.put(encode_batch(records, options.compression), tuple(metadata), len(records))
                records, metadata, size = [], [], 0

        for value, meta in rows:
            data = _as_bytes(value)
            payload = b"" if meta is None else bytes(meta)
            if not records or payload != last_meta:
                metadata.append(MetadataItem(len(records), uploads.clock.now_ms(), payload))
                last_meta = payload
                size += len(payload)
            records.append(data)
            size += len(data)
            if size >= options.flush_size_bytes:
                flush()
        flush()
    return OsqueueCommitMessage(uploads.written)


def write_arrow_task(
    options: SinkOptions, batches: Iterator[pa.RecordBatch], value: int, meta: int | None
) -> OsqueueCommitMessage:
    """:func:`write_task` of Arrow batches: the same files, their records taken column-wise
    (:mod:`osqueue.spark_source.arrow_records`); row-wise with a ``metadata`` column."""
    if meta is not None or not COLUMN_WISE:
        return write_task(options, arrow_rows(batches, value, meta))
    with _TaskUploads(options) as uploads:
        for pieces, count in file_blocks(batches, value, options.flush_size_bytes):
            data = encode_batch_pieces(pieces, count, options.compression)
            uploads.put(data, (MetadataItem(0, uploads.clock.now_ms(), b""),), count)
    return OsqueueCommitMessage(uploads.written)


def arrow_rows(batches: Iterator[pa.RecordBatch], value: int, meta: int | None) -> Iterator[tuple[Any, Any]]:
    for batch in batches:
        values = batch.column(value).to_pylist()
        metas = batch.column(meta).to_pylist() if meta is not None else [None] * len(values)
        yield from zip(values, metas)


@dataclass(frozen=True)
class WriterState:
    """``<manifestPath>.writers/<b64>`` (JVM: ``OsqueueSinkCommitter.WriterState``, same JSON)."""

    writer_id: str
    last_committed_batch: int
    generation: int
    owner: str | None = None
    stage_uploads: bool = False
    run: str | None = None  # the Python sink's claiming run (a ULID; the JVM sink ignores it)

    def encode(self) -> bytes:
        out: dict[str, Any] = {
            "version": 1,
            "writerId": self.writer_id,
            "lastCommittedBatch": self.last_committed_batch,
            "generation": self.generation,
        }
        if self.owner is not None:
            out["owner"] = self.owner
        if self.stage_uploads:
            out["stageUploads"] = True
        if self.run is not None:
            out["run"] = self.run
        return json.dumps(out, separators=(",", ":")).encode("utf-8")

    @staticmethod
    def decode(key: str, data: bytes) -> WriterState:
        def corrupt() -> OsqueueSparkError:
            text = data.decode("utf-8", "replace")
            return OsqueueSparkError("OSQUEUE_CORRUPT_SINK_STATE", f"the sink writer state '{key}' is corrupt: {text}")

        try:
            node = json.loads(data)
        except ValueError:
            raise corrupt() from None
        if not isinstance(node, dict) or node.get("version") != 1:
            raise corrupt()
        last, generation = node.get("lastCommittedBatch"), node.get("generation", 0)
        owner, stage = node.get("owner"), node.get("stageUploads", False)
        if not isinstance(last, int) or not isinstance(generation, int) or not isinstance(stage, bool):
            raise corrupt()
        run = node.get("run")
        if (owner is not None and not isinstance(owner, str)) or (run is not None and not isinstance(run, str)):
            raise corrupt()
        return WriterState(str(node.get("writerId", "")), last, generation, owner, stage, run)


def state_key(manifest_path: str, writer_id: str) -> str:
    """``<manifestPath>.writers/<base64url(writerId)>`` (JVM: ``OsqueueSinkCommitter.stateKey``)."""
    return f"{manifest_path}.writers/" + base64.urlsafe_b64encode(writer_id.encode("utf-8")).decode().rstrip("=")


class SinkCommitter:
    """The driver's commit of one write (JVM: ``OsqueueSinkCommitter``)."""

    def __init__(
        self, options: SinkOptions, owner: str | None, rng: random.Random | None = None, run: str | None = None
    ) -> None:
        self.options = options
        self.owner = owner
        self.run = run  # a streaming run's id: its first commit claims the writer (None: never claims)
        self._generation: int | None = None  # the generation this committer claimed
        self._write_attempted = False  # a manifest write went out: this commit's files may be referenced
        self.store = store_of(options.location)
        self.clock = SystemClock()
        self.rng = rng or random.Random()
        self.manifests = ManifestStore(self.store, options.location.manifest_path)
        self._manifest_loop = CasLoop(
            self.manifests.cas_object, RetryPolicy(), self.clock, self.rng, CasCounters.uncounted()
        )

    # The writer state exists only for a write with a writer id (one without is a plain append).
    @cached_property
    def state_key(self) -> str:
        if self.options.writer_id is None:
            raise AssertionError("a write without a writer id has no writer state")
        return state_key(self.options.location.manifest_path, self.options.writer_id)

    @cached_property
    def _state(self) -> CasObject:
        return CasObject(self.store, self.state_key)

    @cached_property
    def _state_loop(self) -> CasLoop:
        return CasLoop(self._state, RetryPolicy(), self.clock, self.rng, CasCounters.uncounted())

    def _read_state(self) -> WriterState | None:
        snapshot = self._state.read()
        return None if snapshot.raw is None else WriterState.decode(self.state_key, snapshot.raw)

    def commit(self, batch_id: int, messages: Sequence[WriterCommitMessage | None]) -> bool:
        """Appends the epoch's files in one manifest write; False (nothing appended) for a replayed batch id."""
        batches = [b for msg in messages if isinstance(msg, OsqueueCommitMessage) for b in msg.batches]
        writer = self.options.writer_id
        if writer is None or self.owner is None:
            self._append(batches, b"")
            return True
        state = self._read_state()
        if (
            state is not None
            and state.owner is not None
            and state.owner != self.owner
            and (state.last_committed_batch >= 0 or self.owner == BATCH_WRITE_OWNER)
        ):
            self._delete(batches)
            who = "batch writes (df.write)" if state.owner == BATCH_WRITE_OWNER else f"streaming query {state.owner}"
            raise OsqueueSparkError(
                "OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY",
                f"sink writer '{writer}' belongs to {who}, which committed up to batch {state.last_committed_batch}; "
                f"this writer ({self.owner}) would have its batches skipped as replays. Give it a new 'writerId'.",
            )
        self._write_attempted = False
        if self.run is not None:
            try:
                self._claim(state)
            except WriterFencedError:
                self._delete(batches)  # this attempt's own files: never referenced
                raise
        if state is not None and state.last_committed_batch >= batch_id:
            _log.info("osqueue sink '%s': batch %d was already committed; deleting its files", writer, batch_id)
            self._delete(batches)
            return False
        attempt = encode_ulid(self.clock.now_ms(), self.rng.getrandbits(80))
        try:
            self._append(batches, EntryTag(writer, batch_id, attempt).encode())
        except WriterFencedError:
            if not self._write_attempted:
                self._delete(batches)
            raise
        self._update_state(batch_id)
        return True

    def _fenced(self, current: WriterState) -> WriterFencedError:
        return WriterFencedError(self.options.writer_id or "", self._generation, current.generation)

    def _claim(self, state: WriterState | None) -> None:
        """This run's claim of the writer: made by its first commit (generation + 1, ``run`` = this run),
        kept by the later ones; WriterFencedError once a newer run claimed it."""
        run = self.run
        assert run is not None
        if state is not None and state.run is not None and state.run > run:
            raise self._fenced(state)
        if state is not None and state.run == run:
            self._generation = state.generation
            return
        writer = self.options.writer_id or ""

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[WriterState]:
            current = None if snapshot.raw is None else WriterState.decode(self.state_key, snapshot.raw)
            before = current or WriterState(writer, -1, 0)
            if before.run is not None and before.run >= run:
                return Done(before)
            after = replace(before, generation=before.generation + 1, run=run)
            return Write(after.encode(), lambda: after)

        claimed = self._state_loop.run(step)
        if claimed.run != run:
            raise self._fenced(claimed)
        self._generation = claimed.generation
        _log.info(
            "osqueue sink '%s': run %s is writer generation %d (older drivers are fenced)",
            writer,
            run,
            claimed.generation,
        )

    def _check_claim(self, current: WriterState | None) -> None:
        """Raises WriterFencedError unless this run still holds the writer (a committer that claims)."""
        if self.run is not None and (current is None or current.run != self.run):
            raise self._fenced(current or WriterState(self.options.writer_id or "", -1, 0))

    def _delete(self, batches: Sequence[WrittenBatch]) -> None:
        for b in batches:
            self.store.delete(b.location)

    def _update_state(self, batch_id: int) -> None:
        writer = self.options.writer_id or ""

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[None]:
            current = None if snapshot.raw is None else WriterState.decode(self.state_key, snapshot.raw)
            self._check_claim(current)
            before = current or WriterState(writer, -1, 0)
            if before.last_committed_batch >= batch_id:  # monotonic
                return Done(None)
            after = replace(before, last_committed_batch=batch_id, owner=before.owner or self.owner)
            return Write(after.encode(), lambda: None)

        self._state_loop.run(step)

    def _append(self, batches: Sequence[WrittenBatch], tag: bytes) -> None:
        """All the files in ONE manifest write through the CAS loop (sealing the tail past K, as producers do)."""
        if not batches:
            return
        for prefix in {b.location.rpartition("/")[0] for b in batches} - {""}:
            claim_data_prefix(self.store, self.manifests.key, prefix, self.clock)
        entries: list[NewEntry] = [(b.location, list(b.metadata), b.integrity + tag) for b in batches]
        k = self.options.manifest_segment_entries

        def seal(sealed: SealedTail) -> SegmentRef:
            return self.manifests.write_segment(sealed, self.clock.now_ms(), self.rng)

        def fold(refs: Sequence[SegmentRef]) -> SegmentRef:
            return self.manifests.write_index(fold_index(refs), self.clock.now_ms(), self.rng)

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[None]:
            if previous is not None and snapshot.raw is not None and self._landed(snapshot.raw, batches):
                return Done(None)  # an earlier attempt of unknown outcome landed
            if self.run is not None:  # every write attempt first re-checks the claim (JVM: beforeWrite)
                self._check_claim(self._read_state())
                self._write_attempted = True
            raw = empty_manifest(new_incarnation_epoch()) if snapshot.raw is None else snapshot.raw
            new_raw, _ = parse_head(raw, self.manifests.key).appended(entries, k, seal, fold)
            return Write(new_raw, lambda: None)

        self._manifest_loop.run(step)

    def _landed(self, raw: bytes, batches: Sequence[WrittenBatch]) -> bool:
        head = parse_head(raw, self.manifests.key)
        queued = {loc for _, loc in head.tail_locations_through(head.next_sequence - 1)}
        return batches[0].location in queued


class OsqueueWriter(DataSourceArrowWriter):
    """``df.write``: one manifest write per write; with ``writerId`` (and ``writerBatchId``) idempotent."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.columns = check_input(schema)
        if options.writer_id is not None and options.writer_batch_id is None:
            raise OsqueueSparkError(
                "OSQUEUE_BATCH_WRITE_NEEDS_WRITER_BATCH_ID",
                f"option 'writerid' ('{options.writer_id}') on a batch write (df.write) needs option 'writerbatchid': "
                "the id of this write within the writer, increasing from one write to the next",
            )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> OsqueueCommitMessage:
        value, _, meta = self.columns
        return write_arrow_task(self.options, iterator, value, meta)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        owner = None if self.options.writer_id is None else BATCH_WRITE_OWNER
        SinkCommitter(self.options, owner).commit(self.options.writer_batch_id or 0, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        for msg in messages:
            for b in msg.batches if isinstance(msg, OsqueueCommitMessage) else []:
                store_of(self.options.location).delete(b.location)


class OsqueueStreamWriter(DataSourceStreamWriter):
    """``writeStream``: one manifest write per micro-batch, idempotent per (writerId, batchId)."""

    def __init__(self, options: SinkOptions, schema: StructType, owner: str, run: str | None = None) -> None:
        self.options = options
        self.owner = owner
        self.run = run  # this streaming run's id (fencing: see the module's doc)
        self.columns = check_input(schema)
        if options.writer_batch_id is not None:
            raise OsqueueSparkError(
                "OSQUEUE_WRITER_BATCH_ID_ON_STREAM",
                "option 'writerbatchid' applies only to batch writes (df.write); a streaming query commits each "
                "micro-batch under Spark's batch id",
            )
        if options.writer_id is None:
            raise OsqueueSparkError(
                "OSQUEUE_OPTION_NEEDS_OPTION",
                "the Python osqueue sink needs the option 'writerId' on a streaming write: the Python data source "
                "API gives a sink no query id, and the writer id is what makes a replayed micro-batch add nothing",
            )

    def write(self, iterator: Iterator[Any]) -> OsqueueCommitMessage:
        value, _, meta = self.columns
        first = next(iterator, None)
        if first is None:
            return OsqueueCommitMessage([])
        items = itertools.chain([first], iterator)
        if isinstance(first, pa.RecordBatch):  # pyspark hands a stream writer Arrow batches or rows, all alike
            return write_arrow_task(self.options, items, value, meta)

        def rows() -> Iterator[tuple[Any, Any]]:
            for item in items:
                if isinstance(item, pa.RecordBatch):
                    yield from arrow_rows(iter([item]), value, meta)
                else:
                    yield item[value], None if meta is None else item[meta]

        return write_task(self.options, rows())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        SinkCommitter(self.options, self.owner, run=self.run).commit(batchId, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        for msg in messages:
            for b in msg.batches if isinstance(msg, OsqueueCommitMessage) else []:
                store_of(self.options.location).delete(b.location)
