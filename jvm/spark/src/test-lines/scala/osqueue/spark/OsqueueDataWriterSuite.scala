package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8

import scala.concurrent.duration._

import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.functions.{col, udf}
import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.{BatchCodec, Compression}
import osqueue.store.InMemoryStore

/**
 * A task's writer: rows into batch files of at most about `flushSizeBytes`, equal neighbouring
 * metadata merged into one range, and an aborted task's files deleted, so that a task Spark
 * retries writes nothing twice. Tasks get two attempts here (`local[2,2]`).
 */
class OsqueueDataWriterSuite extends AnyFunSuite with OsqueueSinkTestUtils {
  override protected def sessionName: String = "osqueue-data-writer-suite"
  override protected def master: String = "local[2,2]"

  private val location = QueueLocation("memory://data-writer-suite", manifestKey, "ingest", Map.empty)
  private def options(flushSizeBytes: Long) = SinkOptions(location, Compression.None, flushSizeBytes, None, 10.minutes)
  private val input = SinkInput(valueIndex = 0, valueIsString = false, metadataIndex = Some(1))
  private def row(value: String, metadata: String) = InternalRow(value.getBytes(UTF_8), metadata.getBytes(UTF_8))
  private def store = InMemoryStore.named("data-writer-suite")

  test("rows become files of about flushSizeBytes, in order, each with one range per run of equal metadata") {
    store.clear()
    val writer = new OsqueueDataWriter(options(flushSizeBytes = 8), input, partitionId = 3, stagingPrefix = None)
    Seq("a1" -> "m", "a2" -> "m", "a3" -> "n", "a4" -> "n", "a5" -> "n").foreach { case (v, m) => writer.write(row(v, m)) }
    val message = writer.commit().asInstanceOf[OsqueueCommitMessage]
    assert(message.partitionId == 3)
    // 2 bytes per value, 1 per new metadata range: a flush every 3 rows at most
    val files = message.batches
    assert(files.size == 2 && files.forall(_.location.startsWith("ingest/")))
    assert(files.flatMap(b => BatchCodec.decode(store.get(b.location).get.bytes, b.location).map(new String(_, UTF_8))) ==
      Seq("a1", "a2", "a3", "a4", "a5"))
    assert(files.map(_.metadata.map(m => (m.startIndex, new String(m.payload, UTF_8)))) ==
      Seq(Seq(0 -> "m", 2 -> "n"), Seq(0 -> "n")))
    assert(files.map(_.records) == Seq(3, 2))
  }

  test("a staging writer writes under the staging prefix") {
    store.clear()
    val writer = new OsqueueDataWriter(options(flushSizeBytes = 1), input, partitionId = 0, stagingPrefix = Some("q.staging/w"))
    writer.write(row("x", ""))
    assert(writer.commit().asInstanceOf[OsqueueCommitMessage].batches.map(_.location).forall(_.startsWith("q.staging/w/")))
  }

  test("an aborted task deletes the files it uploaded") {
    store.clear()
    val writer = new OsqueueDataWriter(options(flushSizeBytes = 1), input, partitionId = 0, stagingPrefix = None)
    (0 until 4).foreach(i => writer.write(row(s"v$i", "")))
    assert(store.list("ingest/").size == 4, "each row over flushSizeBytes: one file each")
    writer.abort()
    assert(store.list("ingest/").isEmpty)
  }

  test("a task that fails after uploading files is retried: every row once, no file left behind") {
    val q = queue("retried")
    val failFirstAttempt = udf { (v: String) =>
      if (v == "r7" && TaskContext.get().attemptNumber() == 0) throw new IllegalStateException("first attempt fails")
      v
    }
    spark.range(10).selectExpr("concat('r', cast(id as string)) as value").coalesce(1)
      .select(failFirstAttempt(col("value")).as("value"))
      .write.format("osqueue").mode("append").option("flushSizeBytes", "4").save(q)
    assert(readValues(q) == (0 until 10).map(i => s"r$i"))
    assert(batchFiles(q).size == entries(q).size, "the failed attempt's files were left behind")
  }

  override def afterAll(): Unit =
    try InMemoryStore.drop("data-writer-suite")
    finally super.afterAll()
}
