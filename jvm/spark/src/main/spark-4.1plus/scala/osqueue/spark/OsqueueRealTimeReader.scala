package osqueue.spark

import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.InputPartition
import org.apache.spark.sql.connector.read.streaming.PartitionOffset
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus
import org.apache.spark.util.LongAccumulator

import osqueue.{BatchNotFoundException, Clock, SystemClock}
import osqueue.consumer.{BatchDescriptor, BatchFetcher, ConsumedBatch}
import osqueue.format.{EntryTag, Incarnation, ManifestEntry, ManifestHead}
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
    missingBatches: Option[LongAccumulator], clock: Clock = SystemClock) extends RealTimeRead with Logging {
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
  /** Entries of the last manifest seen, from `nextSeq` on, not yet looked at (a segment is read when reached). */
  private var pending: LazyList[ManifestEntry] = LazyList.empty
  private var stalled = false
  private var waitMs = p.initialWaitMs // the idle rate when the last batch read nothing
  private var current: InternalRow = _

  /**
   * Batch files fetched ahead of the one being read (by sequence): with one object-store round trip
   * per file, fetching them one after another could not keep up with a producer that writes a file
   * every few tens of milliseconds.
   */
  private val prefetched = scala.collection.mutable.Map.empty[Long, java.util.concurrent.Future[ConsumedBatch]]
  private val prefetcher = java.util.concurrent.Executors.newFixedThreadPool(OsqueueRealTimeReader.Prefetch,
    { (r: Runnable) =>
      val t = new Thread(r, s"osqueue-realtime-prefetch"); t.setDaemon(true); t
    })

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
      if (pending.nonEmpty) openNext()
      else {
        val now = clock.nowMillis()
        if (now >= deadline) return RecordStatus.newStatusWithoutArrivalTime(false)
        if (!stalled) poller.poll() match {
          case Some(m) => waitMs = p.pollIntervalMs; follow(m)
          case None =>
        }
        if (pending.isEmpty) {
          clock.sleepMillis(math.max(1L, math.min(waitMs, deadline - clock.nowMillis())))
          waitMs = math.min(waitMs * 2, p.maxPollIntervalMs)
        }
      }
    }
    throw OsqueueExceptions.internalError("the real-time reader's endless loop ended")
  }

  /** A new manifest: checks the fence and the queue's identity, then queues the entries from `nextSeq`. */
  private def follow(m: ManifestHead): Unit = {
    if (Incarnation.of(m.epoch) != p.incarnation || m.nextSequence < nextSeq || m.firstSequence > nextSeq) {
      logWarning(s"'${p.location.identity}' was reset or entries from sequence $nextSeq were removed while this " +
        "real-time batch read it; reading nothing more until the next batch is planned")
      stalled = true
    } else if (m.epoch != p.ownEpoch) throw OsqueueExceptions.fenced(p.ownEpoch, m.epoch)
    else pending = OsqueuePlanner.entriesFrom(m, nextSeq, tree, reread).to(LazyList)
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

  /** Looks at the next entry: skips a second sink copy, else fetches the batch file. */
  private def openNext(): Unit = {
    val e = pending.head
    pending = pending.tail
    val (admit, after) = delivered.admit(EntryTag.decode(e.extension))
    if (!admit) { nextSeq = e.sequence + 1; index = 0; delivered = after }
    else {
      deliveredAfter = after
      val started = clock.nanoTime()
      prefetchAhead()
      val batchRows =
        try {
          val batch = prefetched.remove(e.sequence).map(awaitFetch).getOrElse(fetcher.fetch(BatchDescriptor.of(e)))
          bytesFetched += batch.entries.foldLeft(0L)(_ + _.length)
          OsqueueSchema.rows(batch, fields).drop(if (e.sequence == nextSeq) index else 0)
        } catch {
          case _: BatchNotFoundException if !p.failOnDataLoss =>
            logWarning(s"skipping missing batch '${e.location}' (sequence ${e.sequence}): failOnDataLoss=false")
            missing += 1
            missingBatches.foreach(_.add(1))
            Iterator.empty
          case ex: BatchNotFoundException => throw OsqueueExceptions.dataLoss(ex.getMessage)
        } finally fetchTimeMs += (clock.nanoTime() - started) / 1000000
      if (e.sequence != nextSeq) index = 0
      nextSeq = e.sequence
      rows = batchRows
      if (!rows.hasNext) finishBatch()
    }
  }

  /** Starts fetching the next `Prefetch` pending entries not yet asked for. */
  private def prefetchAhead(): Unit =
    pending.iterator.take(OsqueueRealTimeReader.Prefetch).filterNot(e => prefetched.contains(e.sequence)).foreach { e =>
      prefetched(e.sequence) = prefetcher.submit(() => fetcher.fetch(BatchDescriptor.of(e)))
    }

  private def awaitFetch(f: java.util.concurrent.Future[ConsumedBatch]): ConsumedBatch =
    try f.get()
    catch { case ex: java.util.concurrent.ExecutionException => throw ex.getCause }

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
    prefetcher.shutdownNow()
    logInfo(s"osqueue real-time reader on '${p.location.identity}' stopped at sequence $nextSeq " +
      s"(entry $index) after ${poller.requests} manifest polls")
  }

  override def currentMetricsValues(): Array[CustomTaskMetric] = Array(
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.BytesFetched, bytesFetched),
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.FetchTimeMs, fetchTimeMs),
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.MissingBatches, missing))
}

private[spark] object OsqueueRealTimeReader {
  /** Batch files fetched ahead, at most: 8 concurrent GETs keep up with ~8 files per round trip. */
  val Prefetch = 8
}
