package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Paths}

import scala.concurrent.duration._

import org.apache.spark.sql.DataFrame
import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.ManifestHead
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.ObjectStores

/**
 * `spark.read.format("osqueue")` in a local Spark of this line: the queue's current entries without
 * fencing or acking, the [startingSequence, endingSequence) window, a segmented queue, missing and
 * corrupt batch files under `failOnDataLoss`, column pruning, task metrics and bad options.
 */
class OsqueueBatchReadSuite extends AnyFunSuite with OsqueueSinkTestUtils {
  override protected def sessionName: String = "osqueue-batch-read-suite"

  private var n = 0
  private def freshQueue(): String = { n += 1; queue(s"q-$n") }

  /** `batches` flushes of `perBatch` entries (`e<b>-<i>`, metadata `meta-e<b>`); the entries in order. */
  private def produce(path: String, batches: Int, perBatch: Int, segmentEntries: Int = ManifestHead.DefaultSegmentEntries)
      : Seq[String] = {
    val producer = new Producer(ObjectStores.open(path),
      ProducerConfig(flushInterval = 1.hour, manifestSegmentEntries = segmentEntries))
    try {
      (0 until batches).flatMap { b =>
        val values = (0 until perBatch).map(i => s"e$b-$i")
        producer.produce(values.map(_.getBytes(UTF_8)), s"meta-e$b".getBytes(UTF_8))
        producer.flush()
        values
      }
    } finally producer.close()
  }

  private def load(path: String, options: (String, String)*): DataFrame =
    spark.read.format("osqueue").options(options.toMap).load(path)

  private def manifestBytes(path: String) = Files.readAllBytes(Paths.get(path).resolve(manifestKey))

  /** The osqueue scan of an executed `df` (a plain read has no exchange): its SQL metric `name`. */
  private def scanMetric(df: DataFrame, name: String): Long =
    df.queryExecution.executedPlan.collectLeaves().head.metrics(name).value

  test("a batch read returns the current entries with their metadata, and fences and acks nothing") {
    val q = freshQueue()
    val expected = produce(q, batches = 4, perBatch = 2)
    val before = manifestBytes(q)
    assert(readRows(q) == expected.map(v => (v, "meta-" + v.takeWhile(_ != '-'))))
    assert(load(q).select("sequence", "index").collect().map(r => (r.getLong(0), r.getInt(1))).sorted.toSeq ==
      (0L until 4L).flatMap(s => Seq((s, 0), (s, 1))))
    assert(java.util.Arrays.equals(manifestBytes(q), before), "a batch read changed the manifest")
  }

  test("startingSequence and endingSequence select [start, end), whatever the keys' case") {
    val q = freshQueue()
    val expected = produce(q, batches = 5, perBatch = 2)
    assert(readValues(q, Map("startingSequence" -> "1", "endingSequence" -> "3")) == expected.slice(2, 6))
    assert(readValues(q, Map("STARTINGSEQUENCE" -> "3")) == expected.drop(6))
    assert(readValues(q, Map("endingsequence" -> "1")) == expected.take(2))
    assert(readValues(q, Map("startingSequence" -> "2", "endingSequence" -> "2")).isEmpty)
    assert(readValues(q, Map("startingSequence" -> "4", "endingSequence" -> "99")) == expected.drop(8))
  }

  test("a window starting before the first entry is data loss, unless allowed: then it starts at the first") {
    val q = freshQueue()
    val expected = produce(q, batches = 4, perBatch = 1)
    val consumer = new osqueue.consumer.Consumer(ObjectStores.open(q))
    try {
      consumer.initialize()
      consumer.nextBatch().foreach(b => consumer.ackThrough(b.sequence)) // sequence 0 dequeued
    } finally consumer.close()
    val message = failure(readValues(q, Map("startingSequence" -> "0")))
    assert(message.contains("OSQUEUE_DATA_LOSS") && message.contains("startingSequence 0 is before the first entry 1"), message)
    assert(readValues(q, Map("startingSequence" -> "0", "failOnDataLoss" -> "false")) == expected.drop(1))
  }

  test("a missing batch file is data loss naming it, unless allowed: then it is skipped and counted") {
    val q = freshQueue()
    val expected = produce(q, batches = 3, perBatch = 1)
    val location = entries(q)(1).location
    Files.delete(Paths.get(q).resolve(location))
    val message = failure(readValues(q))
    assert(message.contains("OSQUEUE_DATA_LOSS") && message.contains(location), message)
    val df = load(q, "failOnDataLoss" -> "false")
    assert(df.collect().map(r => text(r.getAs[Array[Byte]]("value"))).sorted.toSeq == Seq(expected(0), expected(2)))
    assert(scanMetric(df, "missingBatches") == 1)
  }

