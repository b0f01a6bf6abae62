package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.Locale

import scala.collection.mutable
import scala.concurrent.duration._

import org.apache.spark.api.java.function.VoidFunction2
import org.apache.spark.sql.{Dataset, Row}
import org.apache.spark.sql.streaming.{StreamingQuery, Trigger}
import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.ManifestHead
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.ObjectStores

/**
 * A small StreamTest for the osqueue source, in the shape of Spark's (`testStream(df)(AddKafkaData(..),
 * CheckAnswer(..), StopStream, StartStream(..))`): a script of actions run against one queue and
 * one checkpoint, in a real local Spark of this line. The query writes each micro-batch through
 * `foreachBatch` into a map by batch id (a replayed batch overwrites its first run, as an idempotent
 * sink would); `CheckAnswer` compares all rows so far in batch and queue order. Plus
 * `testBadOptions(opts*)(msgs*)` as Kafka's. Public Spark API only: it runs on every line.
 */
trait OsqueueSourceTest extends LocalSparkSuite { self: AnyFunSuite =>

  /** One delivered row. */
  final case class Delivered(batchId: Long, sequence: Long, index: Int, value: String, metadata: String,
      ingestionMs: Long, location: String)

  sealed trait StreamAction
  /** One batch file holding `entries` (metadata `meta-<first entry>`), through the JVM producer. */
  final case class AddOsqueueData(path: String, entries: String*) extends StreamAction
  /** Starts the query on the test's checkpoint (or `checkpoint`) with the test's options plus `options`. */
  final case class StartStream(trigger: Trigger = Trigger.ProcessingTime(0), options: Map[String, String] = Map.empty,
      checkpoint: Option[String] = None) extends StreamAction
  /** Stops the running query (its `stop()` dequeues the last committed batch). */
  case object StopStream extends StreamAction
  /** Waits for a query that ends by itself (AvailableNow, Once) and checks it ended without error. */
  case object AwaitTermination extends StreamAction
  /** Processes all available data (a running query), then compares all rows delivered so far, in order. */
  final case class CheckAnswer(expected: String*) extends StreamAction
  /** As CheckAnswer, for the rows delivered since the last check. */
  final case class CheckNewAnswer(expected: String*) extends StreamAction
  /** The sequences the queue's manifest holds. */
  final case class AssertQueued(sequences: Long*) extends StreamAction
  /** The query fails (at start or while running) with an error whose text contains every message. */
  final case class ExpectFailure(messages: String*) extends StreamAction
  /** Anything else, with the run's state. */
  final case class Execute(name: String)(val body: StreamRun => Unit) extends StreamAction

  /** The state of one `testStream` script. */
  final class StreamRun(val path: String, val checkpoint: String, val options: Map[String, String]) {
    val batches: mutable.Map[Long, Seq[Delivered]] = mutable.Map.empty
    var query: Option[StreamingQuery] = None
    var checked = 0
    /** The error the last ExpectFailure met. */
    var failure: Option[Exception] = None

    /** Every row delivered, by batch id and queue order; each batch id once (its last run). */
    def rows: Seq[Delivered] = batches.synchronized(batches.toSeq).sortBy(_._1).flatMap(_._2)
    def values: Seq[String] = rows.map(_.value)
    /** The batch files (sequences) of each non-empty micro-batch, in order. */
    def batchSizes: Seq[Int] =
      batches.synchronized(batches.toSeq).sortBy(_._1).map(_._2.map(_.sequence).distinct.size).filter(_ > 0)
    def current: StreamingQuery = query.getOrElse(fail("no query is running"))
    /** The last value of a source metric in the query's progress reports. */
    def sourceMetric(name: String): Long =
      current.recentProgress.flatMap(p => Option(p.sources.head.metrics).flatMap(m => Option(m.get(name)))).lastOption
        .getOrElse(fail(s"no '$name' in the progress of ${current.name}")).toLong
  }

  /** Runs `actions` against the queue at `path`, with a fresh checkpoint (or `checkpoint`) and the options. */
  def testStream(path: String, options: Map[String, String] = Map.empty, checkpoint: Option[String] = None)(
      actions: StreamAction*): StreamRun = {
    val run = new StreamRun(path, checkpoint.getOrElse(freshDir("checkpoint")), options)
    try actions.foreach(act(run, _))
    finally run.query.foreach(q => if (q.isActive) q.stop())
    run
  }

