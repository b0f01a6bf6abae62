package osqueue.spark

import osqueue.format.ManifestHead

/**
 * The source's metrics in a query's progress (`ReportsSourceMetrics`), from the manifest head last
 * read and the position Spark last consumed: how far behind the query is and how old the oldest
 * unread entry is, the reader's epoch, and the data-loss counts of driver and executors. Per reader
 * (docs/adr/0005): which subscription it is (`subscription`, "" for the unnamed consumer), the position
 * its record holds in the head (`subscriptionAcked`: what its acks made durable; "" without a record),
 * the entries from there to the queue's end (`subscriptionLag`), and the manifest writes its acks made
 * (`ackWrites`: commits coalesce, so fewer than the micro-batches).
 */
private[spark] object SourceProgressMetrics {
  /**
   * `consumed`: the next sequence Spark will read (None: nothing consumed yet, the queue's first
   * entry); `oldestUnreadMs`: the ingestion time of the entry there, if queued.
   */
  def apply(m: ManifestHead, consumed: Option[Long], oldestUnreadMs: Option[Long], nowMs: Long, epoch: Option[Long],
      dataLossEvents: Long, missingBatches: Long, duplicateCopiesSkipped: Long, corruptBatches: Long = 0,
      droppedEntries: Long = 0, subscription: Option[String] = None, ackWrites: Long = 0): Map[String, String] = {
    val next = consumed.getOrElse(m.firstSequence)
    val behind = math.max(0L, m.nextSequence - next)
    val lagSeconds = oldestUnreadMs.map(t => math.max(0L, nowMs - t) / 1000.0).getOrElse(0.0)
    val acked = subscription match {
      case Some(name) => m.subscription(name).map(_.next)
      case None => m.sections.unnamedReader.map(_.next)
    }
    Map(
      "queueLength" -> math.max(0L, m.nextSequence - math.max(next, m.firstSequence)).toString, // committed count as consumed
      "batchesBehindLatest" -> behind.toString,
      "numFilesOutstanding" -> behind.toString,
      "lagSeconds" -> f"$lagSeconds%.3f",
      "epoch" -> epoch.map(java.lang.Long.toUnsignedString).getOrElse(""),
      "dataLossEvents" -> (dataLossEvents + missingBatches + corruptBatches).toString,
      "missingBatches" -> missingBatches.toString,
      "corruptBatches" -> corruptBatches.toString,
      "droppedEntries" -> droppedEntries.toString, // entries removed before they were read (retention), exact
      "duplicateCopiesSkipped" -> duplicateCopiesSkipped.toString,
      "subscription" -> subscription.getOrElse(""),
      "subscriptionAcked" -> acked.fold("")(_.toString),
      "subscriptionLag" -> acked.fold("")(a => math.max(0L, m.nextSequence - math.max(a, m.firstSequence)).toString),
      "ackWrites" -> ackWrites.toString)
  }

  /** Where the oldest unread entry is: the consumed position, or the queue's first entry if later. */
  def oldestUnread(m: ManifestHead, consumed: Option[Long]): Long = math.max(consumed.getOrElse(m.firstSequence), m.firstSequence)
}
