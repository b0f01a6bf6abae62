package osqueue.spark

import java.util.{Optional, Map => JMap}
import java.util.concurrent.atomic.AtomicLong

import scala.jdk.CollectionConverters._

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReaderFactory}
import org.apache.spark.sql.connector.read.streaming._
import org.apache.spark.util.LongAccumulator

import osqueue.{Clock, SystemClock}
import osqueue.format.{EntryTag, Incarnation, ManifestHead}

/**
 * Reads a queue as a micro-batch stream: DSv2 glue over its parts. Offsets are manifest
 * sequences; Spark's checkpoint is the only resume point. The first offset request takes the queue
 * over ([[DriverQueue]]: epoch bump, then the [[GcSchedule]] starts), after Spark has handed over
 * the checkpoint's offsets, so a query refused for a foreign checkpoint fences nobody. `commit(end)`
 * hands the end to the driver queue's background dequeuer, so nothing is dequeued before Spark has
 * committed the batch; when the query ends, `stop()` dequeues through its last committed batch,
 * read from the checkpoint's commit log (docs/adr/0003). A checkpoint ahead of, behind or from
 * another incarnation of the queue goes to the [[DataLossReporter]]. The driver reads only the
 * manifest head and walks a segmented queue's segments a few at a time ([[OsqueuePlanner]], its
 * last plan kept in a [[PlanCache]]); executors read the segment slices and the batch files.
 * [[AdmissionControl]] sizes each micro-batch.
 *
 * `sourceCheckpoint` is the location Spark gives `toMicroBatchStream`: `<checkpoint>/sources/<index>`.
 */
