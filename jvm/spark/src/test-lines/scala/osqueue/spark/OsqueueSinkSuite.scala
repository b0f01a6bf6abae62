package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Paths}
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicBoolean

import scala.collection.mutable.ArrayBuffer
import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import org.apache.spark.api.java.function.VoidFunction2
import org.apache.spark.sql.{Dataset, Row}
import org.apache.spark.sql.streaming.Trigger
import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.{BatchCodec, Compression, ManifestHead}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.ObjectStores

/**
 * The sink end to end in a local Spark of this line (Spark's `KafkaSinkSuite`): streaming writes
 * (one manifest append per epoch) across stops and restarts, replayed epochs, `df.write`, several
 * writers on one queue, a segmented queue, a query reading while one writes, and bad input.
 */
class OsqueueSinkSuite extends AnyFunSuite with OsqueueSinkTestUtils {
  override protected def sessionName: String = "osqueue-sink-suite"

  private var n = 0
  /** A fresh (input dir, queue path, checkpoint) for one test. */
  private def paths(): (String, String, String) = {
    n += 1
    (queue(s"in-$n"), queue(s"q-$n"), queue(s"ckpt-$n"))
  }

  private def fileRows(queuePath: String, location: String): Seq[String] =
    BatchCodec.decode(Files.readAllBytes(Paths.get(queuePath).resolve(location)), location).map(text)

  /** Drops Spark's commit log entry of `batchId`: the next run replays that batch. */
  private def forgetCommit(checkpoint: String, batchId: Long): Unit = {
    Files.delete(Paths.get(checkpoint, "commits", batchId.toString))
    Files.deleteIfExists(Paths.get(checkpoint, "commits", s".$batchId.crc"))
  }

  test("a stream of files lands every row once, one entry per epoch in epoch order, with its metadata") {
    val (in, q, ckpt) = paths()
    val expected = makeInput(in, files = 3, lines = 4)
    runSink(in, q, ckpt)
    assert(readRows(q) == expected.map(v => (v, v.takeWhile(_ != '-') + ".txt")))
    // one epoch per input file: each entry holds the rows of one epoch, with one metadata range (its file's name)
    val epochs = entries(q).map { e =>
      val epoch = fileRows(q, e.location).map(_.takeWhile(_ != '-')).distinct
      assert(epoch.size == 1, s"${e.location} mixes epochs $epoch")
      assert(e.metadata.map(m => text(m.payload)) == Seq(s"${epoch.head}.txt"))
      epoch.head
    }
    assert(epochs == Seq("f0", "f1", "f2"))
    assert(nativeValues(q) == expected, "native consumer: rows lost, duplicated or reordered")
  }

  test("a stopped query restarts from its checkpoint and appends only what is new") {
    val (in, q, ckpt) = paths()
    val first = makeInput(in, files = 2, lines = 3)
    runSink(in, q, ckpt)
    runSink(in, q, ckpt) // nothing new: nothing appended
    assert(entries(q).size == 2)
    val second = makeInput(in, files = 2, lines = 3, firstFile = 2)
    runSink(in, q, ckpt)
    assert(readValues(q) == first ++ second)
    assert(entries(q).size == 4, "an epoch of the first run was appended again")
  }

  test("an epoch replayed after its append (the commit log entry lost) is skipped by the writer state") {
    val (in, q, ckpt) = paths()
    val expected = makeInput(in, files = 2, lines = 3)
    runSink(in, q, ckpt)
    val before = entries(q).map(_.location)
    // As after a crash between the sink's commit and Spark's commit log: the restart replays epoch 1.
    forgetCommit(ckpt, 1)
    val replay = runSink(in, q, ckpt)
    assert(entries(q).map(_.location) == before, "the replayed epoch was appended again")
    val progress = replay.recentProgress.filter(_.batchId == 1).last
    assert(progress.sink.metrics.get("replaysSkipped") == "1")
    assert(batchFiles(q).size == before.size, "the replay's own files were left behind")
    assert(nativeValues(q) == expected)
  }

