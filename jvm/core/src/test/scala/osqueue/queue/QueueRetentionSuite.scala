package osqueue.queue

import java.util.concurrent.{CompletionException, ConcurrentHashMap, CopyOnWriteArrayList}

import scala.collection.mutable.ArrayBuffer
import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{
  DataLossException,
  IllegalQueueStateException,
  InvalidConfigException,
  QueueFullException,
  SystemClock,
  SystemRandomSource
}
import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.{BatchCodec, BatchIntegrity, Compression, ManifestHead, MetadataItem}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.InMemoryStore
import osqueue.testing.ManualClock

/**
 * Retention and size caps (ADR 0005, docs/format.md §2.3) on the in-memory store, case for case as
 * tests/python/test_retention.py: set/clear as one CAS each, `queued_bytes` kept by appends and cuts,
 * `backpressure` refusing (never dropping) with QueueFullException, and `drop_oldest` cutting the oldest
 * entries, reported to each lagging reader with exact counts.
 */
class QueueRetentionSuite extends AnyFunSuite {
  private val Key = "ingest/manifest"
  private val AtOnce = QueueFullWait(0L, 1L)

  private def batch(i: Int): Array[Byte] = BatchCodec.encode(Seq(row(i).getBytes), Compression.None)
  private def row(i: Int): String = s"row-$i" * (1 + i % 3)
  private def manifest(store: InMemoryStore) = new ManifestStore(store, Key)
  private def queueProducer(store: InMemoryStore, wait: QueueFullWait = AtOnce, metrics: MetricsRegistry = new MetricsRegistry,
      k: Int = 4) =
    new QueueProducer(manifest(store), RetryPolicy(), SystemClock, metrics, 10.minutes.toMillis, random = SystemRandomSource,
      segmentEntries = k, queueFullWait = wait)

  /** Appends batches `first .. first + n - 1`, each with its integrity record; their sequences. */
  private def produce(store: InMemoryStore, first: Int, n: Int, qp0: Option[QueueProducer] = None): Seq[Long] = {
    val qp = qp0.getOrElse(queueProducer(store))
    val out = (first until first + n).map { i =>
      val (loc, data) = (f"ingest/b$i%04d.batch", batch(i))
      store.put(loc, data)
      val p = new PendingLocation(loc, IndexedSeq(MetadataItem(0, 1000L + i, Array.emptyByteArray)), () => loc,
        BatchIntegrity.record(data))
      try qp.enqueue(p).join().longValue
      catch { case e: CompletionException => throw e.getCause }
    }
    if (qp0.isEmpty) qp.close()
    out
  }
  private def head(store: InMemoryStore) = ManifestHead.parse(store.get(Key).get.bytes, Key)
  private def size(lo: Int, hi: Int): Long = (lo until hi).map(batch(_).length.toLong).sum
  private def subs(store: InMemoryStore) = new Subscriptions(manifest(store), RetryPolicy(), SystemClock, new MetricsRegistry)
  private def consumer(store: InMemoryStore, sub: String, config: ConsumerConfig => ConsumerConfig = identity,
      metrics: MetricsRegistry = new MetricsRegistry): Consumer = {
    val c = new Consumer(store, config(ConsumerConfig(runGc = false, subscription = Some(sub))), SystemClock, metrics)
    c.initialize()
    c
  }
  private def readAll(c: Consumer): List[String] = {
    val out = ArrayBuffer.empty[String]
    Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.foreach { b =>
      out ++= b.entries.map(new String(_)); c.ack(b.sequence)
    }
    c.flush()
    out.toList
  }
  private def retention(h: ManifestHead) = h.sections.retention.get

  test("set and clear keep queued_bytes and give the v1 bytes back") {
    val store = InMemoryStore.fresh()
    produce(store, 0, 3)
    val qr = new QueueRetention(manifest(store))
    val r = qr.set(maxEntries = 100, maxBytes = 1L << 20)
    assert(r.queuedBytes == size(0, 3) && r.policy == 0 && head(store).version == 3)
    assert(qr.get().contains(r))
    produce(store, 3, 6) // past K = 4: segments are sealed, and the sum follows
    assert(retention(head(store)).queuedBytes == size(0, 9))
    subs(store).create("a")
    val c = consumer(store, "a")
    (0 until 5).foreach { _ => c.ack(c.nextBatch().get.sequence) } // an ack's cut (through a segment) subtracts what it removes
    c.flush()
    assert(head(store).firstSequence == 5 && retention(head(store)).queuedBytes == size(5, 9))
    c.close()
    subs(store).drop("a")
    assert(qr.clear() && !qr.clear() && qr.get().isEmpty)
    val h = head(store) // no section left: v1, or a segmented head (v3 for its checksum, §2.3)
    assert(h.sections.isEmpty && (h.version == 1 || h.isSegmented))
    assert(intercept[InvalidConfigException](qr.set(policy = "newest")).getMessage.contains("'policy'"))
    assert(intercept[InvalidConfigException](qr.set(maxEntries = -1)).getMessage.contains("'max_entries'"))
    val fresh = InMemoryStore.fresh() // a fresh queue shows the round trip byte for byte
    produce(fresh, 0, 2)
    val before = fresh.get(Key).get.bytes
    new QueueRetention(manifest(fresh)).set(maxEntries = 5)
    new QueueRetention(manifest(fresh)).clear()
    assert(fresh.get(Key).get.bytes.sameElements(before))
    val none = intercept[IllegalQueueStateException](new QueueRetention(manifest(InMemoryStore.fresh())).set(maxEntries = 1))
    assert(none.getMessage.contains("no queue"))
  }

