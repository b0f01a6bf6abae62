package osqueue.spark

import java.util.concurrent.atomic.AtomicLong

import scala.util.Try

import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.{CustomSumMetric, CustomTaskMetric}
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader, PartitionReaderFactory}
import org.apache.spark.sql.vectorized.ColumnarBatch
import org.apache.spark.util.LongAccumulator

import osqueue.{BatchNotFoundException, Clock, CorruptBatchException, SystemClock}
import osqueue.consumer.{BatchDescriptor, BatchFetcher, ConsumedBatch}
import osqueue.format.{EntryTag, ManifestHead, SegmentRef}
import osqueue.metrics.MetricsRegistry
import osqueue.queue.ManifestStore
import osqueue.store.ObjectStore

/**
 * A partition of a micro-batch or batch read: batch files of one queue that an
 * [[OsqueuePartitionReader]] reads on an executor, in sequence order. `skipEntries`: entries of
 * the first batch a real-time batch already read (the offset's `entryIndex`).
 */
private[spark] sealed trait OsqueueReadPartition extends InputPartition {
  def location: QueueLocation
  def failOnDataLoss: Boolean
  def skipEntries: Int
}

/** Listed batch files: everything needed to fetch them without the manifest. */
private[spark] final case class OsqueueInputPartition(
    location: QueueLocation,
    descriptors: IndexedSeq[BatchDescriptor],
    failOnDataLoss: Boolean,
    skipEntries: Int = 0) extends OsqueueReadPartition

/**
 * Sequences [from, until) of one segment: the segment (checked against its ref), then each batch
 * file one copy of each sink batch admits, starting from `delivered`.
 */
private[spark] final case class OsqueueSlicePartition(
    location: QueueLocation,
    segment: SegmentRef,
    from: Long,
    until: Long,
    delivered: EntryTag.Delivered,
    failOnDataLoss: Boolean,
    skipEntries: Int = 0) extends OsqueueReadPartition

/**
 * `fields`: the columns Spark needs (indexes into [[OsqueueSchema.schema]]), after pruning.
 * `missingBatches`: the stream's driver-side count of batch files skipped as missing (`corruptBatches`:
 * as not matching their entry's integrity record, docs/format.md §2.1); it rides in
 * the factory (deserialized inside the task, so Spark registers it and merges the tasks' counts).
 * A micro-batch or batch partition is read columnar ([[OsqueueColumnarReader]]: one `ColumnarBatch`
 * per batch file, its `value` column over the decoded block); a real-time partition row by row.
 */
private[spark] final case class OsqueueReaderFactory(fields: Array[Int], missingBatches: Option[LongAccumulator] = None,
    corruptBatches: Option[LongAccumulator] = None)
    extends PartitionReaderFactory {
  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = partition match {
    case p: OsqueueReadPartition => new OsqueuePartitionReader(p, fields, missingBatches, corruptBatches = corruptBatches)
    case other => RealTimeSupport.reader(other, fields, missingBatches, corruptBatches) // a real-time partition (Spark 4.1+)
  }

  override def supportColumnarReads(partition: InputPartition): Boolean = partition.isInstanceOf[OsqueueReadPartition]

  override def createColumnarReader(partition: InputPartition): PartitionReader[ColumnarBatch] = partition match {
    case p: OsqueueReadPartition => new OsqueueColumnarReader(p, fields, missingBatches, corruptBatches = corruptBatches)
    case other => throw OsqueueExceptions.internalError(s"no columnar reader for partition $other")
  }
}

/**
 * Fetches and decodes the batches of one partition on an executor: listed batch files, or a slice of
 * a segment (read first, checked against its ref). The batch files are fetched a few ahead of the
 * one being read ([[BatchReadAhead]], within `readAhead`), and handed out in order. A corrupt batch
 * or segment fails the task naming the object, at the rows it belongs to; a missing one is data loss
 * (fails unless `failOnDataLoss=false`, then it is skipped and counted). Subclasses turn each
 * fetched batch into what Spark reads: rows ([[OsqueuePartitionReader]]) or a columnar batch
 * ([[OsqueueColumnarReader]]).
 */
