package osqueue.spark

import java.util.{Optional, Map => JMap}
import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}
import java.util.concurrent.atomic.AtomicLong

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReaderFactory}
import org.apache.spark.sql.connector.read.streaming._
import org.apache.spark.util.LongAccumulator

import osqueue.{Clock, SystemClock}
import osqueue.format.{EntryTag, Incarnation, ManifestHead}
import osqueue.gc.GarbageCollector
import osqueue.metrics.MetricsRegistry
import osqueue.queue.{BackgroundDequeuer, ManifestStore, QueueConsumer, RetryPolicy, VersionedManifest}

/**
 * Reads a queue as a micro-batch stream. Offsets are manifest sequences; Spark's checkpoint is
 * the only resume point. The first offset request bumps the manifest epoch (fencing any earlier
 * reader), after Spark has handed over the checkpoint's offsets, so a query refused for a foreign
 * checkpoint fences nobody. `commit(end)` asks the background dequeuer to dequeue through `end - 1`
 * and returns (the manifest CAS is off Spark's critical path; commits coalesce into one write), and
 * nothing is dequeued before Spark has committed the batch; when the query ends, `stop()` dequeues
 * through its last committed batch, read from the checkpoint's commit log (docs/adr/0003), and waits
 * for the dequeuer to finish, up to [[OsqueueMicroBatchStream.DequeueFlushTimeoutMs]]. The
 * driver reads only the manifest head and walks a segmented queue's segments a few at a time
 * ([[OsqueuePlanner]]); executors read the segment slices and fetch and decode the batch files.
 *
 * `sourceCheckpoint` is the location Spark gives `toMicroBatchStream`: `<checkpoint>/sources/<index>`.
 */
