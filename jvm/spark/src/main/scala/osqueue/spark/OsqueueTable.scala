package osqueue.spark

import java.util

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.connector.catalog.{SupportsRead, SupportsWrite, Table, TableCapability}
import org.apache.spark.sql.connector.metric.CustomMetric
import org.apache.spark.sql.connector.read.{Batch, Scan, ScanBuilder, SupportsPushDownRequiredColumns}
import org.apache.spark.sql.connector.read.streaming.{MicroBatchStream, ReportsSinkMetrics}
import org.apache.spark.sql.connector.write.{LogicalWriteInfo, WriteBuilder}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * A queue as a Spark table: readable as a stream and as a batch, writable by appends. Reads have
 * a fixed schema (a user schema is refused); writes take `value` and optional `metadata`.
 */
private[spark] class OsqueueTable(tableOptions: Map[String, String], givenSchema: Option[StructType])
    extends Table with SupportsRead with SupportsWrite with ReportsSinkMetrics {
  /** Filled by the writes this table builds; a streaming query keeps one table for its lifetime. */
  private val sinkProgress = new SinkProgressMetrics

  override def name(): String = s"osqueue[${tableOptions.getOrElse(OsqueueOptions.Path, "?")}]"
  override def schema(): StructType = OsqueueSchema.schema
  override def capabilities(): util.Set[TableCapability] =
    Set(TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_READ, TableCapability.STREAMING_WRITE,
      TableCapability.BATCH_WRITE, TableCapability.ACCEPT_ANY_SCHEMA).asJava

  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = {
    // For writes Spark hands getTable the DataFrame's schema; only a read can carry a user schema.
    if (givenSchema.exists(_ != OsqueueSchema.schema)) throw OsqueueExceptions.userSchema()
    new OsqueueScanBuilder(OsqueueOptions.normalize(tableOptions ++ options.asCaseSensitiveMap().asScala))
  }

  override def newWriteBuilder(info: LogicalWriteInfo): WriteBuilder =
    new OsqueueWriteBuilder(info, tableOptions ++ OsqueueOptions.normalize(info.options().asCaseSensitiveMap().asScala),
      sinkProgress)

  /** `StreamingQueryProgress.sink.metrics`: the last committed micro-batch of this sink. */
  override def metrics(): util.Map[String, String] = sinkProgress.snapshot
}

/** Column pruning: rows carry only the columns the query uses (a `value`-only read builds one). */
private[spark] final class OsqueueScanBuilder(options: Map[String, String]) extends ScanBuilder with SupportsPushDownRequiredColumns {
  private var required = OsqueueSchema.schema
  override def pruneColumns(requiredSchema: StructType): Unit = required = requiredSchema
  override def build(): Scan = new OsqueueScan(options, required)
}

/** Validates options for the mode Spark asks for, then builds the stream or the batch. */
private[spark] final class OsqueueScan(options: Map[String, String], required: StructType) extends Scan {
  override def readSchema(): StructType = required
  override def description(): String = s"osqueue ${options.getOrElse(OsqueueOptions.Path, "")}"

  private def readers = OsqueueReaderFactory(OsqueueSchema.fieldIndexes(required))

  override def toMicroBatchStream(checkpointLocation: String): MicroBatchStream =
    RealTimeSupport.stream(SourceOptions(options, OsqueueStores.sessionStoreOptions()), readers, checkpointLocation)

  override def toBatch: Batch = new OsqueueBatch(BatchReadOptions(options, OsqueueStores.sessionStoreOptions()), readers)

  override def supportedCustomMetrics(): Array[CustomMetric] = OsqueueTaskMetrics.supported
}
