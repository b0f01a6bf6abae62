package osqueue.spark

/**
 * Runtime conditions of the connector, one factory each (returned, not thrown). Bad options are
 * `IllegalArgumentException`s raised by [[OsqueueOptions]] at `load()`/`start()`.
 */
private[spark] object OsqueueExceptions {
  private val dataLossHint =
    "If you want the query to continue anyway, set the option 'failOnDataLoss' to false " +
      "(the entries are then skipped, each event is logged once and counted in the 'dataLossEvents' source metric; " +
      "a checkpoint ahead of a reset queue continues at the queue's first entry)."

  def dataLoss(message: String): IllegalStateException =
    new IllegalStateException(s"OSQUEUE_DATA_LOSS: $message. $dataLossHint")

  /** Queues are told apart by id (`<manifest>.queue-id`); the URIs only make the message readable. */
  def foreignCheckpoint(checkpointQueue: String, checkpointId: String, queue: String, queueId: String): IllegalStateException = {
    val why =
      if (checkpointQueue == queue) s"The queue at '$queue' was recreated since the checkpoint was written (its id changed)"
      else "The queue was recreated or the checkpoint belongs to another query"
    new IllegalStateException(
      s"OSQUEUE_FOREIGN_CHECKPOINT: the checkpoint's offsets belong to queue '$checkpointQueue' (id $checkpointId), " +
        s"but this query reads '$queue' (id $queueId). $why: use a new checkpoint location for this queue.")
  }

  def badOffset(json: String, why: String): IllegalStateException =
    new IllegalStateException(s"OSQUEUE_BAD_OFFSET: cannot read offset '$json' from the checkpoint: $why")

  def userSchema(): IllegalArgumentException =
    new IllegalArgumentException(
      "the osqueue source has a fixed schema (value, sequence, index, location, ingestionTime, metadata); " +
        "do not call .schema(...) on an osqueue read")
}
