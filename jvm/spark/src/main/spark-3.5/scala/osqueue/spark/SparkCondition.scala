package osqueue.spark

import org.apache.spark.SparkThrowable

/**
 * An osqueue condition as Spark reads one: Spark 3.5 asks `getErrorClass` (4.0 renamed it
 * `getCondition`). Both answer, so that a jar loaded into the other line still reports it.
 */
trait SparkCondition extends SparkThrowable {
  /** The condition's name, e.g. `OSQUEUE_DATA_LOSS`. */
  def condition: String
  def messageParameters: java.util.Map[String, String]
  override def getErrorClass: String = condition
  def getCondition: String = condition
  override def getMessageParameters: java.util.Map[String, String] = messageParameters
}
