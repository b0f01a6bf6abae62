package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.{EntryTag, Incarnation, ManifestHead}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.queue.{ManifestStore, SegmentTree}
import osqueue.store.{InMemoryStore, ObjectStore}

/**
 * Readers that do not own the queue racing a consumer's dequeue and GC (issue 24, item 4): between the
 * reader's head read and its GET of a segment or index object, the object is dropped and collected.
 * `spark.read` and the real-time reader go on from the head read again; a reader whose query was taken
 * over gets the fence error; none calls the queue corrupt.
 */
class SegmentReadRaceSuite extends AnyFunSuite {
  private val key = "ingest/manifest"

  /** v0..v8 at K = 2 in `memory://<name>`: refs [segment 0-1, index (2-3, 4-5), segment 6-7], tail [8]. */
  private def queue(name: String): ManifestHead = {
    val store = InMemoryStore.named(name)
    val producer = new Producer(store, ProducerConfig(flushInterval = 1.hour, manifestSegmentEntries = 2))
    try (0 until 9).foreach { i => producer.produce(Seq(s"v$i".getBytes(UTF_8))); producer.flush() }
    finally producer.close()
    val h = head(store)
    assert(h.refs.map(_.level) == Seq(0, 1, 0))
    h
  }
  private def head(store: ObjectStore): ManifestHead = ManifestHead.parse(store.get(key).get.bytes, key)
  private def location(name: String) = QueueLocation(s"racing://$name", key, "ingest", Map.empty)

  /** `consumer` dequeues through `through`; the segments and index objects that dropped are deleted, as GC does. */
  private def dequeueAndCollect(store: ObjectStore, consumer: Consumer, through: Long): Unit = {
    val tree = new SegmentTree(new ManifestStore(store, key))
    val before = tree.reachableKeys(head(store)).toOption.get
    var acked = -1L
    while (acked < through) consumer.nextDescriptors((through - acked).toInt).foreach { d => consumer.ack(d.sequence); acked = d.sequence }
    consumer.flush()
    val dropped = before -- tree.reachableKeys(head(store)).toOption.get
    assert(dropped.nonEmpty)
    dropped.foreach(store.delete)
  }

  private def sequences(parts: Array[org.apache.spark.sql.connector.read.InputPartition]): Seq[Long] = parts.toSeq.flatMap {
    case s: OsqueueSlicePartition => s.from until s.until
    case b: OsqueueInputPartition => b.descriptors.map(_.sequence)
    case other => fail(s"unexpected partition $other")
  }

  test("spark.read plans from the head read again when a segment or index object is dequeued and collected meanwhile") {
    for (gone <- Seq(0, 1)) {
      val name = s"race-read-$gone"
      val h = queue(name)
      val store = InMemoryStore.named(name)
      RacingStores.before(name, h.refs(gone).key) {
        val c = new Consumer(store, ConsumerConfig(runGc = false))
        c.initialize()
        try dequeueAndCollect(store, c, 3)
        finally c.close()
      }
      val parts = new OsqueueBatch(BatchReadOptions(location(name), None, None, failOnDataLoss = true), null)
        .planInputPartitions()
      assert(store.get(h.refs(gone).key).isEmpty, "the race happened")
      // 0..3 were dequeued meanwhile: 0 and 1 are planned only if planned before the race (the planner's
      // read-ahead reaches the index object first), never twice, and 4..8 are planned from the new head.
      val planned = sequences(parts)
      assert(planned == (4L to 8L) || (gone == 1 && planned == Seq(0L, 1L) ++ (4L to 8L)), s"gone: ref $gone: $planned")
    }
  }

  private def realTime(name: String, epoch: Long, from: Long) = new OsqueueRealTimeReader(
    OsqueueRealTimePartition(location(name), "queue-id", epoch, Incarnation.of(epoch), from, 0, EntryTag.Delivered.Empty,
      failOnDataLoss = true, pollIntervalMs = 1, maxPollIntervalMs = 1, initialWaitMs = 1),
    Array(0), None)

  private def value(r: OsqueueRealTimeReader): String = new String(r.get().getBinary(0), UTF_8)

  test("the real-time reader goes on past an index object its own query's dequeue expanded and GC collected") {
    val name = "race-realtime"
    val h = queue(name)
    val store = InMemoryStore.named(name)
    val owner = new Consumer(store, ConsumerConfig(runGc = false))
    val epoch = owner.initialize()
    RacingStores.before(name, h.refs(1).key)(dequeueAndCollect(store, owner, 3))
    val reader = realTime(name, epoch, from = 4)
    try {
      val got = (4 to 8).map { _ => assert(reader.next()); value(reader) }
      assert(got == (4 to 8).map(i => s"v$i"))
      assert(store.get(h.refs(1).key).isEmpty, "the race happened")
    } finally { reader.close(); owner.close() }
  }

  test("the real-time reader of a query taken over meanwhile fails with the fence error, not as corrupt") {
    val name = "race-realtime-fenced"
    val h = queue(name)
    val store = InMemoryStore.named(name)
    val owner = new Consumer(store, ConsumerConfig(runGc = false))
    val epoch = owner.initialize()
    val other = new Consumer(store, ConsumerConfig(runGc = false))
    RacingStores.before(name, h.refs(1).key) { other.initialize(); dequeueAndCollect(store, other, 5) }
    val reader = realTime(name, epoch, from = 4)
    try {
      val e = intercept[osqueue.FencedException](reader.next())
      assert(e.ownEpoch == epoch && e.currentEpoch != epoch)
    } finally { reader.close(); other.close(); owner.close() }
  }
}
