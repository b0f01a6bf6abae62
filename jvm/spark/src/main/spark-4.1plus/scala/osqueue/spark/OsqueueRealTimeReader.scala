package osqueue.spark

import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.InputPartition
import org.apache.spark.sql.connector.read.streaming.PartitionOffset
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus
import org.apache.spark.util.LongAccumulator

import osqueue.{BatchNotFoundException, Clock, CorruptBatchException, SystemClock}
import osqueue.consumer.{BatchDescriptor, BatchFetcher, ConsumedBatch}
import osqueue.format.{EntryTag, Incarnation, ManifestHead}
import osqueue.format.EntryTag.Admission
import osqueue.metrics.MetricsRegistry
import osqueue.queue.{ManifestStore, SegmentTree}

/**
 * The one partition of a real-time batch: where to start (`nextSequence`, `entryIndex` entries of
 * that batch file already read, the sink-copy state) and what the driver saw when it planned it:
 * its own epoch (a newer one in the manifest fences this reader) and the manifest incarnation.
 */
private[spark] final case class OsqueueRealTimePartition(
    location: QueueLocation,
    queueId: String,
    ownEpoch: Long,
    incarnation: Long,
    nextSequence: Long,
    entryIndex: Int,
    delivered: EntryTag.Delivered,
    failOnDataLoss: Boolean,
    pollIntervalMs: Long,
    maxPollIntervalMs: Long,
    initialWaitMs: Long) extends InputPartition

/** The reader's position, reported to the driver when the batch's time is up. */
private[spark] final case class OsqueueRealTimePartitionOffset(nextSequence: Long, entryIndex: Int,
    delivered: EntryTag.Delivered, incarnation: Long) extends PartitionOffset

/**
 * Follows the manifest for the duration of a real-time batch and reads each batch file as it lands,
 * in sequence order, one copy of each sink batch. Nothing to read: it polls the manifest every
 * `pollIntervalMs`, doubling the wait on each poll that finds no change, up to `maxPollIntervalMs`.
 * It never writes the queue. When the queue was reset or entries it has not read were removed, it
 * reads nothing more this batch: the driver's next plan reports that as data loss, as in micro-batch
 * mode. A manifest at another epoch of the same incarnation means another consumer took over: the
 * task fails with the fence error (the zombie query stops within one poll).
 */
