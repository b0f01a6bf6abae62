package osqueue.spark

import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.internal.Logging
import org.apache.spark.sql.connector.metric.{CustomMetric, CustomTaskMetric}
import org.apache.spark.sql.connector.write._
import org.apache.spark.sql.connector.write.streaming.{StreamingDataWriterFactory, StreamingWrite}
import org.apache.spark.sql.types.{BinaryType, StringType, StructType}

import osqueue.{Clock, SystemClock}

/**
 * `writeStream.format("osqueue")` and `df.write.format("osqueue").mode("append")`. The input
 * must have `value` (binary or string) and may have `metadata` (binary); any other column is an
 * error naming it, raised before anything is written.
 */
private[spark] final class OsqueueWriteBuilder(info: LogicalWriteInfo, tableOptions: Map[String, String],
    progress: SinkProgressMetrics) extends WriteBuilder {
  override def build(): Write = {
    val options = SinkOptions(OsqueueOptions.normalize(tableOptions), OsqueueStores.sessionStoreOptions())
    new OsqueueWrite(options, OsqueueWriteBuilder.input(info.schema()), info.queryId(), progress)
  }
}

private[spark] object OsqueueWriteBuilder {
  def input(schema: StructType): SinkInput = {
    val names = schema.fieldNames.toSeq
    val valueIndex = names.indexOf("value")
    if (valueIndex < 0) throw OsqueueExceptions.sinkMissingValueColumn(names)
    val extra = names.filterNot(n => n == "value" || n == "metadata")
    if (extra.nonEmpty) throw OsqueueExceptions.sinkUnknownColumns(extra)
    val valueIsString = schema(valueIndex).dataType match {
      case BinaryType => false
      case StringType => true
      case other => throw OsqueueExceptions.sinkColumnType("value", "binary or string", other.simpleString)
    }
    val metadataIndex = Some(names.indexOf("metadata")).filter(_ >= 0)
    metadataIndex.foreach { i =>
      if (schema(i).dataType != BinaryType)
        throw OsqueueExceptions.sinkColumnType("metadata", "binary", schema(i).dataType.simpleString,
          "cast it: col(\"metadata\").cast(\"binary\")")
    }
    SinkInput(valueIndex, valueIsString, metadataIndex)
  }
}

/**
 * `queryId` is Spark's id for this write: persistent across restarts of a streaming query's
 * checkpoint, fresh for each df.write. It is the writer id unless the `writerId` option is given.
 */
private[spark] final class OsqueueWrite(options: SinkOptions, input: SinkInput, queryId: String,
    progress: SinkProgressMetrics, clock: Clock = SystemClock) extends Write with WriteDriverMetrics with Logging {
  private val writerId = options.writerId.getOrElse(queryId)
  private val committer = new OsqueueSinkCommitter(options, writerId, queryId)
  private val commitLatencyMs = new AtomicLong()
  private val replaysSkipped = new AtomicLong()
  /** Set when the write is planned: the writer state asks its tasks to stage their files. */
  @volatile private var stagingPrefix: Option[String] = None

  override def description(): String = s"osqueue sink ${options.location.identity} (writer $writerId)"
  override def toStreaming: StreamingWrite = {
    if (options.writerBatchId.isDefined) throw OsqueueExceptions.batchIdOnStream()
    committer.claimForRun(OsqueueWrite.streamRunId())
    stagingPrefix = committer.stagingRequested()
    new OsqueueStreamingWrite(this, queryId)
  }

  /**
   * A df.write with a `writerId` commits as its `writerBatchId`, so a retried write is skipped
   * (Delta's txnAppId/txnVersion); without one it is a one-off write with nothing to deduplicate.
   */
  override def toBatch: BatchWrite = options.writerId match {
    case Some(id) =>
      val batchId = options.writerBatchId.getOrElse(throw OsqueueExceptions.writerIdNeedsBatchId(id))
      stagingPrefix = committer.stagingRequested()
      new OsqueueBatchWrite(this, batchId, owner = Some(OsqueueExceptions.BatchWriteOwner))
    case None => new OsqueueBatchWrite(this, batchId = 0L, owner = None)
  }
  override def supportedCustomMetrics(): Array[CustomMetric] = OsqueueSinkMetrics.supported
  override protected def driverMetrics(): Array[CustomTaskMetric] = Array(
    OsqueueTaskMetrics.task(OsqueueSinkMetrics.ManifestConflicts, committer.conflicts),
    OsqueueTaskMetrics.task(OsqueueSinkMetrics.CommitLatencyMs, commitLatencyMs.get()),
    OsqueueTaskMetrics.task(OsqueueSinkMetrics.ReplaysSkipped, replaysSkipped.get()))

  private[spark] def factory = OsqueueWriterFactory(options, input, stagingPrefix)

  /** `owner`: what the writer state records (see [[OsqueueSinkCommitter.commit]]). */
  private[spark] def commit(batchId: Long, messages: Array[WriterCommitMessage], owner: Option[String]): Unit = {
    val started = clock.nanoTime()
    val conflictsBefore = committer.conflicts
    val ours = messages.toSeq.collect { case m: OsqueueCommitMessage => m }
    val appended = committer.commit(batchId, ours, owner)
    if (!appended) replaysSkipped.incrementAndGet()
    val latencyMs = (clock.nanoTime() - started) / 1000000
    commitLatencyMs.addAndGet(latencyMs)
    val files = if (appended) ours.flatMap(_.batches) else Nil
    progress.record(batchId, files.size.toLong, files.map(_.records.toLong).sum, files.map(_.bytes).sum,
      committer.conflicts - conflictsBefore, latencyMs, replaySkipped = !appended)
  }

  /**
   * Spark aborts when a task failed or when the driver's `commit` threw. Once a manifest write
   * of the batch was sent, its entries may be in the manifest (the append landed and a later
   * step failed, or its outcome is unknown): the files are kept, and GC deletes only those the
   * manifest does not reference, after its grace period. Otherwise nothing references them.
   * Staged files are never referenced (their copies are): always deleted.
   */
  private[spark] def abort(batchId: Long, messages: Array[WriterCommitMessage]): Unit = {
    val all = messages.toSeq.collect { case m: OsqueueCommitMessage => m }.flatMap(_.batches).map(_.location)
    val (staged, files) = all.partition(committer.isStaged)
    delete(staged)
    if (committer.manifestWriteAttempted(batchId)) {
      logWarning(s"osqueue sink '$writerId': batch $batchId aborted after a manifest write was sent, so its entries " +
        s"may be enqueued; keeping its ${files.size} files (GC deletes any the manifest does not reference): " +
        files.mkString(", "))
    } else delete(files)
  }

  private def delete(files: Seq[String]): Unit = {
    val store = OsqueueStores.open(options.location)
    files.foreach { f =>
      try store.delete(f)
      catch { case scala.util.control.NonFatal(e) => logWarning(s"could not delete '$f' of an aborted write; GC will", e) }
    }
  }
}

