package osqueue.spark

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.internal.Logging

import osqueue.format.{Incarnation, ManifestHead}

/**
 * The source's one place for data loss, as Kafka's `reportDataLoss`: with failOnDataLoss an
 * `OSQUEUE_DATA_LOSS` error, else a warning and one count per event `(kind, sequence)`, however
 * many driver calls see that event. The messages name the queue and the sequences.
 */
private[spark] final class DataLossReporter(queue: String, failOnDataLoss: Boolean) extends Logging {
  private val events = new AtomicLong()
  private val dropped = new AtomicLong()
  /** Events already reported, so one event seen by several calls is counted once. */
  private val reported = ConcurrentHashMap.newKeySet[(String, Long)]()

  /** The events reported so far (failOnDataLoss=false). */
  def count: Long = events.get()

  /** The entries the [[DataLossReporter.Removed]] events lost (failOnDataLoss=false): retention cuts, exact. */
  def droppedEntries: Long = dropped.get()

  /**
   * Fails (failOnDataLoss=true), or warns and counts the event `(kind, sequence)` the first time it is seen,
   * with the `entries` it lost (0 where that is not known).
   */
  def report(kind: String, sequence: Long, message: String, entries: Long = 0L): Unit = {
    if (failOnDataLoss) throw OsqueueExceptions.dataLoss(message)
    if (reported.add((kind, sequence))) {
      events.incrementAndGet()
      val _ = dropped.addAndGet(entries)
      logWarning(s"$message (continuing: failOnDataLoss=false)")
    }
  }

  def aheadMessage(start: Long, m: ManifestHead): String =
    s"the checkpoint is at sequence $start but '$queue' has only assigned up to " +
      s"${m.nextSequence - 1}: the queue was reset or recreated"

  def resetMessage(o: OsqueueSourceOffset, m: ManifestHead): String =
    s"the checkpoint is at sequence ${o.nextSequence} of incarnation ${o.incarnation.getOrElse("?")} of " +
      s"'$queue', but the manifest is incarnation ${Incarnation.of(m.epoch)}: the queue was reset or recreated"

  def removedMessage(from: Long, through: Long): String =
    s"entries $from to $through of '$queue' were removed before this query read them " +
      s"(${through - from + 1} entries, e.g. by a retention cut)"
}

private[spark] object DataLossReporter {
  /** The kinds of event: a checkpoint from another incarnation, ahead of the queue, or behind its first entry. */
  val Reset = "reset"
  val Ahead = "ahead"
  val Removed = "removed"
}
