package osqueue.spark

import java.nio.file.{Files, Path}

import org.apache.spark.sql.SparkSession
import org.scalatest.{BeforeAndAfterAll, Suite}

/** One local Spark session per suite, bound to loopback, with its files under a temp dir. */
trait LocalSparkSuite extends BeforeAndAfterAll { self: Suite =>
  /** The session's app name and the temp dir's prefix. */
  protected def sessionName: String
  /** `local[2]`: no task is retried; `local[2,n]` gives each task n attempts. */
  protected def master: String = "local[2]"

  protected var spark: SparkSession = _
  protected lazy val dir: Path = Files.createTempDirectory(sessionName)

  override def beforeAll(): Unit = {
    spark = SparkSession.builder().master(master).appName(sessionName)
      .config("spark.ui.enabled", "false")
      .config("spark.sql.warehouse.dir", dir.resolve("warehouse").toString)
      .config("spark.sql.shuffle.partitions", "2")
      .config("spark.driver.bindAddress", "127.0.0.1")
      .config("spark.driver.host", "127.0.0.1")
      .getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
  }

  override def afterAll(): Unit = if (spark != null) spark.stop()

  protected def queue(name: String): String = dir.resolve(name).toString
}
