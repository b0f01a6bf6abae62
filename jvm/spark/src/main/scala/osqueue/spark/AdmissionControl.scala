package osqueue.spark

import org.apache.spark.sql.connector.read.streaming.{CompositeReadLimit, ReadLimit, ReadMaxFiles, ReadMinRows}

/**
 * How much the next micro-batch may read (Spark's admission control): `maxBatchesPerTrigger` caps
 * it in batch files, `minBatchesPerTrigger` holds it until that many are queued or
 * `maxTriggerDelay` has passed since the last micro-batch that read something, and
 * Trigger.AvailableNow reads up to the queue's end when the run began, never waiting.
 */
private[spark] final class AdmissionControl(options: SourceOptions, startMs: Long) {
  @volatile private var availableNowTarget: Option[Long] = None
  @volatile private var lastTriggerMs = startMs

  def defaultReadLimit: ReadLimit = {
    val limits = options.maxBatchesPerTrigger.map(ReadLimit.maxFiles).toSeq ++
      options.minBatchesPerTrigger.map(ReadLimit.minRows(_, options.maxTriggerDelay.toMillis)).toSeq
    limits match {
      case Seq() => ReadLimit.allAvailable()
      case Seq(one) => one
      case many => ReadLimit.compositeLimit(many.toArray)
    }
  }

  /** Trigger.AvailableNow: read up to `target`, the queue's next sequence when the run began. */
  def availableNowUpTo(target: Long): Unit = availableNowTarget = Some(target)

  def availableNow: Boolean = availableNowTarget.isDefined

  /**
   * The end of a micro-batch starting at `start` when the queue's next sequence is `next`, or None
   * to wait for more (the minimum not reached and `maxTriggerDelay` not passed at `nowMs`).
   */
  def end(start: Long, next: Long, limit: ReadLimit, nowMs: Long): Option[Long] = {
    val available = math.max(start, availableNowTarget.fold(next)(math.min(_, next)))
    val limits = limit match {
      case c: CompositeReadLimit => c.getReadLimits.toSeq
      case l => Seq(l)
    }
    val end = limits.foldLeft(available) {
      case (e, f: ReadMaxFiles) => math.min(e, start + f.maxFiles())
      case (e, _) => e
    }
    val waitForMore = availableNowTarget.isEmpty && limits.exists {
      case min: ReadMinRows => available - start < min.minRows() && nowMs - lastTriggerMs < min.maxTriggerDelayMs()
      case _ => false
    }
    if (waitForMore) None else Some(end)
  }

  /** A micro-batch [start, end) was planned at `nowMs`: a non-empty one restarts the `maxTriggerDelay` wait. */
  def planned(start: Long, end: Long, nowMs: Long): Unit = if (end > start) lastTriggerMs = nowMs
}