  private def act(run: StreamRun, action: StreamAction): Unit = action match {
    case AddOsqueueData(path, entries @ _*) => produceBatch(path, entries)
    case StartStream(trigger, options, checkpoint) =>
      if (run.query.exists(_.isActive)) fail("StartStream: a query is already running")
      run.query = Some(start(run, trigger, options, checkpoint.getOrElse(run.checkpoint)))
    case StopStream => run.current.stop()
    case AwaitTermination =>
      assert(run.current.awaitTermination(120000), "the query did not end")
      run.current.exception.foreach(e => fail(s"the query failed: ${e.getMessage}", e))
    case CheckAnswer(expected @ _*) => checkAnswer(run, 0, expected)
    case CheckNewAnswer(expected @ _*) => checkAnswer(run, run.checked, expected)
    case AssertQueued(sequences @ _*) => assert(queued(run.path) == sequences)
    case ExpectFailure(messages @ _*) =>
      val e = intercept[Exception](run.current.awaitTermination(120000))
      assert(!run.current.isActive)
      run.failure = Some(e)
      messages.foreach(m => assert(e.getMessage.contains(m), s"'$m' is not in the error: ${e.getMessage}"))
    case e: Execute => e.body(run)
  }

  /**
   * The rows after the first `from` are `expected`. A running query may see new data a poll
   * interval late (the source's idle backoff), after `processAllAvailable` returned: it is given
   * up to a minute to deliver as many rows as expected. The rows reach the sink before Spark's commit
   * log has their batch, so it then waits for the query to be idle again: a `StopStream` right after
   * must not find that batch uncommitted (its entries would rightly stay queued).
   */
  private def checkAnswer(run: StreamRun, from: Int, expected: Seq[String]): Unit = {
    run.query.filter(_.isActive).foreach { q =>
      q.processAllAvailable()
      val deadline = System.nanoTime() + 60L * 1000000000L
      while (run.rows.size - from < expected.size && q.isActive && System.nanoTime() < deadline) Thread.sleep(50)
      if (q.isActive) q.processAllAvailable()
    }
    assert(run.values.drop(from) == expected, "entries lost, duplicated or out of order")
    run.checked = run.rows.size
  }

  private def start(run: StreamRun, trigger: Trigger, options: Map[String, String], checkpoint: String): StreamingQuery =
    spark.readStream.format("osqueue").option("gc", "false").options(run.options ++ options).load(run.path)
      .writeStream.option("checkpointLocation", checkpoint).trigger(trigger)
      .foreachBatch(new VoidFunction2[Dataset[Row], java.lang.Long] {
        override def call(batch: Dataset[Row], id: java.lang.Long): Unit = {
          val rows = batch.collect().toSeq.map { r =>
            Delivered(id, r.getAs[Long]("sequence"), r.getAs[Int]("index"), new String(r.getAs[Array[Byte]]("value"), UTF_8),
              Option(r.getAs[Array[Byte]]("metadata")).map(new String(_, UTF_8)).orNull,
              r.getAs[java.sql.Timestamp]("ingestionTime").getTime, r.getAs[String]("location"))
          }.sortBy(d => (d.sequence, d.index))
          run.batches.synchronized(run.batches(id) = rows)
        }
      })
      .start()

  /**
   * Kafka's `testBadOptions`: a stream with these options fails before reading, with every message
   * in its error (compared in lower case).
   */
  def testBadOptions(options: (String, String)*)(messages: String*): Unit =
    test(s"bad source options ${options.map { case (k, v) => s"$k=$v" }.mkString(", ")}") {
      val e = intercept[Exception] {
        spark.readStream.format("osqueue").options(options.toMap).load()
          .writeStream.format("noop").option("checkpointLocation", freshDir("bad-options")).start().awaitTermination(60000)
      }
      messages.foreach(m => assert(e.getMessage.toLowerCase(Locale.ROOT).contains(m.toLowerCase(Locale.ROOT)), e.getMessage))
    }

  /** One batch file of `entries` with metadata `meta-<first entry>`. */
  def produceBatch(path: String, entries: Seq[String]): Unit = {
    val producer = new Producer(ObjectStores.open(path), ProducerConfig(flushInterval = 1.hour))
    try {
      producer.produce(entries.map(_.getBytes(UTF_8)), s"meta-${entries.head}".getBytes(UTF_8))
      producer.flush()
    } finally producer.close()
  }

  /** `batches` batch files of `perBatch` entries `<tag><b>-<i>`; the entries in queue order. */
  def produce(path: String, batches: Int, perBatch: Int, tag: String = "e"): Seq[String] =
    (0 until batches).flatMap { b =>
      val values = (0 until perBatch).map(i => s"$tag$b-$i")
      produceBatch(path, values)
      values
    }

  /** The queue's manifest head. */
  def head(path: String): ManifestHead = {
    val store = ObjectStores.open(path)
    try ManifestHead.parse(store.get("ingest/manifest").get.bytes, "ingest/manifest")
    finally store.close()
  }

  /** The sequences the queue holds. */
  def queued(path: String): Seq[Long] = { val h = head(path); h.firstSequence until h.nextSequence }

  private val dirs = new java.util.concurrent.atomic.AtomicInteger()
  /** A new directory path under the suite's temp dir (not created). */
  def freshDir(name: String): String = dir.resolve(s"$name-${dirs.incrementAndGet()}").toString
}
