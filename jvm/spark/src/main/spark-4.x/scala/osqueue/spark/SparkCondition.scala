package osqueue.spark

import org.apache.spark.SparkThrowable

/**
 * An osqueue condition as Spark reads one: `getCondition` (Spark 3.5 asks the older
 * `getErrorClass`, still answered, so that a jar loaded into Spark 3.5 reports it too).
 */
trait SparkCondition extends SparkThrowable {
  /** The condition's name, e.g. `OSQUEUE_DATA_LOSS`. */
  def condition: String
  def messageParameters: java.util.Map[String, String]
  override def getCondition: String = condition
  override def getErrorClass: String = condition
  override def getMessageParameters: java.util.Map[String, String] = messageParameters
}
