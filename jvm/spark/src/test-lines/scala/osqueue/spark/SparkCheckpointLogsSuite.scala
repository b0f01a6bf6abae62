package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Path => JPath}

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.Trigger
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Reading the last committed micro-batch from a checkpoint that a real query of the Spark this
 * build compiles against wrote: the log classes are found on this line, the batch is the commit
 * log's (not the offset log's), and the offset is the one at the source's own index.
 */
class SparkCheckpointLogsSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark = SparkSession.builder().master("local[1]").appName("SparkCheckpointLogsSuite")
    .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
    .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    .getOrCreate()

  override def afterAll(): Unit = spark.stop()

  private def tmp(): JPath = Files.createTempDirectory("osqueue-ckpt-logs")

  private def writeFiles(dir: JPath, names: String*): Unit = {
    Files.createDirectories(dir)
    names.zipWithIndex.foreach { case (n, i) =>
      val f = dir.resolve(n)
      Files.write(f, s"$n\n".getBytes(UTF_8))
      f.toFile.setLastModified(1700000000000L + i * 10000L) // the file source reads oldest first
    }
  }

  /** A file-source query of two sources (`a`: 2 files, `b`: 1 file), one file per micro-batch. */
  private def runQuery(root: JPath): JPath = {
    writeFiles(root.resolve("a"), "a0.txt", "a1.txt")
    writeFiles(root.resolve("b"), "b0.txt")
    def files(dir: String) = spark.readStream.option("maxFilesPerTrigger", "1").text(root.resolve(dir).toString)
    val ckpt = root.resolve("ckpt")
    files("a").union(files("b")).writeStream.format("noop").option("checkpointLocation", ckpt.toString)
      .trigger(Trigger.AvailableNow()).start().awaitTermination()
    ckpt
  }

  /** The offset-log line of source `index` in batch `id` (after "v1" and the metadata line). */
  private def offsetLine(ckpt: JPath, id: Long, index: Int): String =
    Files.readAllLines(ckpt.resolve("offsets").resolve(id.toString), UTF_8).asScala(2 + index)

  /** Which source wrote `sources/<index>`: the file source lists the files it read there. */
  private def sourceDir(ckpt: JPath, index: Int): String = {
    val logs = Files.list(ckpt.resolve("sources").resolve(index.toString)).iterator.asScala.toList
    val text = logs.map(f => new String(Files.readAllBytes(f), UTF_8)).mkString
    if (text.contains("a0.txt")) "a" else if (text.contains("b0.txt")) "b" else s"unknown: $text"
  }

  test("should locate the checkpoint root and the source index only from <root>/sources/<index>") {
    val logs = SparkCheckpointLogs.forSource(spark, "s3a://bucket/ckpt/q1/sources/3").get
    assert(logs.root.toString == "s3a://bucket/ckpt/q1" && logs.sourceIndex == 3)
    assert(SparkCheckpointLogs.forSource(spark, "file:/tmp/c/sources/0").map(_.sourceIndex).contains(0))
    for (bad <- Seq("/tmp/c/offsets/0", "/tmp/c/sources/x", "/tmp/c/sources/-1", "/sources", ""))
      assert(SparkCheckpointLogs.forSource(spark, bad).isEmpty, bad)
  }

  test("should read the last committed batch and each source's own end offset in it") {
    val ckpt = runQuery(tmp())
    val commits = Files.list(ckpt.resolve("commits")).iterator.asScala.map(_.getFileName.toString)
      .filter(_.forall(_.isDigit)).map(_.toLong).toList
    assert(commits.max == 1, s"expected micro-batches 0 and 1, got $commits")
    for (index <- 0 to 1) {
      val logs = SparkCheckpointLogs.forSource(spark, ckpt.resolve("sources").resolve(index.toString).toString).get
      assert(logs.lastCommittedEnd().contains((1L, offsetLine(ckpt, 1, index))))
    }
    // The index is the source's position: `a` advanced in batch 1, `b` (one file) did not.
    val byDir = (0 to 1).map(i => sourceDir(ckpt, i) -> offsetLine(ckpt, 1, i)).toMap
    assert(byDir.keySet == Set("a", "b") && byDir("a") != byDir("b"), byDir)
    assert(byDir("a").contains("\"logOffset\":1") && byDir("b").contains("\"logOffset\":0"), byDir)
  }

  test("should go by the commit log, not the offset log: a batch planned but not committed is not the answer") {
    val ckpt = runQuery(tmp())
    Files.delete(ckpt.resolve("commits").resolve("1")) // batch 1 planned (offsets/1) but never committed
    Files.deleteIfExists(ckpt.resolve("commits").resolve(".1.crc"))
    val logs = SparkCheckpointLogs.forSource(spark, ckpt.resolve("sources").resolve("0").toString).get
    assert(logs.lastCommittedEnd().contains((0L, offsetLine(ckpt, 0, 0))))
    Files.delete(ckpt.resolve("commits").resolve("0"))
    Files.deleteIfExists(ckpt.resolve("commits").resolve(".0.crc"))
    assert(logs.lastCommittedEnd().isEmpty, "no commit: nothing is done")
  }
}
