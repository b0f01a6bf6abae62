package osqueue.spark

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * On the newest line's build (where this suite runs): the jar runs on its own line, runs with one
 * warning on a newer Spark, and refuses every other Spark or Scala naming the artifact to use.
 */
class SparkVersionCheckSuite extends AnyFunSuite {
  private val v = BuiltFor.Version

  test("should accept any patch release of the Spark and Scala the jar is built for") {
    assert(BuiltFor.SparkLine == BuiltFor.NewestLine, "this suite runs on the newest line's build")
    assert(SparkVersionCheck.mismatch(s"${BuiltFor.SparkLine}.0", "2.13.17").isEmpty)
    assert(SparkVersionCheck.mismatch(s"${BuiltFor.SparkLine}.9", "2.13.8").isEmpty)
    assert(SparkVersionCheck.warning(s"${BuiltFor.SparkLine}.1", "2.13.17").isEmpty)
  }

  test("should run on a newer Spark than the newest line with one warning naming both") {
    for (newer <- Seq("4.3.0", "4.10.1", "5.0.0")) {
      assert(SparkVersionCheck.mismatch(newer, "2.13.17").isEmpty, newer)
      val w = SparkVersionCheck.warning(newer, "2.13.17").get
      assert(w.startsWith("[OSQUEUE_UNTESTED_SPARK] ") && w.contains(s"Spark $newer") && w.contains(s"(${BuiltFor.SparkLine})"), w)
      assert(!w.contains("\n"))
    }
  }

  test("should refuse another line naming the artifact built for it") {
    val spark35 = SparkVersionCheck.mismatch("3.5.7", "2.12.18").get
    assert(spark35.startsWith("[OSQUEUE_INCOMPATIBLE_SPARK] "))
    assert(
      spark35.contains(s"built for Spark ${BuiltFor.SparkLine}.x with Scala 2.13") &&
        spark35.contains("loaded into Spark 3.5.7 with Scala 2.12.18"), spark35)
    assert(spark35.contains(s"io.github.osqueue:osqueue-spark-3.5_2.12:$v"), spark35)
    assert(SparkVersionCheck.mismatch("3.5.2", "2.13.8").get.contains(s"osqueue-spark-3.5_2.13:$v"))
    assert(SparkVersionCheck.mismatch("4.0.1", "2.13.16").get.contains(s"osqueue-spark-4.0_2.13:$v"))
    assert(SparkVersionCheck.mismatch("4.1.3", "2.13.17").get.contains(s"osqueue-spark-4.1_2.13:$v"))
  }

  test("should refuse a Spark or Scala with no build, listing the builds") {
    val old = SparkVersionCheck.mismatch("3.4.1", "2.12.17").get
    assert(old.contains("no build for Spark 3.4 with Scala 2.12") && old.contains("3.5 with Scala 2.12, 3.5 with Scala 2.13, 4.0"), old)
    assert(SparkVersionCheck.mismatch("4.3.0", "3.3.4").get.contains("Scala 3.3.4"))
    assert(SparkVersionCheck.mismatch("4.2.0", "2.12.18").get.contains("no build for Spark 4.2 with Scala 2.12"))
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