  test("an epoch replayed after its append but before the writer state lands twice and is read once") {
    val (in, q, ckpt) = paths()
    val expected = makeInput(in, files = 2, lines = 3)
    val writerId = runSink(in, q, ckpt).id.toString
    // As after a crash between the append and the writer state: the state still says epoch 0.
    val state = writerState(q, writerId).get
    assert(state.lastCommittedBatch == 1)
    Files.write(Paths.get(q).resolve(OsqueueSinkCommitter.stateKey(manifestKey, writerId)),
      OsqueueSinkCommitter.encodeState(state.copy(lastCommittedBatch = 0)))
    forgetCommit(ckpt, 1)
    runSink(in, q, ckpt)
    assert(entries(q).size == 3, "the replay appended its second copy of epoch 1")
    assert(readValues(q) == expected)
    assert(nativeValues(q) == expected, "native consumer: the second copy was delivered")
  }

  test("sink metrics appear in the streaming query's progress, one epoch at a time") {
    val (in, q, ckpt) = paths()
    makeInput(in, files = 3, lines = 4)
    val query = runSink(in, q, ckpt)
    val progresses = query.recentProgress.filter(_.numInputRows > 0).toSeq
    assert(progresses.size == 3, progresses.map(_.json))
    progresses.zip(entries(q)).foreach {
      case (p, entry) => // one epoch per file, one entry per epoch
        val m = p.sink.metrics.asScala
        assert(m("batchId") == p.batchId.toString)
        assert(m("rowsWritten").toLong == p.numInputRows)
        assert(m("batchesWritten") == "1")
        assert(m("bytesWritten").toLong == Files.size(Paths.get(q).resolve(entry.location)))
        assert(m("manifestConflicts").toLong >= 0 && m("commitLatencyMs").toLong >= 0)
        assert(m("replaysSkipped") == "0")
    }
  }

  test("df.write appends once, zstd-compressed, one metadata range per run of equal metadata") {
    val (_, q, _) = paths()
    val session = spark
    import session.implicits._
    val rows = (0 until 10).map(i => (s"r$i", s"m${i % 2}"))
    rows.toDF("value", "metadata").selectExpr("value", "cast(metadata as binary) as metadata").coalesce(1)
      .write.format("osqueue").mode("append").option("compression", "zstd").save(q)
    assert(readRows(q) == rows)
    assert(entries(q).size == 1)
    assert(entries(q).head.metadata.map(_.startIndex) == (0 until 10), "alternating metadata: one range per row")
  }

  test("a df.write of several tasks appends their split files in partition order, then file order") {
    val (_, q, _) = paths()
    val session = spark
    import session.implicits._
    val rows = (0 until 18).map(i => (s"p${i / 6}-r${i % 6}", s"g${i / 3}".getBytes(UTF_8)))
    // partition k holds rows 6k..6k+5
    spark.sparkContext.parallelize(rows, 3).toDF("value", "metadata")
      .write.format("osqueue").mode("append").option("compression", "zstd").option("flushSizeBytes", "20").save(q)
    val es = entries(q)
    assert(es.size > 3, "each task split its rows over several files")
    assert(es.map(_.sequence) == es.indices.map(_.toLong))
    val delivered = ArrayBuffer.empty[String]
    val metas = ArrayBuffer.empty[String]
    es.foreach { e =>
      assert(e.location.matches("ingest/[0-9A-HJKMNP-TV-Z]{26}\\.batch"), e.location)
      val data = Files.readAllBytes(Paths.get(q).resolve(e.location))
      assert(data(data.length - 7) == Compression.Zstd.id.toByte, s"${e.location} is not zstd-compressed")
      val records = BatchCodec.decode(data, e.location)
      val starts = e.metadata.map(_.startIndex) :+ records.size
      val payloads = e.metadata.map(m => text(m.payload))
      assert(starts.head == 0 && starts.zip(starts.tail).forall { case (a, b) => a < b }, starts)
      assert(payloads.zip(payloads.drop(1)).forall { case (a, b) => a != b }, s"${e.location}: equal neighbours not merged")
      payloads.indices.foreach(k => metas ++= Seq.fill(starts(k + 1) - starts(k))(payloads(k)))
      delivered ++= records.map(text)
    }
    assert(delivered == rows.map(_._1), "partition id order, then file order within a task")
    assert(metas == rows.map(r => text(r._2)))
  }

