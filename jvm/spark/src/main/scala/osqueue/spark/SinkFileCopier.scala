package osqueue.spark

import org.apache.spark.sql.SparkSession

import osqueue.SystemClock
import osqueue.format.BatchNames

/**
 * Copies sink batch files under fresh names on the executors, in one Spark job launched by the
 * driver's commit: a stale task file (older than half the grace period, docs/format.md §6) or a
 * staged one (see [[OsqueueSinkCommitter]]). The driver never moves file bytes itself.
 */
private[spark] object SinkFileCopier {
  /** For each source, in order, the key of its fresh copy under the data prefix; None if the source is gone. */
  def onExecutors(options: SinkOptions, sources: IndexedSeq[String]): IndexedSeq[Option[String]] = {
    if (sources.isEmpty) return IndexedSeq.empty
    val sc = SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
      .getOrElse(throw OsqueueExceptions.internalError("the osqueue sink's commit runs without an active Spark session"))
      .sparkContext
    val slices = math.max(1, math.min(sources.size, sc.defaultParallelism))
    sc.parallelize(sources.zipWithIndex, slices)
      .map { case (source, i) => (i, copy(options, source)) }
      .collect().sortBy(_._1).map(_._2).toIndexedSeq
  }

  /** One copy (also the last resort of a commit whose manifest write outlasted half the grace period). */
  def copy(options: SinkOptions, source: String): Option[String] = {
    val store = OsqueueStores.open(options.location)
    store.get(source).map { o =>
      val key = BatchNames.newKey(options.location.dataPathPrefix, SystemClock.nowMillis())
      store.put(key, o.bytes)
      key
    }
  }
}
