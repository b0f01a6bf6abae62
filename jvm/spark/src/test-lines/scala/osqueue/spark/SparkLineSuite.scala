package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.ConcurrentLinkedQueue

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import org.apache.spark.api.java.function.VoidFunction2
import org.apache.spark.sql.{Dataset, Row}
import org.apache.spark.sql.streaming.Trigger
import org.scalatest.funsuite.AnyFunSuite

import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.ObjectStores

/**
 * The connector in a real local Spark of the line this build is for (spark-sql from Maven): batch
 * read, AvailableNow resumed from its checkpoint, the streaming sink, and a replayed sink batch.
 * Every line runs it (Kafka's connector tests each Spark this way); it is the only Spark run of the
 * Spark 3.5 / Scala 2.13 build, which has no pyspark.
 */
class SparkLineSuite extends AnyFunSuite with LocalSparkSuite {
  override protected def sessionName: String = "osqueue-line-suite"

  /** `batches` batches of `perBatch` entries, each batch with its own metadata; the values in order. */
  private def produce(path: String, batches: Int, perBatch: Int, tag: String): Seq[String] = {
    val producer = new Producer(ObjectStores.open(path), ProducerConfig(flushInterval = 1.hour))
    try {
      (0 until batches).flatMap { b =>
        val values = (0 until perBatch).map(i => s"$tag$b-$i")
        producer.produce(values.map(_.getBytes(UTF_8)), s"meta-$tag$b".getBytes(UTF_8))
        producer.flush()
        values
      }
    } finally producer.close()
  }

  private def strings(rows: Seq[Row]): Seq[String] = rows.map(r => new String(r.getAs[Array[Byte]]("value"), UTF_8))

  /** Runs an AvailableNow query from `path` and returns the rows of each micro-batch, in order. */
  private def drain(path: String, checkpoint: String): Seq[String] = {
    val seen = new ConcurrentLinkedQueue[(Long, Long, String)]()
    val query = spark.readStream.format("osqueue").option("gc", "false").load(path)
      .writeStream.option("checkpointLocation", checkpoint).trigger(Trigger.AvailableNow())
      .foreachBatch(new VoidFunction2[Dataset[Row], java.lang.Long] {
        override def call(batch: Dataset[Row], id: java.lang.Long): Unit =
          batch.collect().foreach(r =>
            seen.add((r.getAs[Long]("sequence"), r.getAs[Int]("index").toLong,
                new String(r.getAs[Array[Byte]]("value"), UTF_8))))
      })
      .start()
    assert(query.awaitTermination(120000), "the AvailableNow query did not finish")
    seen.asScala.toSeq.sortBy(x => (x._1, x._2)).map(_._3)
  }

  test("the version check accepts the Spark and Scala of this line") {
    val sparkVersion = org.apache.spark.SPARK_VERSION
    assert(sparkVersion.startsWith(BuiltFor.SparkLine + "."), sparkVersion)
    assert(scala.util.Properties.versionNumberString.startsWith(BuiltFor.ScalaBinary + "."))
    assert(SparkVersionCheck.mismatch(sparkVersion, scala.util.Properties.versionNumberString).isEmpty)
    SparkVersionCheck.ensureSupported()
  }

  test("a batch read returns every entry in order with the metadata of its batch") {
    val path = queue("batch")
    val expected = produce(path, batches = 3, perBatch = 4, tag = "b")
    val rows = spark.read.format("osqueue").load(path).orderBy("sequence", "index").collect().toSeq
    assert(strings(rows) == expected)
    assert(rows.map(r => new String(r.getAs[Array[Byte]]("metadata"), UTF_8)).distinct == Seq("meta-b0", "meta-b1", "meta-b2"))
  }

  test("AvailableNow drains the queue, and a run on the same checkpoint delivers only the entries after it") {
    val path = queue("stream")
    val checkpoint = dir.resolve("stream-checkpoint").toString
    val first = produce(path, batches = 3, perBatch = 5, tag = "s")
    assert(drain(path, checkpoint) == first)
    val second = produce(path, batches = 2, perBatch = 5, tag = "t")
    assert(drain(path, checkpoint) == second)
    assert(drain(path, checkpoint).isEmpty)
  }

  test("the streaming sink enqueues a stream's rows once, in order") {
    val source = queue("sink-source")
    val target = queue("sink-target")
    val expected = produce(source, batches = 4, perBatch = 3, tag = "k")
    val query = spark.readStream.format("osqueue").option("gc", "false").load(source)
      .selectExpr("value", "metadata")
      .writeStream.format("osqueue").option("checkpointLocation", dir.resolve("sink-checkpoint").toString)
      .trigger(Trigger.AvailableNow()).start(target)
    assert(query.awaitTermination(120000), "the sink query did not finish")
    assert(strings(spark.read.format("osqueue").load(target).orderBy("sequence", "index").collect().toSeq) == expected)
  }

  test("a replayed sink batch id adds no duplicate") {
    val path = queue("replay")
    def write(batchId: Long, from: Int): Unit =
      spark.range(from.toLong, from + 3L).selectExpr("cast(id as string) as value").coalesce(1)
        .write.format("osqueue").mode("append").option("writerId", "line-suite").option("writerBatchId", batchId.toString)
        .save(path)
    write(1, 0)
    write(1, 0) // the same batch id again: a retried write, skipped
    write(2, 3)
    val values = strings(spark.read.format("osqueue").load(path).orderBy("sequence", "index").collect().toSeq)
    assert(values == (0 until 6).map(_.toString))
  }
}