private[spark] abstract class OsqueueBatchFilesReader[T](p: OsqueueReadPartition, missingBatches: Option[LongAccumulator],
    clock: Clock, readAhead: ReadAheadLimits, openStore: QueueLocation => ObjectStore,
    corruptBatches: Option[LongAccumulator]) extends PartitionReader[T] with Logging {
  private var bytesFetched = 0L
  private val fetchTimeMs = new AtomicLong() // summed over the fetches, which overlap
  private var missing = 0L
  private var corrupt = 0L
  private lazy val store = openStore(p.location)
  private lazy val fetcher = new BatchFetcher(store, clock, new MetricsRegistry)

  /** Created on the first row (a slice reads its segment then), closed by [[close]]. */
  private var fetches: Option[BatchReadAhead[(BatchDescriptor, Int), ConsumedBatch]] = None

  /**
   * The partition's fetched batches in order, each with the entries of it to skip (read already by a
   * real-time batch); a missing or corrupt batch skipped under failOnDataLoss=false is left out, a
   * failed one fails when it is reached.
   */
  protected lazy val batches: Iterator[(ConsumedBatch, Int)] = {
    val listed = p match {
      case b: OsqueueInputPartition => b.descriptors.iterator.zipWithIndex.map { case (d, i) => (d, if (i == 0) b.skipEntries else 0) }
      case s: OsqueueSlicePartition => sliceBatches(s)
    }
    val ahead = new BatchReadAhead[(BatchDescriptor, Int), ConsumedBatch](listed, readAhead, { case (d, _) => timedFetch(d) },
      _.byteLength, p.location.identity, { case (d, _) => d.integrity.map(_.byteLength) })
    fetches = Some(ahead)
    ahead.flatMap { case ((d, skip), fetched) => opened(d, fetched).map(_ -> skip) }
  }

  /** The batches of a slice one copy of each sink batch admits, from the state the driver planned it with. */
  private def sliceBatches(s: OsqueueSlicePartition): Iterator[(BatchDescriptor, Int)] = {
    val manifests = new ManifestStore(store, s.location.manifestPath)
    manifests.readSegmentBytes(s.segment) match {
      case None =>
        val message = s"segment '${s.segment.key}' of '${s.location.identity}' (sequences ${s.from} to ${s.until - 1}) " +
          "is missing: it was dequeued by another consumer and collected"
        if (s.failOnDataLoss) throw OsqueueExceptions.dataLoss(message)
        logWarning(s"skipping $message: failOnDataLoss=false")
        missing += s.until - s.from
        missingBatches.foreach(_.add(s.until - s.from))
        Iterator.empty
      case Some(bytes) =>
        val inSlice = ManifestHead.decodeSegment(bytes, s.segment).iterator.filter(e => e.sequence >= s.from && e.sequence < s.until)
        s.delivered.admitAll(inSlice).collect {
          case a if a.admitted => (BatchDescriptor.of(a.entry, s.segment.key), if (a.entry.sequence == s.from) s.skipEntries else 0)
        }
    }
  }

  private def timedFetch(d: BatchDescriptor): ConsumedBatch = {
    val started = clock.nanoTime()
    try fetcher.fetch(d, copyOnRead = true)
    finally fetchTimeMs.addAndGet((clock.nanoTime() - started) / 1000000)
  }

  /** One fetched batch; a fetch that failed fails here, after the rows of the batches before it. */
  private def opened(d: BatchDescriptor, fetched: Try[ConsumedBatch]): Option[ConsumedBatch] =
    try {
      val batch = fetched.get
      bytesFetched += batch.byteLength
      Some(batch)
    } catch {
      case e: BatchNotFoundException if !p.failOnDataLoss =>
        logWarning(s"skipping missing batch '${d.location}' (sequence ${d.sequence}): failOnDataLoss=false")
        missing += 1
        missingBatches.foreach(_.add(1))
        None
      case e: BatchNotFoundException => throw OsqueueExceptions.dataLoss(e.getMessage)
      // A batch that does not match its entry's integrity record (read twice): CorruptBatch fails the
      // task under failOnDataLoss=true; otherwise it is skipped and counted (docs/format.md §2.1).
      case e: CorruptBatchException if e.integrityMismatch && !p.failOnDataLoss =>
        logWarning(s"skipping corrupt batch (sequence ${d.sequence}): ${e.getMessage}; failOnDataLoss=false")
        corrupt += 1
        corruptBatches.foreach(_.add(1))
        None
    }

  /** Cancels the fetches in flight and stops their threads (Spark calls it on success, failure and kill). */
  override def close(): Unit = fetches.foreach(_.close())

  override def currentMetricsValues(): Array[CustomTaskMetric] = Array(
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.BytesFetched, bytesFetched),
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.FetchTimeMs, fetchTimeMs.get),
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.MissingBatches, missing),
    OsqueueTaskMetrics.task(OsqueueTaskMetrics.CorruptBatches, corrupt))
}

