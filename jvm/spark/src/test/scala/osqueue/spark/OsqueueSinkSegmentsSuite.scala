package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8

import org.scalatest.funsuite.AnyFunSuite

import osqueue.SystemClock
import osqueue.format.{BatchCodec, BatchNames, Compression, ManifestHead, MetadataItem}
import osqueue.metrics.MetricsRegistry
import osqueue.queue.{ManifestAppender, ManifestStore, PendingLocation, RetryPolicy}
import osqueue.store.ObjectStores

/**
 * The sink's `manifestSegmentEntries` (K): a queue the sink writes stays RFC v1 with K =
 * 2147483647 and is segmented past a small K, as a producer's queue is (docs/format.md §2.2).
 */
class OsqueueSinkSegmentsSuite extends AnyFunSuite with LocalSparkSuite {
  override protected def sessionName: String = "osqueue-sink-segments-suite"

  private def head(path: String): ManifestHead = {
    val store = ObjectStores.open(path)
    try ManifestHead.parse(store.get("ingest/manifest").get.bytes, "ingest/manifest")
    finally store.close()
  }
  private def version(path: String): Int = head(path).version
  private def depth(path: String): Long = head(path).depth

  /** `writes` appends of 4 rows in 2 partitions (two batch files: two manifest entries each). */
  private def write(path: String, writes: Int, options: (String, String)*): Unit = {
    val session = spark
    import session.implicits._
    (0 until writes).foreach { w =>
      (0 until 4).map(i => s"w$w-$i").toDF("value").repartition(2)
        .write.format("osqueue").mode("append").options(options.toMap).save(path)
    }
  }

  private def values(path: String): Seq[String] =
    spark.read.format("osqueue").load(path).orderBy("sequence", "index").collect().toSeq
      .map(r => new String(r.getAs[Array[Byte]]("value"), UTF_8))

  /** A v1 queue of `n` entries (one write, never sealed), each a real one-entry batch file. */
  private def fill(path: String, n: Int): Unit = {
    val store = ObjectStores.open(path)
    try {
      val appender = new ManifestAppender(new ManifestStore(store, "ingest/manifest"), RetryPolicy(), SystemClock,
        new MetricsRegistry, 600000L, segmentEntries = Int.MaxValue)
      appender.append((0 until n).map { i =>
        val key = BatchNames.newKey("ingest", System.currentTimeMillis())
        store.put(key, BatchCodec.encode(Seq(s"f$i".getBytes(UTF_8)), Compression.None))
        new PendingLocation(key, IndexedSeq(MetadataItem(0, System.currentTimeMillis(), Array.emptyByteArray)),
          () => throw new IllegalStateException("no re-upload"))
      })
    } finally store.close()
  }

  test("manifestSegmentEntries=2147483647 keeps a queue the sink writes RFC v1 past the default K (2048)") {
    val path = queue("v1")
    fill(path, ManifestHead.DefaultSegmentEntries)
    write(path, 1, "manifestSegmentEntries" -> "2147483647")
    write(path, 1, "MANIFESTSEGMENTENTRIES" -> Int.MaxValue.toString)
    assert(version(path) == 1 && depth(path) == ManifestHead.DefaultSegmentEntries + 4)
    write(path, 1) // the default K seals the tail, as a producer's would (a segmented head is v3, §2.3)
    assert(version(path) == 3 && depth(path) == ManifestHead.DefaultSegmentEntries + 6)
  }

  test("a small manifestSegmentEntries segments the queue the sink writes, every row still read once") {
    val path = queue("segmented")
    write(path, 3, "manifestSegmentEntries" -> "2")
    assert(version(path) == 3) // segmented, with the head checksum (docs/format.md §2.3)
    assert(values(path).sorted == (0 until 3).flatMap(w => (0 until 4).map(i => s"w$w-$i")).sorted)
  }

  test("a bad manifestSegmentEntries is a clear error naming the option") {
    Seq("0", "-1", "lots", "2147483648").foreach { bad =>
      val e = intercept[IllegalArgumentException](SinkOptions(Map("path" -> "/tmp/q", "manifestsegmententries" -> bad), Map.empty))
      assert(e.getMessage.contains("manifestsegmententries") && e.getMessage.contains(bad), e.getMessage)
    }
  }
}
