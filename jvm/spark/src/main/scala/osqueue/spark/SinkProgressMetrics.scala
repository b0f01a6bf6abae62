package osqueue.spark

import scala.jdk.CollectionConverters._

/**
 * What the last commit of a streaming sink did, for `StreamingQueryProgress.sink.metrics`:
 * Spark asks the sink's table ([[OsqueueTable]], one per query) when it reports a micro-batch,
 * and never calls `Write.reportDriverMetrics` for streaming writes.
 */
private[spark] final class SinkProgressMetrics {
  @volatile private var last: Map[String, String] = Map.empty

  /** `batches`/`rows`/`bytes`: what the epoch enqueued (0 for a replay that was skipped). */
  def record(batchId: Long, batches: Long, rows: Long, bytes: Long, conflicts: Long, latencyMs: Long,
      replaySkipped: Boolean): Unit =
    last = Map(
      "batchId" -> batchId,
      OsqueueSinkMetrics.BatchesWritten -> batches,
      OsqueueSinkMetrics.RowsWritten -> rows,
      OsqueueSinkMetrics.BytesWritten -> bytes,
      OsqueueSinkMetrics.ManifestConflicts -> conflicts,
      OsqueueSinkMetrics.CommitLatencyMs -> latencyMs,
      OsqueueSinkMetrics.ReplaysSkipped -> (if (replaySkipped) 1L else 0L)).map { case (k, v) => k -> v.toString }

  def snapshot: java.util.Map[String, String] = last.asJava
}
