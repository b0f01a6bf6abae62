package osqueue.spark

import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.write.Write

/** Spark 4: a batch write reports its driver-side metrics (commit conflicts, latency) to the SQL UI. */
private[spark] trait WriteDriverMetrics extends Write {
  protected def driverMetrics(): Array[CustomTaskMetric]

  override def reportDriverMetrics(): Array[CustomTaskMetric] = driverMetrics()
}
