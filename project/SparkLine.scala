/**
 * One connector build per Spark line ("feature release"), all from jvm/spark/src/main/scala plus,
 * where the Spark API differs, jvm/spark/src/main/spark-<line>/scala. The artifact is named after
 * the line and the Scala binary version (`osqueue-spark-4.1_2.13`), as users of spark-sql-kafka and
 * delta-spark expect. `sparkVersion` is the first release of the line (x.y.0), so that nothing newer
 * than the line's own API is used; Spark keeps the DataSource V2 API stable within a line, and the
 * per-line pyspark tests run a later patch release.
 */
final case class SparkLine(line: String, sparkVersion: String, scala: String) {
  def scalaBinary: String = scala.split('.').take(2).mkString(".")
  def artifact: String = s"osqueue-spark-$line" // + _<scala binary>
  def id: String = "spark" + line.replace(".", "") + "_" + scalaBinary.replace(".", "")
  def dir: String = s"$line-$scalaBinary"
  /** Spark 4.1 added real-time mode (`Trigger.RealTime`, SupportsRealTimeMode/SupportsRealTimeRead). */
  def hasRealTimeMode: Boolean = {
    val Array(major, minor) = line.split('.').map(_.toInt)
    major > 4 || (major == 4 && minor >= 1)
  }
}