private[spark] final class OsqueueRealTimeReader(p: OsqueueRealTimePartition, fields: Array[Int],
    missingBatches: Option[LongAccumulator], clock: Clock = SystemClock,
    corruptBatches: Option[LongAccumulator] = None) extends RealTimeRead with Logging {
  private val store = OsqueueStores.open(p.location)
  private val poller = new ManifestPoller(store, p.location.manifestPath)
  private val fetcher = new BatchFetcher(store, clock, new MetricsRegistry)
  private val manifests = new ManifestStore(store, p.location.manifestPath)
  private val tree = new SegmentTree(manifests)

  // The position: entries below `nextSeq` are read, and `index` entries of the batch at `nextSeq`.
  private var nextSeq = p.nextSequence
  private var index = p.entryIndex
  private var delivered = p.delivered
  /** The batch file being read: its rows, and the sink-copy state once it is read whole. */
  private var rows: Iterator[InternalRow] = Iterator.empty
  private var deliveredAfter = delivered
  /**
   * The entries of the last manifest followed, from `nextSeq` on, with the reader rule applied, not
   * yet taken by the read-ahead (a segment is read when reached).
   */
  private var pending: Iterator[Admission] = Iterator.empty
  private var stalled = false
  private var waitMs = p.initialWaitMs // the idle rate when the last batch read nothing
  private var current: InternalRow = _

  /**
   * Batch files fetched ahead of the one being read, from whatever [[follow]] queued last: with one
   * object-store round trip per file, fetching them one after another could not keep up with a
   * producer that writes a file every few tens of milliseconds. A second sink copy is passed
   * through unfetched, so that the position moves over it in order.
   */
  private val fetches = new BatchReadAhead[Admission, Option[ConsumedBatch]](
    new Iterator[Admission] {
      override def hasNext: Boolean = pending.hasNext
      override def next(): Admission = pending.next()
    },
    ReadAheadLimits.Default,
    a => if (a.admitted) Some(fetcher.fetch(BatchDescriptor.of(a.entry, p.location.manifestPath), copyOnRead = true)) else None,
    _.fold(0L)(_.byteLength),
    p.location.identity)

  private var bytesFetched = 0L
  private var fetchTimeMs = 0L
  private var missing = 0L

  override protected def nextBefore(deadline: Long): RecordStatus = {
    while (true) {
      if (rows.hasNext) {
        current = rows.next()
        index += 1
        if (!rows.hasNext) finishBatch()
        return RecordStatus.newStatusWithoutArrivalTime(true)
      }
      if (fetches.hasNext) openNext()
      else {
        val now = clock.nowMillis()
        if (now >= deadline) return RecordStatus.newStatusWithoutArrivalTime(false)
        if (!stalled) poller.poll() match {
          case Some(m) => waitMs = p.pollIntervalMs; follow(m)
          case None =>
        }
        if (!fetches.hasNext) {
          clock.sleepMillis(math.max(1L, math.min(waitMs, deadline - clock.nowMillis())))
          waitMs = math.min(waitMs * 2, p.maxPollIntervalMs)
        }
      }
    }
    throw OsqueueExceptions.internalError("the real-time reader's endless loop ended")
  }

  /**
   * A new manifest, once everything queued before is read: checks the fence and the queue's
   * identity, then queues the entries from `nextSeq`.
   */
  private def follow(m: ManifestHead): Unit = {
    if (Incarnation.of(m.epoch) != p.incarnation || m.nextSequence < nextSeq || m.firstSequence > nextSeq) {
      logWarning(s"'${p.location.identity}' was reset or entries from sequence $nextSeq were removed while this " +
        "real-time batch read it; reading nothing more until the next batch is planned")
      stalled = true
    } else if (m.epoch != p.ownEpoch) throw OsqueueExceptions.fenced(p.ownEpoch, m.epoch)
    else pending = delivered.admitAll(OsqueuePlanner.entriesFrom(m, nextSeq, tree, reread))
  }

  /**
   * The head read again when a segment or index object the last one listed is gone
   * ([[SegmentTree.afterMissing]]): the fence error if another consumer took the queue over; None
   * (reading nothing more this batch, as in [[follow]]) if the queue was reset or entries from
   * `position` on were removed; else the head to go on from (this query's dequeue dropped the object).
   */
  private def reread(position: Long): Option[ManifestHead] = {
    val s = manifests.read()
    val m = if (s.version.isEmpty) None else Some(manifests.head(s))
    m.filter(h => Incarnation.of(h.epoch) == p.incarnation).foreach { h =>
      if (h.epoch != p.ownEpoch) throw OsqueueExceptions.fenced(p.ownEpoch, h.epoch)
    }
    val usable = m.filter(h => Incarnation.of(h.epoch) == p.incarnation && h.firstSequence <= position)
    if (usable.isEmpty) {
      logWarning(s"'${p.location.identity}' was reset or entries from sequence $position were removed while this " +
        "real-time batch read it; reading nothing more until the next batch is planned")
      stalled = true
    }
    usable
  }

  /** Takes the next entry from the read-ahead: moves over a second sink copy, else reads its batch file. */
  private def openNext(): Unit = {
    val started = clock.nanoTime()
    val (a, fetched) = fetches.next()
    fetchTimeMs += (clock.nanoTime() - started) / 1000000
    val e = a.entry
    if (!a.admitted) { nextSeq = e.sequence + 1; index = 0; delivered = a.after }
    else {
      deliveredAfter = a.after
      val batchRows =
        try {
          val batch = fetched.get.getOrElse(throw OsqueueExceptions.internalError(s"no fetch of '${e.location}'"))
          bytesFetched += batch.byteLength
          OsqueueSchema.rows(batch, fields).drop(if (e.sequence == nextSeq) index else 0)
        } catch {
          case _: BatchNotFoundException if !p.failOnDataLoss =>
            logWarning(s"skipping missing batch '${e.location}' (sequence ${e.sequence}): failOnDataLoss=false")
            missing += 1
            missingBatches.foreach(_.add(1))
            Iterator.empty
          case ex: BatchNotFoundException => throw OsqueueExceptions.dataLoss(ex.getMessage)
          case ex: CorruptBatchException if ex.integrityMismatch && !p.failOnDataLoss => // docs/format.md §2.1
            logWarning(s"skipping corrupt batch (sequence ${e.sequence}): ${ex.getMessage}; failOnDataLoss=false")
            corruptBatches.foreach(_.add(1))
            Iterator.empty
        }
      if (e.sequence != nextSeq) index = 0
      nextSeq = e.sequence
      rows = batchRows
      if (!rows.hasNext) finishBatch()
    }
  }

  private def finishBatch(): Unit = {
    nextSeq += 1
    index = 0
    delivered = deliveredAfter
    rows = Iterator.empty
  }

  override def getOffset: PartitionOffset = OsqueueRealTimePartitionOffset(nextSeq, index, delivered, p.incarnation)

  override def next(): Boolean = nextBefore(Long.MaxValue / 4).hasRecord
  override def get(): InternalRow = current
  override def close(): Unit = {
    fetches.close()
    logInfo(s"osqueue real-time reader on '${p.location.identity}' stopped at sequence $nextSeq " +
      s"(entry $index) after ${poller.requests} manifest polls")
  }

  override def currentMetricsValues(): Array[CustomTaskMetric] = Array(
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.BytesFetched, bytesFetched),
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.FetchTimeMs, fetchTimeMs),
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.MissingBatches, missing))
}
