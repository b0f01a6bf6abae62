package osqueue.spark

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.write.{DataWriter, DataWriterFactory, WriterCommitMessage}
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory

import osqueue.{Clock, SystemClock}
import osqueue.format.{BatchCodec, BatchIntegrity, BatchNames, MetadataItem}

/** One batch file a task wrote: enough for the driver to append its manifest entry. */
/**
 * A file a task wrote: its length (`bytes`) and CRC-32 go into the entry-integrity record the driver
 * writes (docs/format.md §2.1; None: a message without one, the entry gets no record).
 */
private[spark] final case class WrittenBatch(location: String, metadata: IndexedSeq[MetadataItem], records: Int, bytes: Long,
    crc32: Option[Long] = None)

/** A task's files, in the order it wrote them. */
private[spark] final case class OsqueueCommitMessage(partitionId: Int, batches: IndexedSeq[WrittenBatch])
    extends WriterCommitMessage

/**
 * Creates task writers for batch and streaming writes alike. `stagingPrefix`: where the tasks
 * write instead of the data prefix when the writer stages its files ([[OsqueueSinkCommitter]]).
 */
private[spark] final case class OsqueueWriterFactory(options: SinkOptions, input: SinkInput, stagingPrefix: Option[String])
    extends DataWriterFactory with StreamingDataWriterFactory {
  override def createWriter(partitionId: Int, taskId: Long): DataWriter[InternalRow] =
    new OsqueueDataWriter(options, input, partitionId, stagingPrefix)
  override def createWriter(partitionId: Int, taskId: Long, epochId: Long): DataWriter[InternalRow] =
    new OsqueueDataWriter(options, input, partitionId, stagingPrefix)
}

/** Where `value` (binary or string) and the optional `metadata` (binary) sit in the input rows. */
private[spark] final case class SinkInput(valueIndex: Int, valueIsString: Boolean, metadataIndex: Option[Int])

/**
 * Writes a task's rows as batch files under ULID names (a new file each `flushSizeBytes`);
 * consecutive rows with equal metadata share one metadata range. Files are uploaded here and
 * enqueued by the driver's commit; an aborted task deletes what it uploaded.
 */
private[spark] final class OsqueueDataWriter(options: SinkOptions, input: SinkInput, partitionId: Int,
    stagingPrefix: Option[String], clock: Clock = SystemClock) extends DataWriter[InternalRow] with Logging {

  private val store = OsqueueStores.open(options.location)
  private val written = ArrayBuffer.empty[WrittenBatch]
  private val records = ArrayBuffer.empty[Array[Byte]]
  private val metadata = ArrayBuffer.empty[MetadataItem]
  private var lastMetadata: Array[Byte] = _
  private var bufferedBytes = 0L
  private var rowsWritten = 0L
  private var bytesWritten = 0L

  override def write(row: InternalRow): Unit = {
    if (row.isNullAt(input.valueIndex))
      throw OsqueueExceptions.sinkNullValue()
    val value = if (input.valueIsString) row.getUTF8String(input.valueIndex).getBytes else row.getBinary(input.valueIndex)
    val meta = input.metadataIndex.map(i => if (row.isNullAt(i)) Array.emptyByteArray else row.getBinary(i))
      .getOrElse(Array.emptyByteArray)
    if (records.isEmpty || !java.util.Arrays.equals(meta, lastMetadata)) {
      metadata += MetadataItem(records.size, clock.nowMillis(), meta)
      lastMetadata = meta
      bufferedBytes += meta.length
    }
    records += value
    bufferedBytes += value.length
    rowsWritten += 1
    if (bufferedBytes >= options.flushSizeBytes) flush()
  }

  override def commit(): WriterCommitMessage = {
    flush()
    OsqueueCommitMessage(partitionId, written.toIndexedSeq)
  }

  override def abort(): Unit = {
    written.foreach { b =>
      try store.delete(b.location)
      catch { case NonFatal(e) => logWarning(s"could not delete '${b.location}' of an aborted task; GC will", e) }
    }
    written.clear()
  }

  override def close(): Unit = ()

  override def currentMetricsValues(): Array[CustomTaskMetric] = Array(
    OsqueueTaskMetrics.task(OsqueueSinkMetrics.RowsWritten, rowsWritten),
    OsqueueTaskMetrics.task(OsqueueSinkMetrics.BytesWritten, bytesWritten),
    OsqueueTaskMetrics.task(OsqueueSinkMetrics.BatchesWritten, written.size.toLong))

  private def flush(): Unit = if (records.nonEmpty) {
    val bytes = BatchCodec.encode(records.toIndexedSeq, options.compression)
    val key = BatchNames.newKey(stagingPrefix.getOrElse(options.location.dataPathPrefix), clock.nowMillis())
    store.put(key, bytes)
    OsqueueSinkFaults.at("during-task-write")
    written += WrittenBatch(key, metadata.toIndexedSeq, records.size, bytes.length, Some(BatchIntegrity.crc32(bytes)))
    bytesWritten += bytes.length
    records.clear(); metadata.clear(); bufferedBytes = 0
  }
}

/** Sink metrics: task-level counts and the driver's manifest commit. */
private[spark] object OsqueueSinkMetrics {
  val RowsWritten = "rowsWritten"
  val BytesWritten = "bytesWritten"
  val BatchesWritten = "batchesWritten"
  val ManifestConflicts = "manifestConflicts"
  val CommitLatencyMs = "commitLatencyMs"
  val ReplaysSkipped = "replaysSkipped"

  def supported: Array[org.apache.spark.sql.connector.metric.CustomMetric] = Array(
    new RowsWrittenMetric, new BytesWrittenMetric, new BatchesWrittenMetric,
    new ManifestConflictsMetric, new CommitLatencyMetric, new ReplaysSkippedMetric)
}

// Spark instantiates metric classes by name (no-arg constructors): one tiny class per metric.
private[spark] class RowsWrittenMetric extends OsqueueSumMetric(OsqueueSinkMetrics.RowsWritten, "rows written")
private[spark] class BytesWrittenMetric extends OsqueueSumMetric(OsqueueSinkMetrics.BytesWritten, "batch bytes written")
private[spark] class BatchesWrittenMetric extends OsqueueSumMetric(OsqueueSinkMetrics.BatchesWritten, "batch files written")
private[spark] class ManifestConflictsMetric
    extends OsqueueSumMetric(OsqueueSinkMetrics.ManifestConflicts, "manifest write conflicts")
private[spark] class CommitLatencyMetric
    extends OsqueueSumMetric(OsqueueSinkMetrics.CommitLatencyMs, "manifest commit latency (ms)")
private[spark] class ReplaysSkippedMetric
    extends OsqueueSumMetric(OsqueueSinkMetrics.ReplaysSkipped, "replayed epochs skipped")
