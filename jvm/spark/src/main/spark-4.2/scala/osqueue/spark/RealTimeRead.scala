package osqueue.spark

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus

/** Spark 4.2 passes the time it measured the timeout from, so both sides agree on the deadline. */
private[spark] trait RealTimeRead extends SupportsRealTimeRead[InternalRow] {
  /** The next record, or none once the clock reaches `deadlineMs` (epoch milliseconds). */
  protected def nextBefore(deadlineMs: Long): RecordStatus

  override def nextWithTimeout(startTimeMs: java.lang.Long, timeoutMs: java.lang.Long): RecordStatus =
    nextBefore(startTimeMs + timeoutMs)
}
