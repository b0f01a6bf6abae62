package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.ConcurrentLinkedQueue

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import org.apache.spark.api.java.function.VoidFunction2
import org.apache.spark.sql.{Dataset, Row}
import org.apache.spark.sql.streaming.Trigger
import org.scalatest.funsuite.AnyFunSuite

import osqueue.SystemClock
import osqueue.format.{BatchCodec, BatchNames, Compression, EntryTag, ManifestHead, MetadataItem}
import osqueue.metrics.MetricsRegistry
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.queue.{ManifestAppender, ManifestStore, PendingLocation, RetryPolicy}
import osqueue.store.ObjectStores

/**
 * The source on a segmented queue (docs/format.md §2.2) with a small K, in a real local Spark of
 * this line: every entry exactly once and in order across segment boundaries, for a batch read
 * (whole and windowed), AvailableNow in micro-batches that end inside segments, and sink copies
 * whose duplicates sit in another segment than the copy delivered.
 */
class SegmentedSourceSuite extends AnyFunSuite with LocalSparkSuite {
  override protected def sessionName: String = "osqueue-segmented-suite"

  private def head(path: String): ManifestHead = {
    val store = ObjectStores.open(path)
    try ManifestHead.parse(store.get("ingest/manifest").get.bytes, "ingest/manifest")
    finally store.close()
  }

  /** `batches` flushes of `perBatch` entries with K = `k`: one manifest entry per flush. */
  private def produce(path: String, batches: Int, perBatch: Int, tag: String, k: Int): Seq[String] = {
    val producer = new Producer(ObjectStores.open(path), ProducerConfig(flushInterval = 1.hour, manifestSegmentEntries = k))
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

  private def batchRead(path: String, options: (String, String)*): Seq[String] =
    strings(spark.read.format("osqueue").options(options.toMap).load(path).orderBy("sequence", "index").collect().toSeq)

  /** An AvailableNow run; the rows in the order the micro-batches delivered them, and how many batches ran. */
  private def drain(path: String, checkpoint: String, options: (String, String)*): (Seq[String], Int) = {
    val seen = new ConcurrentLinkedQueue[String]()
    val batches = new java.util.concurrent.atomic.AtomicInteger()
    val query = spark.readStream.format("osqueue").option("gc", "false").options(options.toMap).load(path)
      .writeStream.option("checkpointLocation", checkpoint).trigger(Trigger.AvailableNow())
      .foreachBatch(new VoidFunction2[Dataset[Row], java.lang.Long] {
        override def call(batch: Dataset[Row], id: java.lang.Long): Unit = {
          if (!batch.isEmpty) batches.incrementAndGet()
          strings(batch.orderBy("sequence", "index").collect().toSeq).foreach(seen.add)
        }
      })
      .start()
    assert(query.awaitTermination(120000), "the AvailableNow query did not finish")
    (seen.asScala.toSeq, batches.get())
  }

  test("a batch read of a segmented queue returns every entry in order, and a window only its own") {
    val path = queue("batch")
    val expected = produce(path, batches = 20, perBatch = 3, tag = "b", k = 3)
    val h = head(path)
    // 6 segments of 3, folded by 2 (F at K = 3): the source reads them through index objects
    assert(h.isSegmented && h.refs.exists(_.isIndex), s"no index object: levels ${h.refs.map(_.level)}")
    assert(batchRead(path) == expected)
    // sequences 2 to 10: from inside the first segment to inside a later one
    assert(batchRead(path, "startingSequence" -> "2", "endingSequence" -> "11") == expected.slice(2 * 3, 11 * 3))
  }

  test("AvailableNow drains a segmented queue across segment boundaries exactly once, and dequeues it") {
    val path = queue("stream")
    val checkpoint = dir.resolve("stream-checkpoint").toString
    val first = produce(path, batches = 25, perBatch = 2, tag = "s", k = 3)
    assert(head(path).refs.exists(_.isIndex), "the micro-batches' dequeues expand index objects")
    val (delivered, microBatches) = drain(path, checkpoint, "maxBatchesPerTrigger" -> "4")
    assert(delivered == first)
    assert(microBatches == 7, "4 batch files per micro-batch: 25 files take 7")
    assert(head(path).isEmpty && !head(path).isSegmented, "the drained queue was not dequeued")
    val second = produce(path, batches = 10, perBatch = 2, tag = "t", k = 3)
    assert(drain(path, checkpoint)._1 == second)
    assert(drain(path, checkpoint)._1.isEmpty)
  }

  test("one copy of each sink batch is delivered when its copies sit in different segments") {
    val path = queue("copies")
    val store = ObjectStores.open(path)
    val manifests = new ManifestStore(store, "ingest/manifest")
    val appender = new ManifestAppender(manifests, RetryPolicy(), SystemClock, new MetricsRegistry, 600000L,
      segmentEntries = 3)
    /** One append of batch files holding `values`, each tagged as sink batch `batch`, attempt `attempt`. */
    def append(batch: Long, attempt: String, values: String*): Unit = {
      val pending = values.map { v =>
        val key = BatchNames.newKey("ingest", System.currentTimeMillis())
        store.put(key, BatchCodec.encode(Seq(v.getBytes(UTF_8)), Compression.None))
        new PendingLocation(key, IndexedSeq(MetadataItem(0, System.currentTimeMillis(), Array.emptyByteArray)),
          () => throw new IllegalStateException("no re-upload"), EntryTag("writer", batch, attempt).encode)
      }
      appender.append(pending.toIndexedSeq)
    }
    // K = 3: segments [a1 a2] and [a1-replayed a2-replayed c1] (second copies and a new batch in one
    // slice, which the executor must filter from the state the driver planned it with), tail [d1 d2 c1-replayed]
    append(1, "a", "a1", "a2")
    append(1, "b", "a1-replayed", "a2-replayed") // the same sink batch again: seals the first copy into a segment
    append(2, "c", "c1")
    append(3, "d", "d1", "d2")
    append(2, "e", "c1-replayed")
    store.close()
    assert(head(path).refs.map(_.entryCount) == Seq(2L, 3L))
    val expected = Seq("a1", "a2", "c1", "d1", "d2")
    assert(batchRead(path) == expected)
    // one batch file per micro-batch: the sink-copy state rides in every offset across the segments
    val (delivered, _) = drain(path, dir.resolve("copies-checkpoint").toString, "maxBatchesPerTrigger" -> "1")
    assert(delivered == expected)
  }
}
