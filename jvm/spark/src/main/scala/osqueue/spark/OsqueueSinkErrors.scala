package osqueue.spark

/**
 * Sink conditions that depend on how the write runs (stream or `df.write`) or on the writer
 * state, so [[OsqueueOptions]] cannot check them; one factory each (returned, not thrown).
 */
private[spark] object OsqueueSinkErrors {
  import OsqueueOptions.{WriterBatchId, WriterId}

  /** The owner a `df.write` with a `writerId` records in the writer state. */
  val BatchWriteOwner = "df.write"

  def writerIdNeedsBatchId(writerId: String): IllegalArgumentException =
    new IllegalArgumentException(
      s"option '$WriterId' ('$writerId') on a batch write (df.write) needs option '$WriterBatchId': the id of this " +
        s"write within the writer, increasing from one write to the next. A retry with the same '$WriterId' and " +
        s"'$WriterBatchId' is skipped if that write was already committed; leave '$WriterId' out for a one-off write")

  def batchIdOnStream(): IllegalArgumentException =
    new IllegalArgumentException(
      s"option '$WriterBatchId' applies only to batch writes (df.write); a streaming query commits each " +
        "micro-batch under Spark's batch id")

  /** A writer state another query (or df.write) owns, with batch ids this query would replay. */
  def writerOwnedByAnother(writerId: String, owner: String, lastCommittedBatch: Long, queryId: String): IllegalStateException = {
    val who = if (owner == BatchWriteOwner) "batch writes (df.write)" else s"streaming query $owner"
    new IllegalStateException(
      s"OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY: sink writer '$writerId' belongs to $who, which committed up to batch " +
        s"$lastCommittedBatch; this query ($queryId, another checkpoint) would have its batches up to " +
        s"$lastCommittedBatch skipped as replays, losing their rows. Give this query a new '$WriterId', or restart " +
        "the original query from its own checkpoint.")
  }

  /**
   * Files of an epoch that GC deleted before the commit could enqueue them: they waited longer than
   * the grace period. `staging`: the writer state now makes the replay stage its files.
   */
  def filesExpired(writerId: String, batchId: Long, missing: Seq[String], gracePeriodMs: Long, staging: Boolean): IllegalStateException = {
    val next =
      if (staging) "Restart the query: the replayed batch's tasks write where GC never deletes and its commit copies " +
        "them into the queue, so it commits however slow it is."
      else "Run the write again (nothing of it was enqueued), faster or with a longer grace period."
    new IllegalStateException(
      s"OSQUEUE_SINK_FILES_EXPIRED: sink writer '$writerId', batch $batchId: ${missing.size} file(s) its tasks wrote " +
        s"were deleted by GC before the commit could enqueue them (they were unreferenced and older than the queue's " +
        s"grace period, $gracePeriodMs ms): ${missing.take(5).mkString(", ")}${if (missing.size > 5) ", ..." else ""}. " +
        s"Nothing of this batch was enqueued. $next")
  }

  def streamWriterUsedByBatch(writerId: String, owner: String): IllegalStateException =
    new IllegalStateException(
      s"OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY: sink writer '$writerId' belongs to streaming query $owner; a batch write " +
        s"(df.write) must not share its batch ids. Use another '$WriterId' for batch writes.")
}