/** A partition's rows, one at a time ([[OsqueueSchema.rows]]): the reader where Spark reads rows. */
private[spark] final class OsqueuePartitionReader(p: OsqueueReadPartition, fields: Array[Int],
    missingBatches: Option[LongAccumulator], clock: Clock = SystemClock,
    readAhead: ReadAheadLimits = ReadAheadLimits.Default,
    openStore: QueueLocation => ObjectStore = OsqueueStores.open,
    corruptBatches: Option[LongAccumulator] = None)
    extends OsqueueBatchFilesReader[InternalRow](p, missingBatches, clock, readAhead, openStore, corruptBatches) {
  private lazy val rows: Iterator[InternalRow] =
    batches.flatMap { case (batch, skip) => OsqueueSchema.rows(batch, fields).drop(skip) }

  private var current: InternalRow = _
  override def next(): Boolean = if (rows.hasNext) { current = rows.next(); true }
  else false
  override def get(): InternalRow = current
}

/**
 * A partition's rows as one `ColumnarBatch` per batch file ([[OsqueueColumns.batch]]): Spark's
 * generated code then reads each column in a loop over the batch, with no row object or iterator
 * per row. A batch file with no rows to hand out (all skipped) is passed over.
 */
private[spark] final class OsqueueColumnarReader(p: OsqueueReadPartition, fields: Array[Int],
    missingBatches: Option[LongAccumulator], clock: Clock = SystemClock,
    readAhead: ReadAheadLimits = ReadAheadLimits.Default,
    openStore: QueueLocation => ObjectStore = OsqueueStores.open,
    corruptBatches: Option[LongAccumulator] = None)
    extends OsqueueBatchFilesReader[ColumnarBatch](p, missingBatches, clock, readAhead, openStore, corruptBatches) {
  private var current: ColumnarBatch = _
  override def next(): Boolean = {
    current = null
    while (current == null && batches.hasNext) {
      val (batch, skip) = batches.next()
      if (batch.entries.length > skip) current = OsqueueColumns.batch(batch, fields, skip)
    }
    current != null
  }
  override def get(): ColumnarBatch = current
}

/** Task-level metrics shown in the Spark UI's SQL tab. */
private[spark] object OsqueueTaskMetrics {
  val BytesFetched = "bytesFetched"
  val FetchTimeMs = "fetchTimeMs"
  val MissingBatches = "missingBatches"
  val CorruptBatches = "corruptBatches"

  def task(metric: String, v: Long): CustomTaskMetric = new CustomTaskMetric {
    override def name(): String = metric
    override def value(): Long = v
  }

  def supported: Array[org.apache.spark.sql.connector.metric.CustomMetric] =
    Array(new BytesFetchedMetric, new FetchTimeMetric, new MissingBatchesMetric, new CorruptBatchesMetric)
}

/** A summed metric shown as `osqueue: <description>` in the Spark UI. */
private[spark] abstract class OsqueueSumMetric(metric: String, text: String) extends CustomSumMetric {
  override def name(): String = metric
  override def description(): String = s"osqueue: $text"
}

// Spark instantiates metric classes by name (no-arg constructors): one tiny class per metric.
private[spark] class BytesFetchedMetric extends OsqueueSumMetric(OsqueueTaskMetrics.BytesFetched, "record bytes fetched")
private[spark] class FetchTimeMetric
    extends OsqueueSumMetric(OsqueueTaskMetrics.FetchTimeMs, "batch fetch and decode time (ms)")
private[spark] class MissingBatchesMetric
    extends OsqueueSumMetric(OsqueueTaskMetrics.MissingBatches, "missing batches skipped (failOnDataLoss=false)")
private[spark] class CorruptBatchesMetric
    extends OsqueueSumMetric(OsqueueTaskMetrics.CorruptBatches, "corrupt batches skipped (failOnDataLoss=false)")
