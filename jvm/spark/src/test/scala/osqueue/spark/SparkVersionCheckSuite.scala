package osqueue.spark

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.util.CaseInsensitiveStringMap

/** The connector refuses a Spark or Scala it was not built for, naming both versions. */
class SparkVersionCheckSuite extends AnyFunSuite {
  test("should accept any patch release of the Spark and Scala the jar is built for") {
    assert(SparkVersionCheck.mismatch("4.1.3", "2.13.17").isEmpty)
    assert(SparkVersionCheck.mismatch("4.1.0", "2.13.16").isEmpty)
  }

  test("should name the running and the supported versions for another Spark or Scala") {
    val spark35 = SparkVersionCheck.mismatch("3.5.3", "2.12.18").get
    assert(spark35.startsWith("OSQUEUE_INCOMPATIBLE_SPARK:"))
    assert(spark35.contains("built for Spark 4.1.x with Scala 2.13") && spark35.contains("loaded into Spark 3.5.3 with Scala 2.12.18"))
    assert(SparkVersionCheck.mismatch("4.0.1", "2.13.16").get.contains("Spark 4.0.1"))
    assert(SparkVersionCheck.mismatch("4.2.0", "2.13.17").isDefined)
    assert(SparkVersionCheck.mismatch("4.1.3", "3.3.4").get.contains("Scala 3.3.4"))
    assert(SparkVersionCheck.mismatch("4.10.0", "2.13.17").isDefined, "4.10 is not 4.1")
  }

  test("should match the Spark and Scala this build compiles and tests against") {
    assert(SparkVersionCheck.mismatch(org.apache.spark.SPARK_VERSION, scala.util.Properties.versionNumberString).isEmpty)
    SparkVersionCheck.ensureSupported()
    // The provider runs the check first: with the right versions it gets to option validation.
    val e = intercept[RuntimeException] {
      new OsqueueSourceProvider().getTable(null, Array.empty, new CaseInsensitiveStringMap(java.util.Map.of()))
    }
    assert(e.isInstanceOf[IllegalArgumentException] && e.getMessage.contains("path"), e)
  }
}
