package osqueue.spark

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader}
import org.apache.spark.util.LongAccumulator

/** Spark 3.5 and 4.0 have no real-time mode: the source is the micro-batch stream alone. */
private[spark] object RealTimeSupport {
  def stream(options: SourceOptions, readers: OsqueueReaderFactory, sourceCheckpoint: String): OsqueueMicroBatchStream =
    new OsqueueMicroBatchStream(options, readers, sourceCheckpoint)

  def reader(partition: InputPartition, fields: Array[Int], missingBatches: Option[LongAccumulator],
      corruptBatches: Option[LongAccumulator] = None): PartitionReader[InternalRow] =
    throw OsqueueExceptions.internalError(s"not an osqueue input partition: $partition")
}
