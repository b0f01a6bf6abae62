"""Reading a queue from the Python data source: a batch read of a window and a micro-batch stream
(JVM: ``OsqueueBatch``, ``OsqueueMicroBatchStream``, ``DriverQueue``, ``OsqueuePartitionReader``).

The driver plans from the manifest; each partition is a run of consecutive batch files, read on an
executor and handed to Spark as one Arrow record batch each (:mod:`osqueue.spark_source.partition_reader`). A stream takes the queue over (epoch bump, fencing any other
consumer) at its first offset request, and dequeues only in ``commit(end)`` and, when the query stops,
through the last micro-batch of the checkpoint's commit log (when given ``checkpointLocation``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from osqueue.clock import Clock, SystemClock
from osqueue.errors import FencedError
from osqueue.format.entry_tag import Delivered
from osqueue.format.incarnation import incarnation_of
from osqueue.format.manifest import Manifest
from osqueue.queue.cas_loop import CasCounters, CasLoop, CasStep, Done, PreviousAttempt, Write
from osqueue.queue.cas_object import CasObject, Snapshot
from osqueue.queue.manifest_store import ManifestStore
from osqueue.queue.queue_consumer import QueueConsumer
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.spark_source import gc_schedule
from osqueue.spark_source.admission_control import AdmissionControl
from osqueue.spark_source.options import BatchReadOptions, OsqueueSparkError, QueueLocation, StreamOptions
from osqueue.spark_source.partition_reader import (
    BatchPartition,
    data_loss,
    partitions_of,
    read_partition,
    store_of,
)
from osqueue.spark_source.source_offset import SourceOffset
from osqueue.store.object_store import ObjectStore

try:  # pyspark >= 4.2: the stream reader offers Trigger.AvailableNow's target (prepareForTriggerAvailableNow)
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:
    SupportsTriggerAvailableNow = None

_log = logging.getLogger(__name__)


def no_subscription(name: str, location: QueueLocation) -> OsqueueSparkError:
    return OsqueueSparkError(
        "OSQUEUE_NO_SUBSCRIPTION",
        f"queue '{location.identity}' has no subscription '{name}': create it first (osqueue subscriptions create), "
        "or set createSubscription=true on a stream",
    )


class OsqueueBatchReader(DataSourceReader):
    """``spark.read``: the entries of ``[startingSequence, endingSequence)``; acknowledges nothing."""

    def __init__(self, options: BatchReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        manifests = ManifestStore(store_of(o.location), o.location.manifest_path)
        raw, _ = manifests.read_raw()
        if raw is None:
            raise OsqueueSparkError(
                "OSQUEUE_QUEUE_NOT_FOUND",
                f"no queue at '{o.location.identity}': the manifest does not exist (check 'path' and 'manifestPath')",
            )
        manifest = manifests.decode(raw)
        first = manifest.entries[0].sequence if manifest.entries else manifest.next_sequence
        start = first if o.starting_sequence is None else o.starting_sequence
        if o.subscription is not None:  # its position (docs/adr/0005): read only, nothing acked, nobody fenced
            record = manifests.head(raw).sections.subscription(o.subscription)
            if record is None:
                raise no_subscription(o.subscription, o.location)
            if o.starting_sequence is None:
                start = max(record.next, first)
        end = manifest.next_sequence if o.ending_sequence is None else o.ending_sequence
        if o.fail_on_data_loss and start < first and start < end:
            raise data_loss(o.location, f"entries {start}..{min(first, end) - 1} of the window were dequeued")
        delivered = Delivered()
        window = []
        for a in delivered.admit_all(e for e in manifest.entries if start <= e.sequence < end):
            if a.admitted:
                window.append(a.entry)
        return partitions_of(o.location, window, o.fail_on_data_loss)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BatchPartition)
        return read_partition(partition)


def queue_id(store: ObjectStore, location: QueueLocation, rng: random.Random) -> str:
    """The queue's id in ``<manifestPath>.queue-id`` (created once, put-if-absent; JVM: ``OsqueueStores.queueId``)."""
    loop = CasLoop(
        CasObject(store, location.manifest_path + ".queue-id"),
        RetryPolicy(max_attempts=8),
        SystemClock(),
        rng,
        CasCounters.uncounted(),
    )

    def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[str]:
        if snapshot.raw is not None:
            return Done(snapshot.raw.decode("utf-8").strip())
        new_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        return Write(new_id.encode("utf-8"), lambda: new_id)

    return loop.run(step)