private[spark] object OsqueueWrite {
  /**
   * The run id of the streaming query whose micro-batch is being planned. Spark builds a new
   * `Write` for every micro-batch (V2Writes), but the writer must be claimed once per run;
   * `StreamExecution` sets the run id as the job group of its thread, where planning happens.
   */
  def streamRunId(): String =
    org.apache.spark.sql.SparkSession.getActiveSession
      .flatMap(s => Option(s.sparkContext.getLocalProperty("spark.jobGroup.id")))
      .getOrElse("driver-" + ProcessHandle.current().pid())
}

/** Streaming: one manifest commit per epoch (= Spark's batch id), idempotent per (writer id, epoch). */
private[spark] final class OsqueueStreamingWrite(write: OsqueueWrite, queryId: String) extends StreamingWrite with Logging {
  override def createStreamingWriterFactory(info: PhysicalWriteInfo): StreamingDataWriterFactory = write.factory
  override def commit(epochId: Long, messages: Array[WriterCommitMessage]): Unit = {
    OsqueueSinkFaults.at("before-append")
    write.commit(epochId, messages, owner = Some(queryId))
    OsqueueSinkFaults.at("after-append")
  }
  override def abort(epochId: Long, messages: Array[WriterCommitMessage]): Unit = write.abort(epochId, messages)
}

/** `df.write`: one manifest commit for the whole write. */
private[spark] final class OsqueueBatchWrite(write: OsqueueWrite, batchId: Long, owner: Option[String]) extends BatchWrite {
  override def createBatchWriterFactory(info: PhysicalWriteInfo): DataWriterFactory = write.factory
  override def commit(messages: Array[WriterCommitMessage]): Unit = write.commit(batchId, messages, owner)
  override def abort(messages: Array[WriterCommitMessage]): Unit = write.abort(batchId, messages)
}

/**
 * Test-only fault points. With the JVM system property `osqueue.test.crashAt=<point>` the process
 * exits there, as a `kill -9` would (no cleanup, no Spark commit log entry); with
 * `osqueue.test.failAt=<point>` it throws there, so Spark's own failure handling (abort) runs;
 * `osqueue.test.pauseAt=<point>:<ms>` sleeps there (a slow epoch: its files age before the commit).
 */
private[spark] object OsqueueSinkFaults {
  def at(point: String): Unit = {
    sys.props.get("osqueue.test.pauseAt").map(_.split(':')).foreach {
      case Array(p, ms) if p == point => SystemClock.sleepMillis(ms.toLong)
      case _ =>
    }
    if (sys.props.get("osqueue.test.crashAt").contains(point)) Runtime.getRuntime.halt(137)
    if (sys.props.get("osqueue.test.failAt").contains(point))
      throw OsqueueExceptions.injectedFault(point)
  }
}