private[spark] class OsqueueMicroBatchStream(protected val options: SourceOptions, readers: OsqueueReaderFactory,
    sourceCheckpoint: String, clock: Clock = SystemClock)
    extends MicroBatchStream with SupportsTriggerAvailableNow with ReportsSourceMetrics with Logging {

  protected val location: QueueLocation = options.location
  private val store = OsqueueStores.open(location)
  private val manifests = new ManifestStore(store, location.manifestPath)
  private val queue = new QueueConsumer(manifests, RetryPolicy(), clock, new MetricsRegistry)
  /** Dequeues what Spark committed, off its critical path; a fence it meets fails the query's next call. */
  private val dequeuer = new BackgroundDequeuer(queue, s"'${location.identity}'", clock)
  protected val queueId: String = OsqueueStores.queueId(store, location, create = true, clock).getOrElse(
    throw OsqueueExceptions.queueIdUnavailable(location.identity))

  @volatile private var lastManifest: Option[ManifestHead] = None
  /** The last plan of latestOffset, reused by planInputPartitions for the same range (one walk, not two). */
  @volatile private var lastPlan: Option[((Long, Long, EntryTag.Delivered, Int, Long), OsqueuePlanner.Plan)] = None
  /** The manifest head as last read, with its version: the next read is conditional on it. */
  @volatile private var lastRead: Option[VersionedManifest] = None
  /** latestOffset's idle backoff: no manifest read before `nextPollAt` (nanoTime), after `idleWaitMs` of quiet. */
  @volatile private var nextPollAt = 0L
  @volatile private var idleWaitMs = 0L
  @volatile private var availableNowTarget: Option[Long] = None
  @volatile private var lastTriggerMs = clock.nowMillis()
  @volatile private var gc: Option[ScheduledExecutorService] = None
  private val dataLossEvents = new AtomicLong()
  /** Data-loss events already reported, so one event seen by several calls is counted once. */
  private val reportedLosses = java.util.concurrent.ConcurrentHashMap.newKeySet[(String, Long)]()
  /** Checkpoint positions found ahead of a reset queue: Spark commits them later, and they must ack nothing. */
  private val preResetOffsets = java.util.concurrent.ConcurrentHashMap.newKeySet[Long]()
  private val duplicateCopiesSkipped = new AtomicLong()
  /** Batch files the executors found missing and skipped (failOnDataLoss=false), summed on the driver. */
  private val session = SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
  protected val missingBatches: Option[LongAccumulator] =
    session.map(_.sparkContext.longAccumulator(s"osqueue missing batches ${location.identity}"))
  private val checkpoint = session.flatMap(SparkCheckpointLogs.forSource(_, sourceCheckpoint))

  /**
   * Takes over the queue (epoch bump) on first use, then runs one GC cycle at once and every
   * `gcInterval` after, so short and AvailableNow runs collect too.
   */
  protected lazy val epoch: Long = {
    val e = queue.initialize(None)
    logInfo(s"osqueue source on '${location.identity}' took over the queue at epoch ${java.lang.Long.toUnsignedString(e)}")
    if (options.gcEnabled) gc = Some(startGc())
    e
  }
  private def takeOver(): Unit = { val _ = epoch }

  protected def offset(next: Long, m: ManifestHead) =
    OsqueueSourceOffset(location.identity, queueId, next, incarnation = Some(Incarnation.of(m.epoch)))

  /** The position is from another incarnation of the manifest (docs/format.md §5.2): the queue was reset. */
  protected def fromAnotherIncarnation(o: OsqueueSourceOffset, m: ManifestHead): Boolean =
    o.incarnation.exists(_ != Incarnation.of(m.epoch))

  /** After a restart Spark hands back offsets read from the checkpoint as `SerializedOffset`s. */
  protected def ours(o: Offset): OsqueueSourceOffset = o match {
    case ours: OsqueueSourceOffset => ours
    case other => deserializeOffset(other.json).asInstanceOf[OsqueueSourceOffset]
  }
  private def sequenceOf(o: Offset): Long = ours(o).nextSequence

  protected def readManifest(): ManifestHead = {
    dequeuer.checkFailed()
    takeOver()
    // Conditional on the version last read: unchanged, no bytes are transferred and the head is that one.
    val read = queue.readUnlessAt(lastRead) // raises FencedException once another reader took over
    lastRead = Some(read)
    lastManifest = Some(read.head)
    read.head
  }

  /**
   * latestOffset's manifest head. A read that finds no change puts the next one off by `pollInterval`,
   * doubling up to `maxPollInterval`, and the head last read stands in meanwhile; a change
   * reads again at once. At trigger 0 Spark asks every few milliseconds: an idle query costs ~1
   * conditional read per `maxPollInterval`, not one full read per ask. AvailableNow always reads.
   */
  private def pollManifest(): ManifestHead = {
    val now = clock.nanoTime()
    lastRead match {
      case Some(known) if availableNowTarget.isEmpty && now - nextPollAt < 0 =>
        dequeuer.checkFailed()
        known.head
      case before =>
        val m = readManifest()
        val changed = !before.exists(b => lastRead.exists(_ eq b))
        idleWaitMs =
          if (changed) 0L
          else math.min(math.max(idleWaitMs * 2, options.pollInterval.toMillis), options.maxPollInterval.toMillis)
        nextPollAt = now + idleWaitMs * 1000000L
        m
    }
  }

  override def initialOffset(): Offset = { val m = readManifest(); offset(m.firstSequence, m) }

  /** The queue id decides; the URI differs for the same queue (`s3://` and `s3a://`, `/dir` and `file:/dir`). */
  override def deserializeOffset(json: String): Offset = {
    val o = OsqueueSourceOffset.parse(json)
    if (o.queueId != queueId) throw OsqueueExceptions.foreignCheckpoint(o.queue, o.queueId, location.identity, queueId)
    o
  }

  override def latestOffset(): Offset =
    throw OsqueueExceptions.internalError("latestOffset() called: latestOffset(start, limit) is used instead (SupportsAdmissionControl)")

  override def getDefaultReadLimit: ReadLimit = {
    val limits = options.maxBatchesPerTrigger.map(ReadLimit.maxFiles).toSeq ++
      options.minBatchesPerTrigger.map(ReadLimit.minRows(_, options.maxTriggerDelay.toMillis)).toSeq
    limits match {
      case Seq() => ReadLimit.allAvailable()
      case Seq(one) => one
      case many => ReadLimit.compositeLimit(many.toArray)
    }
  }

  /** Spark calls this before it reads the checkpoint: the target is read without taking over the queue. */
  override def prepareForTriggerAvailableNow(): Unit = {
    availableNowTarget = Some(manifests.head(manifests.read()).nextSequence)
    logInfo(s"Trigger.AvailableNow: reading '${location.identity}' up to sequence ${availableNowTarget.get}")
  }

  /** The end offset of the next micro-batch: everything available, capped by the read limit. */
  override def latestOffset(startOffset: Offset, limit: ReadLimit): Offset = {
    val startAt = ours(startOffset)
    val m = pollManifest()
    val (start, delivered) = resumePoint(startAt, m)
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
    val now = clock.nowMillis()
    val waitForMore = availableNowTarget.isEmpty && limits.exists {
      case min: ReadMinRows => available - start < min.minRows() && now - lastTriggerMs < min.maxTriggerDelayMs()
      case _ => false
    }
    // A start inside a batch file (left by a real-time batch) with nothing past that file stays put:
    // an end at the same sequence would move the position back to the file's first entry.
    if (waitForMore || (startAt.entryIndex > 0 && end <= startAt.nextSequence)) startOffset
    else {
      if (end > start) lastTriggerMs = now
      val skip = if (start == startAt.nextSequence) startAt.entryIndex else 0
      OsqueueSourceOffset(location.identity, queueId, end, planOf(m, start, end, delivered, skip).delivered,
        Some(Incarnation.of(m.epoch)))
    }
  }

  /**
   * Where the next micro-batch starts reading, and the sink-copy state to read with. A checkpoint
   * ahead of the queue (reset or recreated) or behind its first entry is data loss: an error, or
   * with failOnDataLoss=false one warning and reading on from the queue's first entry.
   */
  protected def resumePoint(startAt: OsqueueSourceOffset, m: ManifestHead): (Long, EntryTag.Delivered) = {
    val start = startAt.nextSequence
    if (fromAnotherIncarnation(startAt, m)) {
      reportDataLoss("reset", start, resetMessage(startAt, m) + s"; continuing at its first entry ${m.firstSequence}")
      (m.firstSequence, EntryTag.Delivered.Empty)
    } else if (start > m.nextSequence) {
      reportDataLoss("ahead", start, aheadMessage(start, m) + s"; continuing at its first entry ${m.firstSequence}")
      preResetOffsets.add(start)
      (m.firstSequence, EntryTag.Delivered.Empty) // a new queue: the old writers' copies mean nothing
    } else if (start < m.firstSequence) {
      reportDataLoss("removed", start, removedMessage(start, m.firstSequence - 1))
      (m.firstSequence, startAt.delivered)
    } else (start, startAt.delivered)
  }

  override def reportLatestOffset(): Offset = lastManifest.map(m => offset(m.nextSequence, m)).orNull

  override def planInputPartitions(start: Offset, end: Offset): Array[InputPartition] = {
    val startAt = ours(start)
    val endAt = ours(end)
    val to = endAt.nextSequence
    val m = readManifest()
    // A batch planned against an earlier incarnation (replayed after a reset) reads nothing: its entries are gone.
    if (fromAnotherIncarnation(endAt, m)) {
      reportDataLoss("reset", to, resetMessage(endAt, m))
      return Array.empty
    }
    // A start beyond the end, or from another incarnation than the end, marks the batch latestOffset
    // planned after finding the checkpoint from before a reset (already reported): it reads the
    // queue's entries below `to`, from the first.
    val (from, delivered) =
      if (startAt.nextSequence > to || startAt.incarnation.exists(i => endAt.incarnation.exists(_ != i)))
        (0L, EntryTag.Delivered.Empty)
      else {
        val from = startAt.nextSequence
        if (from > m.nextSequence) reportDataLoss("ahead", from, aheadMessage(from, m))
        val firstPresent = Some(math.max(from, m.firstSequence)).filter(_ < math.min(to, m.nextSequence)).getOrElse(to)
        if (firstPresent > from && from < m.nextSequence) reportDataLoss("removed", from, removedMessage(from, firstPresent - 1))
        (from, startAt.delivered)
      }
    // A start inside a batch file (a real-time batch ended there): its first entries were read.
    val skip = if (from == startAt.nextSequence) startAt.entryIndex else 0
    val plan = planOf(m, from, to, delivered, skip)
    duplicateCopiesSkipped.addAndGet(plan.copiesSkipped)
    plan.partitions
  }

  /**
   * The plan of [from, to): the sequences below the queue's next one never change, so a plan made
   * at the same epoch (no other reader dequeued since) is the same plan.
   */
  private def planOf(m: ManifestHead, from: Long, to: Long, delivered: EntryTag.Delivered, skip: Int): OsqueuePlanner.Plan = {
    val key = (math.max(from, m.firstSequence), math.min(to, m.nextSequence), delivered, skip, m.epoch)
    lastPlan.collect { case (k, p) if k == key => p }.getOrElse {
      // the store directly: the consumer's segment cache would serialize the read-ahead
      val p = OsqueuePlanner.plan(m, queue.segmentTree, manifests.readSegment, location, from, to, delivered, options.failOnDataLoss, skip)
      lastPlan = Some((key, p))
      p
    }
  }

  override def createReaderFactory(): PartitionReaderFactory = readers.copy(missingBatches = missingBatches)

  /**
   * Spark committed the batch ending at `end`: the dequeuer dequeues through `end - 1` (one write,
   * or none, or one for several commits) while Spark goes on. An
   * end from before a reset of the queue acks nothing: the reset queue's entries below it are not
   * the ones Spark processed (even if producers have since written that far).
   */
  override def commit(end: Offset): Unit = {
    val endAt = ours(end)
    val next = endAt.nextSequence
    if (preResetOffsets.remove(next)) // once: the reset queue may later reach this sequence itself
      logWarning(s"not dequeuing through ${next - 1}: that position is from before '${location.identity}' was reset")
    else if (next > 0) {
      val m = lastManifest.filter(_.nextSequence >= next).getOrElse(readManifest())
      if (fromAnotherIncarnation(endAt, m))
        logWarning(s"not dequeuing through ${next - 1}: ${resetMessage(endAt, m)}")
      else if (next > m.nextSequence) {
        reportDataLoss("ahead", next, aheadMessage(next, m))
        logWarning(s"not dequeuing through ${next - 1}: '${location.identity}' has only assigned up to ${m.nextSequence - 1}")
      } else dequeuer.request(next - 1)
    }
  }

  /**
   * The query ended (AvailableNow or Once finished, `query.stop()`, a failure): Spark commits a
   * batch to the source only when it plans the next one, so the last batch it committed is
   * dequeued here and the dequeuer flushed, then GC stops (a cycle already running, such as the one
   * at start, may finish).
   */
  override def stop(): Unit =
    try {
      dequeueLastCommittedBatch()
      flushDequeues()
    } finally gc.foreach { ex =>
        ex.shutdown()
        if (!ex.awaitTermination(GcStopWaitSeconds, TimeUnit.SECONDS)) ex.shutdownNow()
      }

  /** Lets the dequeues Spark's commits asked for land (bounded); what does not stays queued for the next run. */
  private def flushDequeues(): Unit =
    try
      if (!dequeuer.flush(OsqueueMicroBatchStream.DequeueFlushTimeoutMs))
        logWarning(s"the dequeues of '${location.identity}' did not finish within " +
          s"${OsqueueMicroBatchStream.DequeueFlushTimeoutMs} ms of the query's end" +
          dequeuer.failedWith.fold("")(e => s" (${e.getMessage})") +
          "; the entries stay queued until the next run of this query dequeues them")
    finally dequeuer.close()

  /**
   * Dequeues through the end of the last micro-batch whose entry in the checkpoint's commit log
   * exists — Spark's own test of "done" on restart — and never further: a batch whose sink commit
   * did not complete has no entry and stays queued for the restart to re-read (docs/adr/0003).
   * Only a reader that took over the queue acks; any failure leaves the batch queued (the next
   * run's first plan, or its stop, dequeues it) and is logged, not thrown over the query's outcome.
   */
  private def dequeueLastCommittedBatch(): Unit =
    if (queue.ownEpoch.isDefined) {
      try checkpoint match {
          case None => logWarning(s"cannot locate the commit log from '$sourceCheckpoint': the last micro-batch " +
              s"stays in '${location.identity}' until the next run of this query")
          case Some(logs) => logs.lastCommittedEnd().foreach { case (batchId, json) =>
              val end = ours(deserializeOffset(json))
              logInfo(s"query ended: dequeuing '${location.identity}' through ${end.nextSequence - 1}, the end of " +
                s"micro-batch $batchId, the last one committed in ${logs.root}")
              commit(end)
            }
        }
      catch {
        case NonFatal(e) => logWarning(
            s"could not dequeue the last committed micro-batch of '${location.identity}' " +
              "when the query ended; it stays queued until the next run of this query", e)
      }
    }

  override def metrics(latestConsumedOffset: Optional[Offset]): JMap[String, String] =
    lastManifest.map(m => metricsOf(m, latestConsumedOffset)).getOrElse(Map.empty[String, String]).asJava

  private def metricsOf(m: ManifestHead, latestConsumedOffset: Optional[Offset]): Map[String, String] = {
    val consumed = Option(latestConsumedOffset.orElse(null)).map(sequenceOf)
      .getOrElse(m.firstSequence)
    val behind = math.max(0L, m.nextSequence - consumed)
    val oldestUnread = entryAt(m, math.max(consumed, m.firstSequence)).flatMap(_.metadata.headOption).map(_.ingestionTimeMs)
    val lagSeconds = oldestUnread.map(t => math.max(0L, clock.nowMillis() - t) / 1000.0).getOrElse(0.0)
    val missing = missingBatches.fold(0L)(_.value.longValue)
    Map(
      "queueLength" -> math.max(0L, m.nextSequence - math.max(consumed, m.firstSequence)).toString, // committed count as consumed
      "batchesBehindLatest" -> behind.toString,
      "numFilesOutstanding" -> behind.toString,
      "lagSeconds" -> f"$lagSeconds%.3f",
      "epoch" -> queue.ownEpoch.map(java.lang.Long.toUnsignedString).getOrElse(""),
      "dataLossEvents" -> (dataLossEvents.get() + missing).toString,
      "missingBatches" -> missing.toString,
      "duplicateCopiesSkipped" -> duplicateCopiesSkipped.get().toString)
  }

  /** The queued entry at `sequence`: from the tail, or its segment (the consumer keeps the last two read). */
  private def entryAt(m: ManifestHead, sequence: Long): Option[osqueue.format.ManifestEntry] =
    if (sequence >= m.nextSequence) None
    else if (sequence >= m.tailFirstSequence) m.tailEntries.find(_.sequence == sequence)
    else queue.segmentTree.leafFor(m, sequence).flatMap(r => queue.readSegment(r).find(_.sequence == sequence))

  override def toString: String = s"OsqueueMicroBatchStream[${location.identity}]"

  private def aheadMessage(start: Long, m: ManifestHead): String =
    s"the checkpoint is at sequence $start but '${location.identity}' has only assigned up to " +
      s"${m.nextSequence - 1}: the queue was reset or recreated"

  private def resetMessage(o: OsqueueSourceOffset, m: ManifestHead): String =
    s"the checkpoint is at sequence ${o.nextSequence} of incarnation ${o.incarnation.getOrElse("?")} of " +
      s"'${location.identity}', but the manifest is incarnation ${Incarnation.of(m.epoch)}: the queue was reset or recreated"

  private def removedMessage(from: Long, through: Long): String =
    s"entries $from to $through of '${location.identity}' were removed before this query read them"

  /** Fails (failOnDataLoss=true), or warns and counts the event `(kind, sequence)` the first time it is seen. */
  private def reportDataLoss(kind: String, sequence: Long, message: String): Unit = {
    if (options.failOnDataLoss) throw OsqueueExceptions.dataLoss(message)
    if (reportedLosses.add((kind, sequence))) {
      dataLossEvents.incrementAndGet()
      logWarning(s"$message (continuing: failOnDataLoss=false)")
    }
  }

  private def startGc(): ScheduledExecutorService = {
    val collector = new GarbageCollector(store, location.manifestPath, location.dataPathPrefix, options.gcGracePeriod,
      clock)
    val ex = Executors.newSingleThreadScheduledExecutor { r =>
      val t = new Thread(r, s"osqueue-gc-${location.identity}"); t.setDaemon(true); t
    }
    val cycle: Runnable = () => {
      try {
        val r = collector.runOnce()
        if (r.deleted.nonEmpty || r.failed.nonEmpty)
          logInfo(s"osqueue GC on '${location.identity}': deleted ${r.deleted.size}, failed ${r.failed.size}")
      } catch { case e: Exception => logWarning(s"osqueue GC cycle failed; retrying in ${options.gcInterval}", e) }
    }
    ex.execute(cycle) // the first cycle now: a run shorter than gcInterval still collects
    val period = options.gcInterval.toMillis
    ex.scheduleWithFixedDelay(cycle, period, period, TimeUnit.MILLISECONDS)
    ex
  }

  private val GcStopWaitSeconds = 10L
}

private[spark] object OsqueueMicroBatchStream {
  /** How long `stop()` waits for the background dequeues to land. */
  val DequeueFlushTimeoutMs = 30000L
}