  test("a batch file that does not match its entry's integrity record fails the read naming it; allowed, it is skipped") {
    val q = freshQueue()
    val expected = produce(q, batches = 2, perBatch = 1)
    val location = entries(q)(1).location
    Files.write(Paths.get(q).resolve(location), Array[Byte](0, 1, 'g', 'a', 'r', 'b', 0, 0, 0, 0, 1, 0))
    val message = failure(readValues(q))
    assert(message.contains(location) && message.contains("corrupt data batch") && message.contains("integrity"), message)
    val df = load(q, "failOnDataLoss" -> "false") // docs/format.md §2.1: CorruptBatch follows failOnDataLoss
    assert(df.collect().map(r => text(r.getAs[Array[Byte]]("value"))).toSeq == Seq(expected(0)))
    assert(scanMetric(df, "corruptBatches") == 1)
  }

  test("a segmented queue is read whole and in a window across segments, and nothing is acked") {
    val q = freshQueue()
    val expected = produce(q, batches = 20, perBatch = 3, segmentEntries = 4)
    val head = ManifestHead.parse(manifestBytes(q), manifestKey)
    assert(head.isSegmented && head.depth == 20)
    assert(readValues(q) == expected)
    assert(readValues(q, Map("startingSequence" -> "3", "endingSequence" -> "14")) == expected.slice(3 * 3, 14 * 3))
    assert(ManifestHead.parse(manifestBytes(q), manifestKey).depth == 20, "a batch read acked entries")
  }

  test("only the selected columns are read, with their values") {
    val q = freshQueue()
    val expected = produce(q, batches = 3, perBatch = 2)
    val df = load(q).select("index", "value")
    val output = df.queryExecution.executedPlan.collectLeaves().head.output.map(_.name)
    assert(output.toSet == Set("index", "value"), output)
    val rows = df.collect()
    assert(rows.map(r => text(r.getAs[Array[Byte]]("value"))).sorted.toSeq == expected.sorted)
    assert(rows.map(_.getAs[Int]("index")).sorted.toSeq == Seq(0, 0, 0, 1, 1, 1))
    val timeAndSequence = load(q).select("ingestionTime", "sequence").collect()
    assert(timeAndSequence.forall(!_.isNullAt(0)) && timeAndSequence.map(_.getLong(1)).distinct.sorted.toSeq == Seq(0L, 1L, 2L))
  }

  test("the scan is read columnar: Spark turns its batches into rows") {
    val q = freshQueue()
    val expected = produce(q, batches = 3, perBatch = 2)
    val plan = load(q).queryExecution.executedPlan
    assert(plan.collectLeaves().head.supportsColumnar, plan)
    assert(plan.find(_.getClass.getSimpleName.startsWith("ColumnarToRow")).nonEmpty, plan)
    assert(readRows(q) == expected.map(v => (v, "meta-" + v.takeWhile(_ != '-'))))
  }

  test("task metrics count the bytes fetched") {
    val q = freshQueue()
    val expected = produce(q, batches = 3, perBatch = 2)
    val df = load(q)
    assert(df.collect().length == expected.size)
    assert(scanMetric(df, "bytesFetched") == expected.map(_.getBytes(UTF_8).length).sum)
    assert(scanMetric(df, "missingBatches") == 0)
  }

  /** A batch read with `options` (and `path` unless given) fails at load or collect, with each of `expected`. */
  private def testBadOptions(options: (String, String)*)(expected: String*): Unit = {
    val opts = options.toMap
    val message = failure {
      val reader = spark.read.format("osqueue").options(opts)
      (if (opts.keys.exists(_.equalsIgnoreCase("path"))) reader.load() else reader.load(freshQueue())).collect()
    }
    expected.foreach(m => assert(message.contains(m), message))
  }

  test("bad batch-read options fail naming the option, whatever the key's case") {
    testBadOptions("startingSequence" -> "-1")("'startingsequence': '-1'", "expected an integer >= 0")
    testBadOptions("ENDINGSEQUENCE" -> "x")("'endingsequence': 'x'")
    testBadOptions("startingSequence" -> "5", "endingSequence" -> "2")("endingsequence", "startingsequence")
    testBadOptions("failOnDataLoss" -> "maybe")("'failondataloss'", "expected true or false")
    testBadOptions("FailOnDataLoss" -> "maybe")("'failondataloss'")
    testBadOptions("maxBatchesPerTrigger" -> "2")("maxbatchespertrigger")
    testBadOptions("gc" -> "sometimes")("invalid value for option 'gc': 'sometimes'")
    testBadOptions("manifestPath" -> "../escape")("invalid value for option 'manifestpath'")
    testBadOptions("path" -> "ftp://host/q")("ftp://host/q")
  }

  test("a user schema is refused and a missing queue is named") {
    val q = freshQueue()
    val schema = failure(spark.read.format("osqueue").schema("value string").load(q).collect())
    assert(schema.contains("fixed schema"), schema)
    val missing = failure(readValues(q))
    assert(missing.contains("OSQUEUE_QUEUE_NOT_FOUND") && missing.contains(q), missing)
  }
}
