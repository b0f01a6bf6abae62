package osqueue.metrics

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.{AtomicLong, DoubleAdder, LongAdder}

import scala.jdk.CollectionConverters._

/**
 * A small thread-safe metrics registry with the RFC 0002 names (`buffer.*`). The Spark layer
 * reads snapshots of it for progress reports; nothing here depends on a metrics library.
 */
final class MetricsRegistry {
  private val counters = new ConcurrentHashMap[MetricKey, LongAdder]()
  private val gauges = new ConcurrentHashMap[MetricKey, AtomicLong]()
  private val histograms = new ConcurrentHashMap[MetricKey, Histogram]()

  def counter(name: String, labels: (String, String)*): LongAdder =
    counters.computeIfAbsent(MetricKey(name, labels.toMap), _ => new LongAdder)

  def gauge(name: String, labels: (String, String)*): AtomicLong =
    gauges.computeIfAbsent(MetricKey(name, labels.toMap), _ => new AtomicLong)

  def histogram(name: String, labels: (String, String)*): Histogram =
    histograms.computeIfAbsent(MetricKey(name, labels.toMap), _ => new Histogram)

  /** Every metric as `name{k=v}` → value; histograms as `_count`, `_sum`, `_max`. */
  def snapshot(): Map[String, Double] = {
    val c = counters.asScala.map { case (k, v) => k.render -> v.sum().toDouble }
    val g = gauges.asScala.map { case (k, v) => k.render -> v.get().toDouble }
    val h = histograms.asScala.flatMap { case (k, v) =>
      Seq(k.render + "_count" -> v.count.toDouble, k.render + "_sum" -> v.sum, k.render + "_max" -> v.max)
    }
    (c ++ g ++ h).toMap
  }

  def counterValue(name: String, labels: (String, String)*): Long =
    Option(counters.get(MetricKey(name, labels.toMap))).map(_.sum()).getOrElse(0L)
}

final case class MetricKey(name: String, labels: Map[String, String]) {
  def render: String =
    if (labels.isEmpty) name else labels.toSeq.sorted.map { case (k, v) => s"$k=$v" }.mkString(s"$name{", ",", "}")
}

/** Count, sum and max of observations (durations in seconds, sizes in bytes). */
final class Histogram {
  private val n = new LongAdder
  private val total = new DoubleAdder
  @volatile private var maximum = 0.0
  def observe(v: Double): Unit = {
    n.increment(); total.add(v)
    if (v > maximum) synchronized { if (v > maximum) maximum = v }
  }
  def count: Long = n.sum()
  def sum: Double = total.sum()
  def max: Double = maximum
}

/** Metric names shared by the JVM and Python implementations. */
object MetricNames {
  val BatchesFlushed = "buffer.batches_flushed"
  val EntriesFlushed = "buffer.entries_flushed"
  val BytesFlushed = "buffer.bytes_flushed"
  val BytesWritten = "buffer.bytes_written"
  val FlushDuration = "buffer.flush_duration_seconds"
  val BatchesCollected = "buffer.batches_collected"
  val EntriesCollected = "buffer.entries_collected"
  val BytesCollected = "buffer.bytes_collected"
  val Acks = "buffer.acks"
  /** Per reader (label `subscription`, "" for the unnamed consumer): the manifest writes its acks made. */
  val AckWrites = "buffer.ack_writes"
  /** Per reader (label `subscription`): next_sequence minus its next unacked sequence at its last head read. */
  val ConsumerLagEntries = "buffer.consumer_lag_entries"
  val GcFilesDeleted = "buffer.gc_files_deleted"
  val GcFilesFailed = "buffer.gc_files_failed"
  val GcDuration = "buffer.gc_duration_seconds"
  val DescriptorsHandedOut = "buffer.descriptors_handed_out"
  val ConsumerLagSeconds = "buffer.consumer_lag_seconds"
  val QueueLength = "buffer.queue_length"
  val FetchDuration = "buffer.fetch_duration_seconds"
  val ManifestWrites = "buffer.manifest_writes"
  val ManifestConflicts = "buffer.manifest_conflicts"
  val AmbiguitiesResolvedByReceipts = "buffer.ambiguities_resolved_by_receipts"
  val ReceiptWriteFailures = "buffer.receipt_write_failures"
  val AmbiguousWrites = "buffer.manifest_ambiguous_writes"
  val BatchesReuploaded = "buffer.batches_reuploaded"
  val SegmentsSealed = "buffer.segments_sealed"
  // The producer spool (docs/adr/0006 part 2)
  val SpoolBytes = "buffer.spool_bytes"
  val SpoolOldestEntryAgeSeconds = "buffer.spool_oldest_entry_age_seconds"
  val SpoolReplayedBatches = "buffer.spool_replayed_batches"
  val SpoolDroppedEntries = "buffer.spool_dropped_entries"
  val SpoolFullWaits = "buffer.spool_full_waits"
  val SegmentsResplit = "buffer.segments_resplit"
  // Cooperative commit (docs/adr/0007 part 1; Python only so far)
  val IntentsAnnounced = "buffer.intents_announced"
  val IntentsAppendedForOthers = "buffer.intents_appended_for_others"
  val IntentsRejected = "buffer.intents_rejected"
  val CommitRounds = "buffer.commit_rounds"
  val DataLossEvents = "buffer.data_loss_events"
  val DroppedEntries = "buffer.dropped_entries"
  val EntriesDropped = "buffer.entries_dropped"
  val BytesDropped = "buffer.bytes_dropped"
  val QueueFullWaits = "buffer.queue_full_waits"
  val DuplicateCopiesSkipped = "buffer.duplicate_copies_skipped"
  val BatchesUnverified = "buffer.batches_unverified"
}