  test("backpressure refuses appends past a cap and drops nothing with 4 concurrent producers") {
    val store = InMemoryStore.fresh()
    produce(store, 0, 1)
    new QueueRetention(manifest(store)).set(maxEntries = 12)
    val ok = new ConcurrentHashMap[Int, CopyOnWriteArrayList[Int]]()
    val full = new ConcurrentHashMap[Int, Integer]()
    val errors = new CopyOnWriteArrayList[Throwable]()
    val threads = (0 until 4).map { p =>
      new Thread(() =>
        try {
          // Each with its own appender: the producers' writes meet in the CAS loop.
          val qp = queueProducer(store, k = ManifestHead.DefaultSegmentEntries)
          ok.put(p, new CopyOnWriteArrayList[Int]()); full.put(p, 0)
          (0 until 6).foreach { i =>
            val n = 100 * (p + 1) + i
            try { produce(store, n, 1, Some(qp)); ok.get(p).add(n) }
            catch {
              case e: QueueFullException =>
                assert(e.getMessage.contains("max_entries 12") && e.getMessage.contains(Key))
                full.put(p, full.get(p) + 1)
            }
          }
          qp.close()
        } catch { case e: Throwable => errors.add(e) })
    }
    threads.foreach(_.start())
    threads.foreach(_.join())
    assert(errors.isEmpty, errors)
    val h = head(store)
    val accepted = ok.values().asScala.flatMap(_.asScala).toSet
    assert(h.depth == 12 && accepted.size == 11 && full.values().asScala.map(_.intValue).sum == 24 - 11)
    val locations = h.tailLocations.map(_._2) // K = 2048 here: every entry is in the tail
    assert(locations.map(_.substring(8, 12).toInt).toSet == Set(0) ++ accepted)
    assert(locations.distinct.size == 12) // none lost, none twice; the refused ones are not in
    assert(h.firstSequence == 0 && retention(h).queuedBytes == locations.map(store.get(_).get.bytes.length.toLong).sum)
  }

  test("a backpressured producer waits for room, then appends") {
    val store = InMemoryStore.fresh()
    produce(store, 0, 3)
    subs(store).create("a")
    new QueueRetention(manifest(store)).set(maxEntries = 3)
    val waits = new MetricsRegistry
    val qp = queueProducer(store, QueueFullWait(30000L, 5L), waits)
    val done = new CopyOnWriteArrayList[Long]()
    val t = new Thread(() => produce(store, 3, 1, Some(qp)).foreach(done.add))
    t.start()
    val c = consumer(store, "a")
    val b = c.nextBatch().get
    assert(done.isEmpty) // still full: the producer waits
    c.ack(b.sequence)
    c.flush() // one entry leaves: the waiting append fits now
    t.join(20000)
    assert(done.asScala.toList == List(3L) && head(store).depth == 3)
    qp.close()
    c.close()
  }