  test("the sink appends to a segmented queue: every entry once, in order") {
    val (in, q, ckpt) = paths()
    val producer = new Producer(ObjectStores.open(q), ProducerConfig(flushInterval = 1.hour, manifestSegmentEntries = 3))
    val produced =
      try {
        (0 until 8).flatMap { b =>
          val values = (0 until 2).map(i => s"n$b-$i")
          producer.produce(values.map(_.getBytes(UTF_8)))
          producer.flush()
          values
        }
      } finally producer.close()
    val store = ObjectStores.open(q)
    def head() = ManifestHead.parse(store.get(manifestKey).get.bytes, manifestKey)
    try {
      assert(head().isSegmented)
      val written = makeInput(in, files = 3, lines = 2)
      runSink(in, q, ckpt)
      assert(head().isSegmented && head().nextSequence == 8 + 3)
      assert(readValues(q) == produced ++ written)
      assert(nativeValues(q) == produced ++ written)
    } finally store.close()
  }

  test("a query reads the queue while another writes it: every row once, in order") {
    val (in, q, ckpt) = paths()
    val expected = makeInput(in, files = 5, lines = 3)
    val seen = new ConcurrentLinkedQueue[String]()
    // the reader needs a queue: one native entry first
    val producer = new Producer(ObjectStores.open(q))
    try producer.produce(Seq("seed".getBytes(UTF_8))).awaitDurable(60.seconds)
    finally producer.close()
    val reader = spark.readStream.format("osqueue").option("gc", "false").load(q)
      .writeStream.option("checkpointLocation", queue(s"read-ckpt-$n")).trigger(Trigger.ProcessingTime(100))
      .foreachBatch(new VoidFunction2[Dataset[Row], java.lang.Long] {
        override def call(batch: Dataset[Row], id: java.lang.Long): Unit =
          batch.orderBy("sequence", "index").collect().foreach(r => seen.add(text(r.getAs[Array[Byte]]("value"))))
      })
      .start()
    try {
      runSink(in, q, ckpt)
      val deadline = System.nanoTime() + 120.seconds.toNanos
      while (seen.size <= expected.size && System.nanoTime() < deadline) {
        assert(reader.exception.isEmpty, reader.exception)
        Thread.sleep(100)
      }
    } finally reader.stop()
    assert(seen.asScala.toSeq == "seed" +: expected)
  }

  test("two sink queries and a native producer share one queue: each writer's rows once and in order") {
    val (inA, q, ckptA) = paths()
    val (inB, _, ckptB) = paths()
    val a = makeInput(inA, files = 4, lines = 10, tag = "a")
    val b = makeInput(inB, files = 4, lines = 10, tag = "b")
    val native = new ConcurrentLinkedQueue[String]()
    val sinksDone = new AtomicBoolean(false)
    Files.createDirectories(Paths.get(q))
    // until both sink queries are done, so native appends contend with their commits
    val producerThread = new Thread(() => {
      val p = new Producer(ObjectStores.open(q), ProducerConfig(flushInterval = 5.millis))
      try
        while (!sinksDone.get || native.size < 60) {
          val v = s"native-${native.size}"
          p.produce(Seq(v.getBytes(UTF_8))).awaitDurable(60.seconds)
          native.add(v)
        }
      finally p.close()
    })
    producerThread.start()
    try {
      val queries = Seq(startSink(inA, q, ckptA), startSink(inB, q, ckptB))
      queries.foreach(query => assert(query.awaitTermination(180000)))
    } finally {
      sinksDone.set(true)
      producerThread.join(120000)
    }
    val values = readValues(q)
    assert(values.sorted == (a ++ b ++ native.asScala).sorted && values.distinct.size == values.size)
    val es = entries(q)
    assert(es.map(_.sequence) == es.indices.map(_.toLong))
    assert(values.filter(_.startsWith("a")) == a && values.filter(_.startsWith("b")) == b, "a writer's epochs out of order")
    val sinkPositions = values.indices.filterNot(i => values(i).startsWith("native"))
    assert(values.slice(sinkPositions.head, sinkPositions.last).exists(_.startsWith("native")),
      "no native append landed between the sinks' commits: nothing contended")
  }

