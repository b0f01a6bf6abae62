package osqueue.spark

import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.write.Write

/**
 * Spark 3.5's `Write` has no `reportDriverMetrics` (Spark 4 added it): a batch write's driver-side
 * metrics stay out of the SQL UI there. Streaming progress metrics come from the table on every line.
 */
private[spark] trait WriteDriverMetrics extends Write {
  protected def driverMetrics(): Array[CustomTaskMetric]
}