  test("drop_oldest reports exact counts to a lagging subscription and loses nothing else") {
    val store = InMemoryStore.fresh()
    produce(store, 0, 2)
    subs(store).create("fast")
    subs(store).create("slow")
    new QueueRetention(manifest(store)).set(maxEntries = 4, policy = "drop_oldest")
    val registry = new MetricsRegistry
    val losses = new CopyOnWriteArrayList[DataLossException]()
    val slow = consumer(store, "slow", _.copy(failOnDataLoss = false, onDataLoss = { e => losses.add(e); () }), registry)
    val fast = consumer(store, "fast")
    assert(readAll(fast) == (0 until 2).map(row).toList)
    val b = slow.nextBatch().get // slow reads 0, then lags
    assert(b.sequence == 0)
    slow.ack(0)
    slow.flush()
    val producerMetrics = new MetricsRegistry
    val qp = queueProducer(store, metrics = producerMetrics)
    val gotFast = ArrayBuffer.empty[String]
    (2 until 12).foreach { i =>
      produce(store, i, 1, Some(qp))
      gotFast ++= readAll(fast) // fast keeps up: never behind low_water
    }
    qp.close()
    val h = head(store)
    assert(h.firstSequence == 8 && h.depth == 4) // the cap holds
    assert(retention(h).queuedBytes == size(8, 12))
    assert(producerMetrics.counterValue(MetricNames.EntriesDropped) == 7) // 1..7: slow's next was 1
    assert(producerMetrics.counterValue(MetricNames.BytesDropped) == size(1, 8))
    assert(gotFast.toList == (2 until 12).map(row).toList)
    val rest = readAll(slow)
    // Entry 1 was already in slow's read-ahead (the tail it read with 0) and its batch is still there (no GC):
    // it is delivered; 2..7 are reported lost, exactly; every entry is either delivered or reported, once.
    assert(losses.asScala.map(e => (e.subscription, e.first, e.count)).toList == List((Some("slow"), 2L, 6L)))
    assert(registry.counterValue(MetricNames.DataLossEvents) == 1 && registry.counterValue(MetricNames.DroppedEntries) == 6)
    assert(rest == Seq(1, 8, 9, 10, 11).map(row).toList) // nothing else lost
    assert(head(store).depth == 0) // both passed everything: gone
    fast.close()
    slow.close()
  }

  test("a reader opened behind low_water gets DataLossException once, then reads on") {
    val store = InMemoryStore.fresh()
    produce(store, 0, 1)
    subs(store).create("late")
    new QueueRetention(manifest(store)).set(maxBytes = size(6, 9), policy = "drop_oldest")
    produce(store, 1, 8) // K = 4: the cut walks segments for their byte lengths
    val h = head(store)
    assert(h.firstSequence == 6 && retention(h).queuedBytes == size(6, 9))
    val c = consumer(store, "late")
    val lost = intercept[DataLossException](c.nextBatch())
    assert((lost.subscription, lost.first, lost.count) == ((Some("late"), 0L, 6L)))
    assert(readAll(c) == (6 until 9).map(row).toList)
    c.close()
  }

  test("enforce cuts by store time, never early") {
    val clock = new ManualClock(1700000000000L)
    val store = InMemoryStore.fresh(clock)
    produce(store, 0, 3) // batches 0..2 at T0 by the store's clock
    clock.advance(60000)
    produce(store, 3, 2) // 3, 4 a minute later; the head is written now too
    subs(store).create("r")
    val qr = new QueueRetention(manifest(store))
    qr.set(maxAgeMs = 60000)
    assert(qr.enforce() == 0) // exactly max_age old is not older than it
    clock.advance(1)
    produce(store, 5, 1) // the head's last-modified moves on: 0..2 are now past max_age, 3.. are not
    assert(qr.enforce() == 3)
    val h = head(store)
    assert(h.firstSequence == 3 && retention(h).queuedBytes == size(3, 6))
    val c = consumer(store, "r", _.copy(failOnDataLoss = false))
    assert(readAll(c) == (3 until 6).map(row).toList)
    assert(c.metrics.counterValue(MetricNames.DroppedEntries) == 3)
    c.close()
    assert(head(store).sections.subscription("r").map(_.next).contains(6L))
  }

  test("a Producer gets QueueFullException past a backpressure cap; clear gives the v1 bytes back") {
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour))
    (0 until 3).foreach { i => p.produce(Seq(s"r$i".getBytes)); p.flush() }
    p.close()
    val v1 = store.get(Key).get.bytes
    val qr = new QueueRetention(manifest(store))
    qr.set(maxEntries = 3, maxBytes = 1L << 20)
    assert(qr.get().exists(r => r.maxEntries == 3 && r.maxBytes == (1L << 20) && r.policy == 0 && r.queuedBytes > 0))
    assert(QueueRetention.PolicyNames(qr.get().get.policy) == "backpressure")
    val withCap = store.get(Key).get.bytes
    val full = new Producer(store, ProducerConfig(flushInterval = 1.hour, queueFullTimeout = Duration.Zero))
    val h = full.produce(Seq("r3".getBytes))
    full.flush()
    assert(intercept[QueueFullException](h.awaitDurable(30.seconds)).getMessage.contains("max_entries 3"))
    full.close()
    assert(store.get(Key).get.bytes.sameElements(withCap)) // nothing appended, nothing dropped
    assert(intercept[InvalidConfigException](ProducerConfig(queueFullRetryInterval = Duration.Zero))
        .getMessage.contains("'queueFullRetryInterval'"))
    assert(qr.clear())
    assert(store.get(Key).get.bytes.sameElements(v1)) // RFC v1 again, byte for byte
    assert(!qr.clear())
  }
}