  /**
   * A `df.write` of `columns` (over `range(3)`) with `options` fails before writing anything, with
   * every one of `expected` in its message.
   */
  private def testBadOptions(columns: String*)(options: (String, String)*)(expected: String*): Unit = {
    val (_, q, _) = paths()
    val message = failure(spark.range(3).selectExpr(columns: _*).write.format("osqueue").mode("append")
        .options(options.toMap).save(q))
    expected.foreach(m => assert(message.contains(m), message))
    assert(batchFiles(q).isEmpty, "files were written")
  }

  test("bad input columns fail a df.write before any write, naming the column") {
    testBadOptions("cast(id as string) as v")()("needs a 'value' column")
    testBadOptions("id as value")()("must be binary or string, not bigint")
    testBadOptions("cast(id as string) as value", "id as extra")()("got 'extra'")
    testBadOptions("cast(id as string) as value", "cast(id as string) as metadata")()("'metadata' column must be binary")
  }

  test("bad sink options fail a df.write before any write, naming the option whatever the key's case") {
    val value = "cast(id as string) as value"
    testBadOptions(value)("compression" -> "lz4")("expected 'none' or 'zstd'")
    testBadOptions(value)("COMPRESSION" -> "lz4")("expected 'none' or 'zstd'")
    testBadOptions(value)("flushSizeBytes" -> "0")("'flushsizebytes': '0'")
    testBadOptions(value)("flushsizebytes" -> "-5")("'flushsizebytes': '-5'")
    testBadOptions(value)("writerID" -> " ")("'writerid'")
    testBadOptions(value)("WRITERID" -> " ")("'writerid'")
    testBadOptions(value)("maxBatchesPerTrigger" -> "2")("unknown option 'maxbatchespertrigger'")
    testBadOptions(value)("writerId" -> "daily")("'writerid' ('daily') on a batch write (df.write) needs option 'writerbatchid'")
    testBadOptions(value)("writerBatchId" -> "3")("option 'writerbatchid' needs option 'writerid'")
    testBadOptions(value)("WriterId" -> "daily", "WRITERBATCHID" -> "-1")("'writerbatchid': '-1'")
  }

  test("bad input columns fail a streaming write before any write") {
    Seq("value as v" -> "needs a 'value' column", "value, value as extra" -> "got 'extra'").foreach {
      case (columns, expected) =>
        val (in, q, ckpt) = paths()
        makeInput(in, files = 1, lines = 2)
        val message = failure {
          val query = spark.readStream.text(in).selectExpr(columns.split(",").map(_.trim).toIndexedSeq: _*)
            .writeStream.format("osqueue").option("checkpointLocation", ckpt).trigger(Trigger.AvailableNow()).start(q)
          try query.awaitTermination(120000)
          finally query.stop()
        }
        assert(message.contains(expected), message)
        assert(batchFiles(q).isEmpty, "files were written")
    }
  }

  test("a streaming write refuses writerBatchId before any write") {
    val (in, q, ckpt) = paths()
    makeInput(in, files = 1, lines = 2)
    val message = failure(runSink(in, q, ckpt, Map("writerId" -> "w", "writerBatchId" -> "1")))
    assert(message.contains("'writerbatchid' applies only to batch writes"), message)
    assert(batchFiles(q).isEmpty, "files were written")
  }
}