private[spark] class OsqueueMicroBatchStream(protected val options: SourceOptions, readers: OsqueueReaderFactory,
    sourceCheckpoint: String, clock: Clock = SystemClock)
    extends MicroBatchStream with SupportsTriggerAvailableNow with ReportsSourceMetrics with Logging {

  protected val location: QueueLocation = options.location
  private val store = OsqueueStores.open(location)
  protected val queueId: String = OsqueueStores.queueId(store, location, create = true, clock).getOrElse(
    throw OsqueueExceptions.queueIdUnavailable(location.identity))
  private val dataLoss = new DataLossReporter(location.identity, options.failOnDataLoss)
  private val gc = GcSchedule.forSource(store, options, clock)
  private val queue = new DriverQueue(store, location, options.pollInterval, options.maxPollInterval, dataLoss, clock,
    onTakeOver = _ => gc.foreach(_.start()), options.subscription, options.createSubscription)
  private val plans = new PlanCache[OsqueuePlanner.Plan]
  private val admission = new AdmissionControl(options, clock.nowMillis())
  private val duplicateCopiesSkipped = new AtomicLong()
  private val session = SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
  /** Batch files the executors found missing and skipped (failOnDataLoss=false), summed on the driver. */
  protected val missingBatches: Option[LongAccumulator] =
    session.map(_.sparkContext.longAccumulator(s"osqueue missing batches ${location.identity}"))
  /** Batch files the executors found not matching their entry's integrity record and skipped (failOnDataLoss=false). */
  protected val corruptBatches: Option[LongAccumulator] =
    session.map(_.sparkContext.longAccumulator(s"osqueue corrupt batches ${location.identity}"))
  private val checkpoint = session.flatMap(SparkCheckpointLogs.forSource(_, sourceCheckpoint))

  /** The epoch this stream took the queue over at (on first use). */
  protected def epoch: Long = queue.epoch

  protected def offset(next: Long, m: ManifestHead): OsqueueSourceOffset =
    stamped(OsqueueSourceOffset(location.identity, queueId, next, incarnation = Some(Incarnation.of(m.epoch))))

  /** `o` naming the reader that made it: this stream's subscription and its incarnation (docs/adr/0005). */
  protected def stamped(o: OsqueueSourceOffset): OsqueueSourceOffset =
    o.copy(subscription = options.subscription, subscriptionIncarnation = queue.subscriptionIncarnation)

  /** The position is from another incarnation of the manifest (docs/format.md §5.2): the queue was reset. */
  protected def fromAnotherIncarnation(o: OsqueueSourceOffset, m: ManifestHead): Boolean =
    o.incarnation.exists(_ != Incarnation.of(m.epoch))

  /** After a restart Spark hands back offsets read from the checkpoint as `SerializedOffset`s. */
  protected def ours(o: Offset): OsqueueSourceOffset = o match {
    case ours: OsqueueSourceOffset => ours
    case other => deserializeOffset(other.json).asInstanceOf[OsqueueSourceOffset]
  }

  protected def readManifest(): ManifestHead = queue.read()

  /** The queue's first entry; with a reader record (a subscription's), where that reader stopped. */
  override def initialOffset(): Offset = {
    val m = readManifest()
    offset(queue.readerNext.fold(m.firstSequence)(n => math.min(math.max(n, m.firstSequence), m.nextSequence)), m)
  }

  /** The queue id decides; the URI differs for the same queue (`s3://` and `s3a://`, `/dir` and `file:/dir`). */
  override def deserializeOffset(json: String): Offset = {
    val o = OsqueueSourceOffset.parse(json)
    if (o.queueId != queueId) throw OsqueueExceptions.foreignCheckpoint(o.queue, o.queueId, location.identity, queueId)
    if (o.subscription != options.subscription)
      throw OsqueueExceptions.foreignSubscription(o.subscription, options.subscription, location.identity)
    o
  }

  override def latestOffset(): Offset =
    throw OsqueueExceptions.internalError("latestOffset() called: latestOffset(start, limit) is used instead (SupportsAdmissionControl)")

  override def getDefaultReadLimit: ReadLimit = admission.defaultReadLimit

  /** Spark calls this before it reads the checkpoint: the target is read without taking over the queue. */
  override def prepareForTriggerAvailableNow(): Unit = {
    val target = queue.peek().nextSequence
    admission.availableNowUpTo(target)
    logInfo(s"Trigger.AvailableNow: reading '${location.identity}' up to sequence $target")
  }

  /** The end offset of the next micro-batch: everything available, capped by the read limit. */
  override def latestOffset(startOffset: Offset, limit: ReadLimit): Offset = {
    val startAt = ours(startOffset)
    val m = queue.poll(always = admission.availableNow)
    val (start, delivered) = resumePoint(startAt, m)
    val now = clock.nowMillis()
    admission.end(start, m.nextSequence, limit, now) match {
      // A start inside a batch file (left by a real-time batch) with nothing past that file stays put:
      // an end at the same sequence would move the position back to the file's first entry.
      case Some(end) if !(startAt.entryIndex > 0 && end <= startAt.nextSequence) =>
        admission.planned(start, end, now)
        val skip = if (start == startAt.nextSequence) startAt.entryIndex else 0
        val endAt = stamped(OsqueueSourceOffset(location.identity, queueId, end, planOf(m, start, end, delivered, skip).delivered,
            Some(Incarnation.of(m.epoch))))
        plannedWith = Some((endAt, m))
        endAt
      case _ => startOffset
    }
  }

  /**
   * Where the next micro-batch starts reading, and the sink-copy state to read with. A checkpoint
   * ahead of the queue (reset or recreated) or behind its first entry is data loss: an error, or
   * with failOnDataLoss=false one warning and reading on from the queue's first entry.
   */
  protected def resumePoint(startAt: OsqueueSourceOffset, m: ManifestHead): (Long, EntryTag.Delivered) = {
    val start = startAt.nextSequence
    val subscriptionNow = queue.subscriptionIncarnation
    if (startAt.subscriptionIncarnation.exists(i => subscriptionNow.exists(_ != i))) {
      val from = queue.readerNext.fold(m.firstSequence)(n => math.min(math.max(n, m.firstSequence), m.nextSequence))
      dataLoss.report(DataLossReporter.Reset, start,
        s"subscription '${options.subscription.getOrElse("")}' of '${location.identity}' was dropped and recreated since the " +
          s"checkpoint (incarnation ${startAt.subscriptionIncarnation.get}, now ${subscriptionNow.get}); continuing at its position $from")
      (from, EntryTag.Delivered.Empty)
    } else if (fromAnotherIncarnation(startAt, m)) {
      dataLoss.report(DataLossReporter.Reset, start,
        dataLoss.resetMessage(startAt, m) + s"; continuing at its first entry ${m.firstSequence}")
      (m.firstSequence, EntryTag.Delivered.Empty)
    } else if (start > m.nextSequence) {
      dataLoss.report(DataLossReporter.Ahead, start,
        dataLoss.aheadMessage(start, m) + s"; continuing at its first entry ${m.firstSequence}")
      queue.ignoreCommitOf(start)
      (m.firstSequence, EntryTag.Delivered.Empty) // a new queue: the old writers' copies mean nothing
    } else if (start < m.firstSequence) {
      dataLoss.report(DataLossReporter.Removed, start, dataLoss.removedMessage(start, m.firstSequence - 1),
        m.firstSequence - start)
      (m.firstSequence, startAt.delivered)
    } else (start, startAt.delivered)
  }

  override def reportLatestOffset(): Offset = queue.last.map(m => offset(m.nextSequence, m)).orNull

  /**
   * The end offset latestOffset returned last and the head it planned it from: planInputPartitions of
   * that batch plans from the same head (no second manifest read, a round trip off every micro-batch;
   * the plan is the one [[PlanCache]] kept). A batch replayed from the offset log after a restart,
   * or any other end, reads the head.
   */
  @volatile private var plannedWith: Option[(OsqueueSourceOffset, ManifestHead)] = None

  /**
   * The range planned last and its partitions. Spark asks once per copy of its scan node (physical
   * planning, the plan's description for the UI, the RDD; a copy does not keep the lazily planned
   * partitions): a later ask for the same range gets the same partitions, with no manifest read
   * and nothing reported twice.
   */
  @volatile private var lastPlanned: Option[((OsqueueSourceOffset, OsqueueSourceOffset), Array[InputPartition])] = None

  override def planInputPartitions(start: Offset, end: Offset): Array[InputPartition] = {
    val range = (ours(start), ours(end))
    lastPlanned.collect { case (r, partitions) if r == range => partitions }.getOrElse {
      val partitions = planRange(range._1, range._2)
      lastPlanned = Some(range -> partitions)
      partitions
    }
  }

  private def planRange(startAt: OsqueueSourceOffset, endAt: OsqueueSourceOffset): Array[InputPartition] = {
    val to = endAt.nextSequence
    val m = plannedWith.collect { case (o, head) if o == endAt => head }.getOrElse(readManifest())
    plannedWith = None
    // A batch planned against an earlier incarnation (replayed after a reset) reads nothing: its entries are gone.
    if (fromAnotherIncarnation(endAt, m)) {
      dataLoss.report(DataLossReporter.Reset, to, dataLoss.resetMessage(endAt, m))
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
        if (from > m.nextSequence) dataLoss.report(DataLossReporter.Ahead, from, dataLoss.aheadMessage(from, m))
        val firstPresent = Some(math.max(from, m.firstSequence)).filter(_ < math.min(to, m.nextSequence)).getOrElse(to)
        if (firstPresent > from && from < m.nextSequence)
          dataLoss.report(DataLossReporter.Removed, from, dataLoss.removedMessage(from, firstPresent - 1),
            firstPresent - from)
        (from, startAt.delivered)
      }
    // A start inside a batch file (a real-time batch ended there): its first entries were read.
    val skip = if (from == startAt.nextSequence) startAt.entryIndex else 0
    val plan = planOf(m, from, to, delivered, skip)
    duplicateCopiesSkipped.addAndGet(plan.copiesSkipped)
    plan.partitions
  }

  private def planOf(m: ManifestHead, from: Long, to: Long, delivered: EntryTag.Delivered, skip: Int): OsqueuePlanner.Plan =
    plans.planOf(m, from, to, delivered, skip)(queue.plan(m, from, to, delivered, options.failOnDataLoss, skip))

  override def createReaderFactory(): PartitionReaderFactory =
    readers.copy(missingBatches = missingBatches, corruptBatches = corruptBatches)

  /** Spark committed the batch ending at `end`: the driver queue dequeues through `end - 1`, off Spark's path. */
  override def commit(end: Offset): Unit = queue.commit(ours(end))

  /**
   * The query ended (AvailableNow or Once finished, `query.stop()`, a failure): Spark commits a
   * batch to the source only when it plans the next one, so the driver queue dequeues the last
   * batch the checkpoint's commit log holds and flushes its dequeues, then GC stops (a cycle
   * already running, such as the one at start, may finish).
   */
  override def stop(): Unit =
    try queue.stop(() => lastCommittedEnd())
    finally gc.foreach(_.stop())

  /** The end of the last micro-batch in the checkpoint's commit log (docs/adr/0003). */
  private def lastCommittedEnd(): Option[OsqueueSourceOffset] = checkpoint match {
    case None =>
      logWarning(s"cannot locate the commit log from '$sourceCheckpoint': the last micro-batch " +
        s"stays in '${location.identity}' until the next run of this query")
      None
    case Some(logs) => logs.lastCommittedEnd().map { case (batchId, json) =>
        val end = ours(deserializeOffset(json))
        logInfo(s"query ended: dequeuing '${location.identity}' through ${end.nextSequence - 1}, the end of " +
          s"micro-batch $batchId, the last one committed in ${logs.root}")
        end
      }
  }

  override def metrics(latestConsumedOffset: Optional[Offset]): JMap[String, String] =
    queue.last.map { m =>
      val consumed = Option(latestConsumedOffset.orElse(null)).map(ours(_).nextSequence)
      val oldestUnreadMs = queue.entryAt(m, SourceProgressMetrics.oldestUnread(m, consumed))
        .flatMap(_.metadata.headOption).map(_.ingestionTimeMs)
      SourceProgressMetrics(m, consumed, oldestUnreadMs, clock.nowMillis(), queue.ownEpoch, dataLoss.count,
        missingBatches.fold(0L)(_.value.longValue), duplicateCopiesSkipped.get(), corruptBatches.fold(0L)(_.value.longValue),
        dataLoss.droppedEntries, options.subscription, queue.ackWrites)
    }.getOrElse(Map.empty[String, String]).asJava

  override def toString: String = s"OsqueueMicroBatchStream[${location.identity}]"
}
