package osqueue.spark

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus

import osqueue.SystemClock

/** Spark 4.1 asks for the next record with a timeout from now. */
private[spark] trait RealTimeRead extends SupportsRealTimeRead[InternalRow] {
  /** The next record, or none once the clock reaches `deadlineMs` (epoch milliseconds). */
  protected def nextBefore(deadlineMs: Long): RecordStatus

  override def nextWithTimeout(timeoutMs: java.lang.Long): RecordStatus =
    nextBefore(SystemClock.nowMillis() + timeoutMs)
}
