package osqueue.spark

import scala.util.{Success, Try}

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.streaming.Offset

/**
 * A streaming query's checkpoint, read through Spark's own log classes (`CommitLog`,
 * `OffsetSeqLog`): the ones Spark itself trusts on restart, with its version checks and its
 * checkpoint file manager (HDFS, S3A, checksummed files). The source asks it one thing when the
 * query ends: the last micro-batch whose commit-log entry exists, and this source's end offset
 * in it (docs/adr/0003). Read-only: nothing here writes to the checkpoint.
 */
private[spark] final class SparkCheckpointLogs private (session: SparkSession, val root: Path, val sourceIndex: Int) {

  /**
   * `(batchId, end offset JSON)` of the last micro-batch Spark committed (`<root>/commits/<id>`
   * exists), the offset taken from `<root>/offsets/<id>` at this source's index; None before the
   * first commit, or when that entry has no offset for this source.
   */
  def lastCommittedEnd(): Option[(Long, String)] = {
    import SparkCheckpointLogs._
    latestBatchId(open("CommitLog", session, new Path(root, "commits"))).flatMap { batchId =>
      sourceOffset(open("OffsetSeqLog", session, new Path(root, "offsets")), batchId, sourceIndex)
        .map(json => (batchId, json))
    }
  }
}

private[spark] object SparkCheckpointLogs {

  /**
   * `toMicroBatchStream` is given `<checkpoint root>/sources/<source index>`, and the index is the
   * source's position in each offset-log entry (Spark 3.5 to 4.1). None for any other shape.
   */
  def forSource(session: SparkSession, sourceLocation: String): Option[SparkCheckpointLogs] =
    Try(new Path(sourceLocation)).toOption.flatMap { path =>
      val index = Try(path.getName.toInt).toOption.filter(_ >= 0)
      val sources = Option(path.getParent).filter(_.getName == "sources")
      for (i <- index; s <- sources; root <- Option(s.getParent)) yield new SparkCheckpointLogs(session, root, i)
    }

  /**
   * The one Spark-line-specific part: the package of the log classes. Spark 4.1 moved them from
   * `execution.streaming` to `execution.streaming.checkpointing`; their `(SparkSession, String)`
   * constructor (4.2 adds a Boolean with a default), `getLatest()`, `get(batchId)` and
   * `offsets` of the offset-log entry are the same in 3.5, 4.0, 4.1 and 4.2. Looked up by name so that one source file serves every line.
   */
  private val LogPackages = Seq(
    "org.apache.spark.sql.execution.streaming.checkpointing", // Spark 4.1+
    "org.apache.spark.sql.execution.streaming") // Spark 3.5, 4.0

  private def open(className: String, session: SparkSession, dir: Path): AnyRef = {
    val loader = Option(Thread.currentThread.getContextClassLoader).getOrElse(getClass.getClassLoader)
    val cls = LogPackages.iterator.map(p => Try(Class.forName(s"$p.$className", true, loader)))
      .collectFirst { case Success(c) => c }
      .getOrElse(throw OsqueueExceptions.internalError(
          s"Spark's $className is in none of ${LogPackages.mkString(", ")} (Spark ${org.apache.spark.SPARK_VERSION})"))
    // Spark 4.2 added a third parameter, `metadataCacheEnabled: Boolean = false`: passed as its default.
    val constructors = cls.getConstructors.toSeq
    def takes(c: java.lang.reflect.Constructor[_], rest: Class[_]*): Boolean = {
      val params = c.getParameterTypes
      params.length == 2 + rest.length && params(0).isInstance(session) && params(1) == classOf[String] &&
      params.drop(2).sameElements(rest)
    }
    constructors.find(takes(_)).map(_.newInstance(session, dir.toString))
      .orElse(constructors.find(takes(_, java.lang.Boolean.TYPE)).map(_.newInstance(session, dir.toString, java.lang.Boolean.FALSE)))
      .getOrElse(throw OsqueueExceptions.internalError(s"no constructor ${cls.getName}(SparkSession, String[, Boolean])"))
      .asInstanceOf[AnyRef]
  }

  /** `HDFSMetadataLog.getLatest(): Option[(Long, T)]`: the highest batch id in the log. */
  private def latestBatchId(log: AnyRef): Option[Long] =
    log.getClass.getMethod("getLatest").invoke(log).asInstanceOf[Option[(Any, Any)]].map {
      case (id: java.lang.Long, _) => id.longValue
      case (other, _) => throw OsqueueExceptions.internalError(s"unexpected batch id $other in ${log.getClass.getName}")
    }

  /** `OffsetSeqLog.get(batchId): Option[OffsetSeq]`, then `offsets(sourceIndex): Option[Offset]`, as JSON. */
  private def sourceOffset(log: AnyRef, batchId: Long, sourceIndex: Int): Option[String] =
    log.getClass.getMethod("get", java.lang.Long.TYPE).invoke(log, Long.box(batchId)).asInstanceOf[Option[AnyRef]]
      .flatMap { seq =>
        val offsets = seq.getClass.getMethod("offsets").invoke(seq).asInstanceOf[scala.collection.Seq[Option[Offset]]]
        if (sourceIndex < offsets.length) offsets(sourceIndex).map(_.json) else None
      }
}
