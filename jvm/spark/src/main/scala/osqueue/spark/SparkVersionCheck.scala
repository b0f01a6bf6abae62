package osqueue.spark

/**
 * The Spark and Scala versions this jar is built for, checked when a query first uses the
 * connector (`OsqueueSourceProvider.getTable`): in another Spark the jar would fail later, deep in
 * a task, with a `NoSuchMethodError` or `AbstractMethodError` that names neither version. Not in
 * the provider's constructor: Spark instantiates every registered data source to look up any
 * format, and a throwing constructor would break `format("parquet")` too.
 *
 * Plain Java strings and no collections, so that this still runs, and reports, under another Scala.
 */
object SparkVersionCheck {

  /** The Spark feature release (major.minor) the jar is compiled against: build.sbt's `sparkVersion`. */
  val BuiltForSpark = "4.1"

  /** The Scala binary version of the jar (`_2.13` in its name). */
  val BuiltForScala = "2.13"

  /** Why the jar cannot run in Spark `spark` with Scala `scala`, or None when it can. */
  def mismatch(spark: String, scala: String): Option[String] =
    if (featureRelease(spark) == BuiltForSpark && featureRelease(scala) == BuiltForScala) None
    else
      Some(
        s"OSQUEUE_INCOMPATIBLE_SPARK: this osqueue connector jar is built for Spark $BuiltForSpark.x with Scala " +
          s"$BuiltForScala, but it was loaded into Spark $spark with Scala $scala. Use Spark $BuiltForSpark.x " +
          s"for Scala $BuiltForScala (pyspark==$BuiltForSpark.*), or an osqueue build for your Spark.")

  private lazy val running: Option[String] =
    mismatch(org.apache.spark.SPARK_VERSION, scala.util.Properties.versionNumberString)

  /** Throws [[IncompatibleSparkException]] when the running Spark or Scala is not the jar's. */
  def ensureSupported(): Unit = running match {
    case Some(message) => throw new IncompatibleSparkException(message)
    case None => ()
  }

  private def featureRelease(version: String): String = {
    val parts = version.split("\\.")
    if (parts.length >= 2) parts(0) + "." + parts(1) else version
  }
}

/** The connector jar was loaded into a Spark or Scala version it was not built for. */
final class IncompatibleSparkException(message: String) extends UnsupportedOperationException(message)
