package osqueue.spark

import org.apache.spark.sql.connector.read.InputPartition
import org.apache.spark.sql.connector.read.streaming.{Offset, PartitionOffset, SupportsRealTimeMode}

import osqueue.format.Incarnation

/**
 * The micro-batch stream plus Spark 4.1's real-time mode. Each real-time batch is one long-running
 * task ([[OsqueueRealTimeReader]]) that follows the manifest from the batch's start and reads each
 * batch file as it lands; Spark ends the task after the trigger's batch duration, and the position
 * it reached (`getOffset`, merged here) is written to the offset log. Acking is the micro-batch
 * path's: Spark commits a batch to the source when it starts the next one, `commit` dequeues only
 * through the last batch file read whole, and `stop` dequeues through the last committed batch.
 * The driver takes over the queue (epoch bump) when it plans the first batch, as in micro-batch mode;
 * the reader stops with the fence error once the manifest shows another consumer's epoch.
 */
private[spark] final class OsqueueRealTimeStream(options: SourceOptions, readers: OsqueueReaderFactory,
    sourceCheckpoint: String) extends OsqueueMicroBatchStream(options, readers, sourceCheckpoint) with SupportsRealTimeMode {

  /** Read limits bound a micro-batch; a real-time batch reads for its duration, so they are refused. */
  override def prepareForRealTimeMode(): Unit = {
    val limits = Seq(OsqueueOptions.MaxBatchesPerTrigger -> options.maxBatchesPerTrigger,
      OsqueueOptions.MinBatchesPerTrigger -> options.minBatchesPerTrigger).collect { case (k, Some(_)) => k }
    if (limits.nonEmpty) throw OsqueueExceptions.optionNotInRealTime(limits.head)
    logInfo(s"osqueue source on '${location.identity}' runs in real-time mode (poll every ${options.pollInterval}, " +
      s"up to ${options.maxPollInterval} when idle)")
  }

  /** The last batch read nothing: the next reader starts at the idle poll rate (no new backoff ramp per batch). */
  @volatile private var lastBatchIdle = false
  @volatile private var lastStart: Option[OsqueueSourceOffset] = None

  override def planInputPartitions(start: Offset): Array[InputPartition] = {
    val startAt = ours(start)
    lastStart = Some(startAt)
    val m = readManifest()
    val (from, delivered) = resumePoint(startAt, m) // data loss is reported as in micro-batch mode
    val entryIndex = if (from == startAt.nextSequence && !fromAnotherIncarnation(startAt, m)) startAt.entryIndex else 0
    Array(OsqueueRealTimePartition(location, queueId, epoch, Incarnation.of(m.epoch), from, entryIndex, delivered,
        options.failOnDataLoss, options.pollInterval.toMillis, options.maxPollInterval.toMillis,
        initialWaitMs = if (lastBatchIdle) options.maxPollInterval.toMillis else options.pollInterval.toMillis))
  }

  /** One reader task: its position is the stream's. */
  override def mergeOffsets(offsets: Array[PartitionOffset]): Offset = offsets match {
    case Array(p: OsqueueRealTimePartitionOffset) =>
      val end = stamped(OsqueueSourceOffset(location.identity, queueId, p.nextSequence, p.delivered, Some(p.incarnation),
          p.entryIndex))
      lastBatchIdle = lastStart.exists(s => s.nextSequence == end.nextSequence && s.entryIndex == end.entryIndex)
      end
    case other => throw OsqueueExceptions.internalError(
        s"expected the position of the one osqueue real-time reader, got ${other.mkString("[", ", ", "]")}")
  }
}
