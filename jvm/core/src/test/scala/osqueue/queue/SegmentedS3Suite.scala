package osqueue.queue

import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.{Executors, TimeUnit}

import scala.collection.mutable.ArrayBuffer
import scala.concurrent.duration._

import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.{ManifestHead, SegmentNames}
import osqueue.gc.GarbageCollector
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.{ObjectStore, S3Store}
import osqueue.testing.{ManualClock, S3TestServer}

/** A segmented queue end to end on the S3 test server: real producers, consumer and GC, K = 3. */
class SegmentedS3Suite extends AnyFunSuite with BeforeAndAfterAll {
  private var server: S3TestServer = _
  override def beforeAll(): Unit = if (S3TestServer.missingReason.isEmpty) server = S3TestServer.start()
  override def afterAll(): Unit = if (server != null) server.close()

  private val key = "ingest/manifest"

  test(
    "two producers past K on S3: the consumer reads every entry once, in each producer's order; a GC host 11 minutes ahead deletes none of the dropped segments (ages are S3's)") {
    S3TestServer.missingReason.foreach(reason => cancel(reason))
    val store: ObjectStore = new S3Store(server.freshBucket(), "q", server.storeConfig)
    try {
      val config = ProducerConfig(flushInterval = 5.millis, manifestSegmentEntries = 3)
      val pool = Executors.newFixedThreadPool(2)
      val futures = Seq("a", "b").map { name =>
        pool.submit(() => {
          val p = new Producer(store, config)
          try (0 until 15).foreach { i =>
              p.produce(Seq(s"$name-$i-0".getBytes(UTF_8), s"$name-$i-1".getBytes(UTF_8)))
              p.flush() // one batch per call: 30 batches, ten seals or so
            }
          finally p.close()
          name
        })
      }
      futures.foreach(_.get(300, TimeUnit.SECONDS))
      pool.shutdown()
      val head = ManifestHead.parse(store.get(key).get.bytes, key)
      assert(head.isSegmented && head.depth == 30 && head.tailSize <= 3, s"${head.refs.size} refs, tail ${head.tailSize}")

      val c = new Consumer(store, ConsumerConfig(runGc = false, ackBatchSize = 4))
      c.initialize(None)
      val read = ArrayBuffer.empty[String]
      var b = c.nextBatch()
      while (b.isDefined) {
        read ++= b.get.entries.map(new String(_, UTF_8))
        c.ack(b.get.sequence)
        b = c.nextBatch()
      }
      c.close()
      assert(read.size == 60 && read.distinct.size == 60)
      for (name <- Seq("a", "b"))
        assert(read.filter(_.startsWith(name + "-")) == (0 until 15).flatMap(i => Seq(s"$name-$i-0", s"$name-$i-1")))
      val drained = ManifestHead.parse(store.get(key).get.bytes, key)
      assert(drained.isEmpty && !drained.isSegmented, "a drained queue's manifest is v1 again")

      val segments = store.list(SegmentNames.prefix(key)).map(_.key)
      assert(segments.nonEmpty)
      // Unreachable, but written moments ago by S3's LastModified: the GC host's clock plays no part.
      val later = new ManualClock(System.currentTimeMillis() + 11.minutes.toMillis)
      val r = new GarbageCollector(store, key, "ingest", 10.minutes, later).runOnce()
      assert(r.deleted.isEmpty && r.keptInGrace == segments.size + 30, r)
      assert(store.list(SegmentNames.prefix(key)).map(_.key).toSet == segments.toSet)
    } finally store.close()
  }
}
