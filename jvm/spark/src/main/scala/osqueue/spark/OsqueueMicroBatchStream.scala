package osqueue.spark

import java.util.{Optional, Map => JMap}
import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}
import java.util.concurrent.atomic.AtomicLong

import scala.jdk.CollectionConverters._

import org.apache.spark.internal.Logging
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReaderFactory}
import org.apache.spark.sql.connector.read.streaming._

import osqueue.SystemClock
import osqueue.consumer.BatchDescriptor
import osqueue.format.Manifest
import osqueue.gc.GarbageCollector
import osqueue.metrics.MetricsRegistry
import osqueue.queue.{ManifestStore, QueueConsumer, RetryPolicy}

/**
 * Reads a queue as a micro-batch stream. Offsets are manifest sequences; Spark's checkpoint is
 * the only resume point. Starting the stream bumps the manifest epoch (fencing any earlier
 * reader); `commit(end)` dequeues through `end - 1` in one manifest write, and nothing is
 * dequeued before Spark has committed the batch. The driver reads only the manifest; executors
 * fetch and decode the batch files.
 */
private[spark] final class OsqueueMicroBatchStream(options: SourceOptions, readers: PartitionReaderFactory)
    extends MicroBatchStream with SupportsTriggerAvailableNow with ReportsSourceMetrics with Logging {

  private val location = options.location
  private val store = OsqueueStores.open(location)
  private val queue = new QueueConsumer(new ManifestStore(store, location.manifestPath), RetryPolicy(), SystemClock,
    new MetricsRegistry)
  private val queueId: String = OsqueueStores.queueId(store, location, create = true).getOrElse(
    throw new IllegalStateException(s"cannot create the queue id of '${location.identity}'"))
  private val epoch = queue.initialize(None)
  logInfo(s"osqueue source on '${location.identity}' took over the queue at epoch $epoch")

  @volatile private var lastManifest: Option[Manifest] = None
  @volatile private var availableNowTarget: Option[Long] = None
  @volatile private var lastTriggerMs = System.currentTimeMillis()
  private val dataLossEvents = new AtomicLong()
  private val duplicateCopiesSkipped = new AtomicLong()
  private val gc: Option[ScheduledExecutorService] = if (options.gcEnabled) Some(startGc()) else None

  private def offset(next: Long) = OsqueueSourceOffset(location.identity, queueId, next)

  /** After a restart Spark hands back offsets read from the checkpoint as `SerializedOffset`s. */
  private def ours(o: Offset): OsqueueSourceOffset = o match {
    case ours: OsqueueSourceOffset => ours
    case other => deserializeOffset(other.json).asInstanceOf[OsqueueSourceOffset]
  }
  private def sequenceOf(o: Offset): Long = ours(o).nextSequence

  private def readManifest(): Manifest = {
    val m = queue.read() // raises FencedException once another reader took over
    lastManifest = Some(m)
    m
  }

  override def initialOffset(): Offset = offset(readManifest().firstSequence)

  override def deserializeOffset(json: String): Offset = {
    val o = OsqueueSourceOffset.parse(json)
    if (o.queue != location.identity || o.queueId != queueId)
      throw OsqueueExceptions.foreignCheckpoint(o.queue, o.queueId, location.identity, queueId)
    o
  }

  override def latestOffset(): Offset = throw new UnsupportedOperationException(
    "latestOffset(start, limit) is used instead (SupportsAdmissionControl)")

  override def getDefaultReadLimit: ReadLimit = {
    val limits = options.maxBatchesPerTrigger.map(ReadLimit.maxFiles).toSeq ++
      options.minBatchesPerTrigger.map(ReadLimit.minRows(_, options.maxTriggerDelay.toMillis)).toSeq
    limits match {
      case Seq() => ReadLimit.allAvailable()
      case Seq(one) => one
      case many => ReadLimit.compositeLimit(many.toArray)
    }
  }

  override def prepareForTriggerAvailableNow(): Unit = {
    availableNowTarget = Some(readManifest().nextSequence)
    logInfo(s"Trigger.AvailableNow: reading '${location.identity}' up to sequence ${availableNowTarget.get}")
  }

  /** The end offset of the next micro-batch: everything available, capped by the read limit. */
  override def latestOffset(startOffset: Offset, limit: ReadLimit): Offset = {
    val start = sequenceOf(startOffset)
    val m = readManifest()
    checkNotBehind(start, m)
    val available = math.max(start, availableNowTarget.fold(m.nextSequence)(math.min(_, m.nextSequence)))
    val limits = limit match {
      case c: CompositeReadLimit => c.getReadLimits.toSeq
      case l => Seq(l)
    }
    var end = available
    limits.foreach {
      case f: ReadMaxFiles => end = math.min(end, start + f.maxFiles())
      case _ =>
    }
    val now = System.currentTimeMillis()
    val waitForMore = availableNowTarget.isEmpty && limits.exists {
      case min: ReadMinRows => available - start < min.minRows() && now - lastTriggerMs < min.maxTriggerDelayMs()
      case _ => false
    }
    if (waitForMore) startOffset
    else {
      if (end > start) lastTriggerMs = now
      val delivered = SinkCopies.select(m.entries, start, end, ours(startOffset).delivered)._2
      OsqueueSourceOffset(location.identity, queueId, end, delivered)
    }
  }

  override def reportLatestOffset(): Offset = lastManifest.map(m => offset(m.nextSequence)).orNull

  override def planInputPartitions(start: Offset, end: Offset): Array[InputPartition] = {
    val from = sequenceOf(start)
    val to = sequenceOf(end)
    val m = readManifest()
    checkNotBehind(from, m)
    val firstPresent = m.entries.find(e => e.sequence >= from && e.sequence < to).map(_.sequence).getOrElse(to)
    if (firstPresent > from)
      reportDataLoss(s"entries $from to ${firstPresent - 1} of '${location.identity}' were removed before this query read them")
    val (entries, _) = SinkCopies.select(m.entries, from, to, ours(start).delivered)
    duplicateCopiesSkipped.addAndGet(m.entries.count(e => e.sequence >= from && e.sequence < to) - entries.size)
    entries.map(e => OsqueueInputPartition(location, BatchDescriptor.of(e), options.failOnDataLoss): InputPartition).toArray
  }

  override def createReaderFactory(): PartitionReaderFactory = readers

  /** Spark committed the batch ending at `end`: dequeue through `end - 1` (one write, or none). */
  override def commit(end: Offset): Unit = {
    val next = sequenceOf(end)
    if (next > 0) queue.dequeueThrough(next - 1)
  }

  override def stop(): Unit = gc.foreach(_.shutdownNow())

  override def metrics(latestConsumedOffset: Optional[Offset]): JMap[String, String] =
    lastManifest.map(m => metricsOf(m, latestConsumedOffset)).getOrElse(Map.empty[String, String]).asJava

  private def metricsOf(m: Manifest, latestConsumedOffset: Optional[Offset]): Map[String, String] = {
    val consumed = Option(latestConsumedOffset.orElse(null)).map(sequenceOf)
      .getOrElse(m.firstSequence)
    val behind = math.max(0L, m.nextSequence - consumed)
    val oldestUnread = m.entries.find(_.sequence >= consumed).flatMap(_.metadata.headOption).map(_.ingestionTimeMs)
    val lagSeconds = oldestUnread.map(t => math.max(0L, System.currentTimeMillis() - t) / 1000.0).getOrElse(0.0)
    Map(
      "queueLength" -> m.entries.size.toString,
      "batchesBehindLatest" -> behind.toString,
      "numFilesOutstanding" -> behind.toString,
      "lagSeconds" -> f"$lagSeconds%.3f",
      "epoch" -> java.lang.Long.toUnsignedString(epoch),
      "dataLossEvents" -> dataLossEvents.get().toString,
      "duplicateCopiesSkipped" -> duplicateCopiesSkipped.get().toString)
  }

  override def toString: String = s"OsqueueMicroBatchStream[${location.identity}]"

  /** A start before the first entry means entries vanished unread; a start past next_sequence, a foreign queue. */
  private def checkNotBehind(start: Long, m: Manifest): Unit = {
    if (start > m.nextSequence)
      reportDataLoss(s"the checkpoint is at sequence $start but '${location.identity}' has only assigned up to " +
        s"${m.nextSequence - 1}: the queue was reset or recreated")
    else if (start < m.firstSequence)
      reportDataLoss(s"entries $start to ${m.firstSequence - 1} of '${location.identity}' were removed before this query read them")
  }

  private def reportDataLoss(message: String): Unit = {
    if (options.failOnDataLoss) throw OsqueueExceptions.dataLoss(message)
    dataLossEvents.incrementAndGet()
    logWarning(s"$message (continuing: failOnDataLoss=false)")
  }

  private def startGc(): ScheduledExecutorService = {
    val collector = new GarbageCollector(store, location.manifestPath, location.dataPathPrefix, options.gcGracePeriod,
      SystemClock)
    val ex = Executors.newSingleThreadScheduledExecutor { r =>
      val t = new Thread(r, s"osqueue-gc-${location.identity}"); t.setDaemon(true); t
    }
    val period = options.gcInterval.toMillis
    ex.scheduleWithFixedDelay(() => {
      try {
        val r = collector.runOnce()
        if (r.deleted.nonEmpty || r.failed.nonEmpty)
          logInfo(s"osqueue GC on '${location.identity}': deleted ${r.deleted.size}, failed ${r.failed.size}")
      } catch { case e: Exception => logWarning(s"osqueue GC cycle failed; retrying in ${options.gcInterval}", e) }
    }, period, period, TimeUnit.MILLISECONDS)
    ex
  }
}
