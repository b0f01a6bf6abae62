package osqueue.spark

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader}
import org.apache.spark.util.LongAccumulator

/** Spark 4.1+: the stream also runs in real-time mode (`Trigger.RealTime`). */
private[spark] object RealTimeSupport {
  def stream(options: SourceOptions, readers: OsqueueReaderFactory, sourceCheckpoint: String): OsqueueMicroBatchStream =
    new OsqueueRealTimeStream(options, readers, sourceCheckpoint)

  def reader(partition: InputPartition, fields: Array[Int], missingBatches: Option[LongAccumulator],
      corruptBatches: Option[LongAccumulator] = None): PartitionReader[InternalRow] =
    partition match {
      case p: OsqueueRealTimePartition => new OsqueueRealTimeReader(p, fields, missingBatches, corruptBatches = corruptBatches)
      case other => throw OsqueueExceptions.internalError(s"not an osqueue input partition: $other")
    }
}