class _DriverSide:
    """What only the driver's stream reader holds: the store, the queue id and the consumer that took over."""

    def __init__(self, options: StreamOptions, rng: random.Random, clock: Clock) -> None:
        store = store_of(options.location)
        self.store = store
        self.queue_id = queue_id(store, options.location, rng)
        self.consumer = QueueConsumer(
            store,
            options.location.manifest_path,
            rng=rng,
            clock=clock,
            subscription=options.subscription,
            create_subscription=options.create_subscription,
        )
        self.taken_over = False
        self.last: Manifest | None = None
        self.admission = AdmissionControl(options, clock.now_ms())
        location = options.location
        self.gc = gc_schedule.for_source(
            store,
            location.manifest_path,
            location.data_path_prefix,
            location.identity,
            options.gc_enabled,
            options.gc_interval_s,
            options.gc_grace_period_s,
            clock,
        )


class OsqueueStreamReader(DataSourceStreamReader):
    """``spark.readStream``: micro-batches of whole batch files, dequeued when Spark commits them."""

    def __init__(self, options: StreamOptions, rng: random.Random | None = None, clock: Clock | None = None) -> None:
        self.options = options
        self.location = options.location
        self._rng = rng
        self._clock = clock
        self._driver: _DriverSide | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader to run read() in its workers: they need only the options.
        return {"options": self.options, "location": self.location, "_rng": None, "_clock": None, "_driver": None}

    @property
    def driver(self) -> _DriverSide:
        """The driver's store, queue id and consumer, made at first use (never pickled)."""
        if self._driver is None:
            self._driver = _DriverSide(self.options, self._rng or random.Random(), self._clock or SystemClock())
        return self._driver

    @property
    def queue_id(self) -> str:
        return self.driver.queue_id

    @property
    def consumer(self) -> QueueConsumer:
        return self.driver.consumer

    @property
    def _taken_over(self) -> bool:
        return self.driver.taken_over

    @_taken_over.setter
    def _taken_over(self, value: bool) -> None:
        self.driver.taken_over = value

    @property
    def _last(self) -> Manifest | None:
        return self.driver.last

    @_last.setter
    def _last(self, value: Manifest | None) -> None:
        self.driver.last = value

    def _read(self) -> Manifest:
        if not self._taken_over:
            name = self.options.subscription
            if name is not None and not self.options.create_subscription:
                raw, _ = self.consumer.manifest.read_raw()
                if raw is None or self.consumer.manifest.head(raw).sections.subscription(name) is None:
                    raise no_subscription(name, self.location)
            self.consumer.initialize()  # epoch bump: fences any other reader of the queue (or of the subscription)
            self._taken_over = True
            _log.info(
                "osqueue Python source took over %s of '%s'",
                "the queue" if name is None else f"subscription '{name}'",
                self.location.identity,
            )
            self._stop_on_sigterm()
            if self.driver.gc is not None:
                self.driver.gc.start()  # one cycle at once, then every gcInterval (JVM: GcSchedule)
        self._last = self.consumer.read()  # FencedError once another reader took over
        return self._last

    def _offset(self, nxt: int, m: Manifest, delivered: Delivered) -> dict[str, Any]:
        subscription = self.options.subscription
        return SourceOffset(
            self.location.identity,
            self.queue_id,
            nxt,
            incarnation_of(m.epoch),
            delivered,
            subscription,
            None if subscription is None else self.consumer.incarnation,
        ).to_json()

    def _parse(self, offset: Any) -> SourceOffset:
        return SourceOffset.parse(offset, self.queue_id, self.location.identity, self.options.subscription)

    def _reader_start(self, m: Manifest) -> int:
        """Where this reader's record said to start when it took over (a subscription's or, on a v3 head,
        the unnamed reader's ``next``), within the queue; else its first entry."""
        first = m.entries[0].sequence if m.entries else m.next_sequence
        start = self.consumer.start_sequence
        return first if start is None else min(max(start, first), m.next_sequence)

    def initialOffset(self) -> dict[str, Any]:
        m = self._read()
        return self._offset(self._reader_start(m), m, Delivered())

    def getDefaultReadLimit(self) -> Any:
        """pyspark 4.2+: the limit of the micro-batch options (:class:`AdmissionControl`)."""
        return self.driver.admission.default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        """pyspark 4.2+ (Trigger.AvailableNow): read up to the queue's end now, read without taking it over."""
        raw, _ = self.consumer.manifest.read_raw()
        target = self.consumer.manifest.head(raw).next_sequence
        self.driver.admission.available_now_up_to(target)
        _log.info("Trigger.AvailableNow: reading '%s' up to sequence %d", self.location.identity, target)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """The end of the next micro-batch. pyspark 4.2+ passes ``start`` and a read limit (admission
        control: ``maxBatchesPerTrigger`` and friends, Trigger.AvailableNow's target); older pyspark
        passes neither, and the end is everything queued."""
        m = self._read()
        if start is None:
            # The sink-copy state at the end is that of every queued entry admitted from the first.
            delivered = Delivered()
            for a in delivered.admit_all(m.entries):
                delivered = a.after
            return self._offset(m.next_sequence, m, delivered)
        s = self._parse(start)
        frm, delivered = s.next_sequence, s.delivered
        first = m.entries[0].sequence if m.entries else m.next_sequence
        if frm > m.next_sequence or (s.incarnation is not None and s.incarnation != incarnation_of(m.epoch)):
            frm, delivered = first, Delivered()  # partitions() reports it (data loss)
        elif frm < first:
            frm = first
        admission = self.driver.admission
        now = (self._clock or SystemClock()).now_ms()
        end = admission.end(frm, m.next_sequence, limit, now)
        if end is None or end <= s.next_sequence and frm == s.next_sequence:
            if end is not None and admission.available_now_target is not None:
                self._end_of_available_now(s)
            return start  # nothing to read yet (or holding for minBatchesPerTrigger)
        admission.planned(frm, end, now)
        for a in delivered.admit_all(x for x in m.entries if frm <= x.sequence < end):
            delivered = a.after
        return self._offset(end, m, delivered)

    def _end_of_available_now(self, start: SourceOffset) -> None:
        """A Trigger.AvailableNow run reached its target: this is Spark's last ``latestOffset`` call
        of the run (it plans no micro-batch, so the run ends), and Spark never calls ``commit(end)``
        for the run's last micro-batch. Dequeue it now, through ``start``.

        ``start`` is Spark's committed position: Spark asks for the next offset only once the
        previous micro-batch is in the checkpoint's commit log (an uncommitted one is re-run first,
        without a ``latestOffset`` call), and AvailableNow runs commit synchronously (Spark refuses
        async progress tracking with it). So nothing Spark has not committed is dequeued. The
        reader's ``stop()`` did this before, but pyspark runs it in a Python worker it is tearing
        down, which can end first (pyspark 4.2+; on 4.0 and 4.1 an AvailableNow run is one
        micro-batch, with no call after it, and ``stop()`` remains the only way).

        With a local ``checkpointLocation`` its commit log is read too, and the dequeue never goes past
        the last micro-batch there."""
        end = start
        committed = last_committed_end(self.options.checkpoint_location, self.queue_id)
        if committed is not None:
            c = self._parse(committed)
            if c.next_sequence < end.next_sequence:
                _log.warning(
                    "the commit log of '%s' ends at %d, before Spark's position %d: dequeuing through the log",
                    self.options.checkpoint_location,
                    c.next_sequence,
                    end.next_sequence,
                )
                end = c
        self._dequeue(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        s, e = self._parse(start), self._parse(end)
        m = self._read()
        current = incarnation_of(m.epoch)
        if e.incarnation is not None and e.incarnation != current:
            self._loss(
                e.next_sequence, f"the queue was reset since this micro-batch was planned (incarnation {current})"
            )
            return []
        first = m.entries[0].sequence if m.entries else m.next_sequence
        frm, delivered = s.next_sequence, s.delivered
        now_sub = self.consumer.incarnation if self.options.subscription is not None else None
        if s.subscription_incarnation is not None and now_sub is not None and s.subscription_incarnation != now_sub:
            frm, delivered = self._reader_start(m), Delivered()
            self._loss(
                s.next_sequence,
                f"subscription '{self.options.subscription}' was dropped and recreated since the checkpoint (incarnation "
                f"{s.subscription_incarnation}, now {now_sub}); continuing at its position {frm}",
            )
        elif s.incarnation is not None and s.incarnation != current:
            self._loss(frm, f"the queue was reset since the checkpoint (incarnation {s.incarnation}, now {current})")
            frm, delivered = first, Delivered()
        elif frm > m.next_sequence:
            self._loss(frm, f"the checkpoint is ahead of the queue (next sequence {m.next_sequence})")
            frm, delivered = first, Delivered()
        elif frm < first and frm < e.next_sequence:
            self._loss(frm, f"entries {frm}..{min(first, e.next_sequence) - 1} were removed before they were read")
        out = []
        for a in delivered.admit_all(x for x in m.entries if frm <= x.sequence < e.next_sequence):
            if a.admitted:
                out.append(a.entry)
        return partitions_of(self.location, out, self.options.fail_on_data_loss)

    def _loss(self, sequence: int, reason: str) -> None:
        if self.options.fail_on_data_loss:
            raise data_loss(self.location, reason)
        _log.warning("osqueue data loss at %d of '%s': %s", sequence, self.location.identity, reason)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BatchPartition)
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed the micro-batch ending at ``end``: its entries are dequeued (one manifest CAS)."""
        self._dequeue(self._parse(end))

    def _dequeue(self, end: SourceOffset) -> None:
        m = self._last if self._last is not None and self._last.next_sequence >= end.next_sequence else self._read()
        if end.next_sequence <= 0:
            return
        if end.incarnation is not None and end.incarnation != incarnation_of(m.epoch):
            _log.warning("not dequeuing through %d: the queue was reset since", end.next_sequence - 1)
            return
        if end.next_sequence > m.next_sequence:
            _log.warning("not dequeuing through %d: the queue is behind it", end.next_sequence - 1)
            return
        self.consumer.dequeue_through(end.next_sequence - 1)

    def _stop_on_sigterm(self) -> None:
        """Spark ends the driver's stream-reader worker with SIGTERM when the query stops (pyspark 4.1 does
        not call ``stop()`` then): run :meth:`stop` first, then terminate as the signal would have.

        Spark sends that SIGTERM twice, microseconds apart (``PythonWorkerFactory.stopWorker`` destroys
        the worker, then ``stop()`` destroys every worker again). The handler ignores the second one: run
        inside the first one's ``stop()``, it waited for the local store's write lock that ``stop()``
        held on the same thread (30 s), then ended the process before the dequeue landed."""
        if threading.current_thread() is not threading.main_thread():
            return

        def on_sigterm(signum: int, frame: object) -> None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # first: a second SIGTERM must not re-enter
            if self._stopping:  # stop() is running on this thread, below this handler: let it finish
                self._terminate_after_stop = True
                return
            self.stop()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)

    _stopping = False
    _stopped = False
    _terminate_after_stop = False

    def stop(self) -> None:
        """The query ended: dequeue through the last micro-batch of the checkpoint's commit log (docs/adr/0003).
        Runs once; a SIGTERM arriving meanwhile ends the process after it."""
        if self._driver is None or not self._taken_over or self._stopping or self._stopped:
            return
        self._stopping = True
        try:
            end = last_committed_end(self.options.checkpoint_location, self.queue_id)
            if end is not None:
                self._dequeue(self._parse(end))
        except FencedError as e:
            _log.warning("not dequeuing the last micro-batch of '%s': %s", self.location.identity, e)
        except Exception as e:  # never over the query's own outcome
            _log.warning("could not dequeue the last micro-batch of '%s': %s", self.location.identity, e)
        finally:
            if self._driver.gc is not None:
                self._driver.gc.stop()
            self._stopping = False
            self._stopped = True
        if self._terminate_after_stop:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


def _local(path: str) -> str | None:
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path if path.startswith("/") else None


def last_committed_end(checkpoint: str | None, own_queue_id: str) -> dict[str, Any] | None:
    """This source's end offset in the last micro-batch of ``<checkpoint>/commits`` (a local checkpoint),
    read from ``<checkpoint>/offsets/<batch>`` (line 3 on: one offset per source)."""
    root = None if checkpoint is None else _local(checkpoint)
    if root is None:
        if checkpoint is not None:
            _log.warning(
                "cannot read the commit log of '%s' (not a local path): the last batch stays queued", checkpoint
            )
        return None
    commits = os.path.join(root, "commits")
    batches = [int(n) for n in os.listdir(commits) if n.isdigit()] if os.path.isdir(commits) else []
    if not batches:
        return None
    with open(os.path.join(root, "offsets", str(max(batches))), encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines[2:]:
        try:
            offset = json.loads(line)
        except ValueError:
            continue
        if isinstance(offset, dict) and offset.get("queueId") == own_queue_id:
            return offset
    return None


if SupportsTriggerAvailableNow is not None:

    class OsqueueAvailableNowStreamReader(OsqueueStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
        """pyspark 4.2+: the stream reader with admission control and Trigger.AvailableNow in several micro-batches."""


def stream_reader(options: StreamOptions) -> DataSourceStreamReader:
    """The stream reader for this process's pyspark (:class:`OsqueueAvailableNowStreamReader` on 4.2+)."""
    if SupportsTriggerAvailableNow is not None:
        return OsqueueAvailableNowStreamReader(options)
    return OsqueueStreamReader(options)
