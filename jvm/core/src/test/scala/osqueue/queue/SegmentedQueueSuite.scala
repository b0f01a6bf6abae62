package osqueue.queue

import java.util.concurrent.{Executors, TimeUnit}

import scala.collection.mutable.ArrayBuffer
import scala.concurrent.duration._
import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{AmbiguousCommitException, Clock, InvalidConfigException, StoreException, SystemClock}
import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.{BatchNames, ManifestHead, SegmentNames}
import osqueue.gc.GarbageCollector
import osqueue.metrics.MetricsRegistry
import osqueue.producer.ProducerConfig
import osqueue.store.{CasOutcome, InMemoryStore, ObjectInfo, ObjectStore, ObjectVersion, VersionedObject}
import osqueue.testing.{FaultInjectingStore, ManualClock}
import osqueue.testing.FaultInjectingStore.Fault

/** Queues past K entries (docs/format.md §2.2): producers seal, consumers read lazily, GC knows segments. */
class SegmentedQueueSuite extends AnyFunSuite {
  private val key = "ingest/manifest"
  private val fastRetry = RetryPolicy(baseDelayMs = 1, maxDelayMs = 5)
  private val grace = 10.minutes.toMillis

  private def appender(store: ObjectStore, k: Int, clock: Clock = SystemClock, policy: RetryPolicy = fastRetry) =
    new ManifestAppender(new ManifestStore(store, key), policy, clock, new MetricsRegistry, grace, segmentEntries = k)

  private def pending(store: ObjectStore, clock: Clock = SystemClock): PendingLocation = {
    val upload = () => { val k = BatchNames.newKey("ingest", clock.nowMillis()); store.put(k, Array[Byte](1)); k }
    new PendingLocation(upload(), IndexedSeq.empty, upload)
  }

  private def head(store: ObjectStore): ManifestHead = ManifestHead.parse(store.get(key).get.bytes, key)
  /** The segments the head reaches (through index objects, docs/format.md §2.2). */
  private def segments(store: ObjectStore): IndexedSeq[osqueue.format.SegmentRef] =
    new SegmentTree(new ManifestStore(store, key)).leaves(head(store), 0, Long.MaxValue).toIndexedSeq
  private def allLocations(store: ObjectStore): IndexedSeq[String] =
    new ManifestStore(store, key).decode(new ManifestStore(store, key).read()).entries.map(_.location)
  private def consumer(store: ObjectStore, ackBatchSize: Int = 100) =
    new Consumer(store, ConsumerConfig(runGc = false, ackBatchSize = ackBatchSize, retry = fastRetry))

  /** Reads everything left (acking as it goes) and returns the locations delivered. */
  private def drain(c: Consumer): IndexedSeq[String] = {
    val out = ArrayBuffer.empty[String]
    var ds = c.nextDescriptors(1000)
    while (ds.nonEmpty) {
      out ++= ds.map(_.location)
      c.ackThrough(ds.last.sequence)
      ds = c.nextDescriptors(1000)
    }
    out.toIndexedSeq
  }

  test("random appends, reads, acks and consumer restarts with a small K deliver exactly what was produced, in order") {
    for (seed <- 1 to 40) {
      val rnd = new Random(seed)
      val k = 1 + rnd.nextInt(4)
      val store = InMemoryStore.fresh()
      val producer = appender(store, k)
      val produced = ArrayBuffer.empty[String]
      val delivered = ArrayBuffer.empty[String] // acked prefix + handed out since
      var acked = 0 // how many of `delivered` are acked
      var c = consumer(store, ackBatchSize = 1 + rnd.nextInt(3))
      c.initialize(None)
      var handedOut = Option.empty[Long]
      for (_ <- 0 until 120) rnd.nextInt(10) match {
        case 0 | 1 | 2 | 3 =>
          val group = IndexedSeq.fill(1 + rnd.nextInt(3))(pending(store))
          producer.append(group)
          produced ++= group.map(_.location)
          val h = head(store)
          assert(h.tailSize <= k + 3, s"seed $seed: a tail of ${h.tailSize} entries with K = $k")
        case 4 | 5 | 6 =>
          val ds = c.nextDescriptors(1 + rnd.nextInt(5))
          delivered ++= ds.map(_.location)
          ds.lastOption.foreach(d => handedOut = Some(d.sequence))
        case 7 =>
          // sequences start at 0 and each location is appended once: the next to ack is `acked`
          if (delivered.size > acked) { c.ack(acked.toLong); acked += 1 }
        case 8 =>
          handedOut.filter(_ => delivered.size > acked).foreach { s => c.ackThrough(s); acked = delivered.size }
        case _ =>
          // A restart: acked entries are dequeued by close(); the rest is delivered again.
          c.close()
          val incarnation = c.incarnation
          val lastAcked = if (acked == 0) None else Some(acked - 1L)
          c = consumer(store, ackBatchSize = 1 + rnd.nextInt(3))
          c.initialize(lastAcked, lastAcked.flatMap(_ => incarnation))
          delivered.remove(acked, delivered.size - acked)
          handedOut = lastAcked
      }
      delivered ++= drain(c)
      assert(delivered == produced, s"seed $seed, K = $k")
      c.close()
      val h = head(store)
      assert(h.isEmpty && !h.isSegmented, s"seed $seed: a drained queue's head is v1")
    }
  }

  test("a consumer holds one segment at a time: a large read returns at most a segment's entries") {
    val store = InMemoryStore.fresh()
    val producer = appender(store, 3)
    val produced = (0 until 20).map { _ =>
      val p = pending(store); producer.append(IndexedSeq(p)); p.location
    }
    assert(segments(store).size == 6)
    val c = consumer(store)
    c.initialize(None)
    val first = c.nextDescriptors(1000)
    assert(first.size == 3, "only the first segment was read")
    c.ackThrough(first.last.sequence)
    assert(segments(store).size == 5, "the dequeue dropped the consumed segment")
    assert(first.map(_.location) ++ drain(c) == produced)
  }

  test("a crash between the segment write and the head CAS leaves an orphan segment, nothing lost or doubled; GC removes it") {
    val clock = new ManualClock(System.currentTimeMillis())
    val inner = InMemoryStore.fresh(clock)
    // the third manifest write is the one that seals (K = 2): it fails before reaching the store
    val store = new FaultInjectingStore(inner, (k, n) => if (k == key && n == 2) Fault.FailBefore else Fault.None)
    val dying = appender(store, 2, clock, RetryPolicy(baseDelayMs = 1, maxDelayMs = 1, maxAttempts = 1))
    val first = IndexedSeq.fill(2)(pending(inner, clock))
    first.foreach(p => dying.append(IndexedSeq(p)))
    val third = pending(inner, clock)
    intercept[AmbiguousCommitException](dying.append(IndexedSeq(third))) // the producer gives up ("crashes")
    val orphans = inner.list(SegmentNames.prefix(key)).map(_.key)
    assert(orphans.size == 1 && !head(inner).isSegmented, "the segment was written, the head never listed it")
    // a new producer appends the third batch again: it seals anew
    appender(inner, 2, clock).append(IndexedSeq(third))
    val listed = head(inner).refs.map(_.key)
    assert(listed.size == 1 && listed != orphans)
    assert(allLocations(inner) == (first :+ third).map(_.location))
    // GC: the orphan goes once a head is written a grace period after it; the listed segment stays
    clock.advance(grace + 1)
    val fourth = pending(inner, clock)
    appender(inner, 2, clock).append(IndexedSeq(fourth))
    val r = new GarbageCollector(inner, key, "ingest", grace.millis, clock).runOnce()
    assert(r.deleted.toSet == orphans.toSet)
    assert(inner.list(SegmentNames.prefix(key)).map(_.key) == listed)
    assert(allLocations(inner) == (first :+ third :+ fourth).map(_.location))
  }

  test("a write whose reply was lost and that was sealed into a segment before the re-read is found there (no duplicate)") {
    val inner = InMemoryStore.fresh()
    val other = appender(inner, 2)
    @volatile var armed = false
    // Applies the write, lets another producer append enough to seal it, then loses the reply.
    val store = new ObjectStore {
      def uri: String = inner.uri
      def get(k: String): Option[VersionedObject] = inner.get(k)
      def put(k: String, b: Array[Byte]): Unit = inner.put(k, b)
      def putIfAbsent(k: String, b: Array[Byte]): CasOutcome = inner.putIfAbsent(k, b)
      def list(p: String): Seq[ObjectInfo] = inner.list(p)
      def delete(k: String): Unit = inner.delete(k)
      def putIfVersionMatches(k: String, b: Array[Byte], v: ObjectVersion): CasOutcome = {
        val outcome = inner.putIfVersionMatches(k, b, v)
        if (armed && k == key && outcome.isInstanceOf[CasOutcome.Written]) {
          armed = false
          (0 until 3).foreach(_ => other.append(IndexedSeq(pending(inner))))
          throw new StoreException("injected: reply lost")
        }
        outcome
      }
    }
    val a = appender(store, 2)
    a.append(IndexedSeq(pending(inner)))
    val mine = pending(inner)
    armed = true
    val sequences = a.append(IndexedSeq(mine))
    assert(sequences == IndexedSeq(1L))
    assert(head(inner).tailLocationAt(1).isEmpty, "the write was sealed into a segment before the re-read")
    val all = allLocations(inner)
    assert(all.count(_ == mine.location) == 1 && all.size == 5 && all(1) == mine.location)
  }

  test("GC keeps batches referenced only from segments and reads no segment to do so") {
    val t0 = 1767225600000L
    val clock = new ManualClock(t0 - 1.hour.toMillis)
    val inner = InMemoryStore.fresh(clock)
    val orphanBatch = { val k = BatchNames.newKey("ingest", t0 - 1000); inner.put(k, Array[Byte](1)); k } // written an hour ago
    val producer = appender(inner, 2, clock)
    val queued = (0 until 7).map { i =>
      clock.set(t0 + i * 1000); val p = pending(inner, clock); producer.append(IndexedSeq(p)); p.location
    }
    assert(segments(inner).size == 3 && head(inner).refs.map(_.level) == Seq(0, 1))
    clock.set(t0 + 1.hour.toMillis)
    // every segment read fails: GC must not need them (it reads the index object)
    val store = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def get(k: String): Option[VersionedObject] =
        if (k.endsWith(".segment")) throw new StoreException("no segment reads") else super.get(k)
    }
    val r = new GarbageCollector(store, key, "ingest", grace.millis, clock).runOnce()
    assert(r.deleted == Seq(orphanBatch))
    queued.foreach(l => assert(inner.get(l).isDefined, l))
    // the tail's batch, the 3 segments and the index object; the sealed batches
    assert(r.keptReferenced == 1 + 3 + 1 && r.keptNewerThanOldest == 6)
  }

  test("concurrent producers sealing under contention leave every location exactly once") {
    val store = InMemoryStore.fresh()
    val pool = Executors.newFixedThreadPool(4)
    val futures = (0 until 4).map { _ =>
      pool.submit(() => {
        val q = new QueueProducer(new ManifestStore(store, key), fastRetry, SystemClock, new MetricsRegistry, grace,
          segmentEntries = 3)
        try (0 until 25).map { _ =>
            val p = pending(store); q.enqueue(p).get(60, TimeUnit.SECONDS); p.location
          }
        finally q.close()
      })
    }
    val expected = futures.flatMap(_.get(120, TimeUnit.SECONDS)).toSet
    pool.shutdown()
    val all = allLocations(store)
    assert(all.size == 100 && all.toSet == expected)
    assert(head(store).isSegmented && head(store).tailSize <= 3 + 1)
    val c = consumer(store); c.initialize(None)
    assert(drain(c).toSet == expected)
  }

  test("a listed index object that is missing is CorruptManifest for every reader, never skipped") {
    val store = InMemoryStore.fresh()
    val producer = appender(store, 2)
    (0 until 7).foreach(_ => producer.append(IndexedSeq(pending(store))))
    val lost = head(store).refs(1) // an index object over segments [2, 3] and [4, 5]
    assert(lost.isIndex)
    store.delete(lost.key)
    val full = intercept[osqueue.CorruptManifestException](new ManifestStore(store, key).decode(new ManifestStore(store, key).read()))
    assert(full.getMessage.contains(lost.key) && full.getMessage.contains("listed but missing"))
    val c = consumer(store)
    c.initialize(None)
    val first = c.nextDescriptors(10) // the first segment is there
    assert(first.map(_.sequence) == Seq(0L, 1L))
    val e = intercept[osqueue.CorruptManifestException](c.nextDescriptors(10))
    assert(e.getMessage.contains(lost.key))
  }

  test("a segment that ends in replayed sink copies does not make the consumer report an empty queue") {
    val store = InMemoryStore.fresh()
    val producer = appender(store, 3)
    def tagged(attempt: String) = {
      val p = pending(store)
      new PendingLocation(p.location, IndexedSeq.empty, p.reupload, osqueue.format.EntryTag("w", 0, attempt).encode)
    }
    // segment [0..2]: the sink's batch 0, then two replayed copies of it; then an untagged entry (the tail)
    val entries = IndexedSeq(tagged("a1"), tagged("a2"), tagged("a2"), pending(store))
    entries.foreach { p =>
      store.put(p.location, osqueue.format.BatchCodec.encode(Seq(Array[Byte](1)), osqueue.format.Compression.None))
      producer.append(IndexedSeq(p))
    }
    assert(head(store).refs.map(_.lastSequence) == Seq(2L))
    val c = consumer(store)
    c.initialize(None)
    val first = c.nextBatch()
    assert(first.map(_.sequence).contains(0L))
    c.ack(0L)
    // 1 and 2 are skipped copies ending the segment: the next batch is 3, not None
    assert(c.nextBatch().map(_.sequence).contains(3L))
    val d = consumer(store)
    d.initialize(None) // a fresh consumer (c's acks were not dequeued): the same through nextDescriptors
    assert(d.nextDescriptors(1).map(_.sequence) == Seq(0L))
    assert(d.nextDescriptors(5).map(_.sequence) == Seq(3L))
  }

  test("a fenced consumer cannot dequeue a segment nor read the next one") {
    val store = InMemoryStore.fresh()
    val producer = appender(store, 2)
    (0 until 9).foreach(_ => producer.append(IndexedSeq(pending(store))))
    val a = consumer(store)
    a.initialize(None)
    val read = a.nextDescriptors(10) // the first segment
    val b = consumer(store)
    b.initialize(None)
    val before = store.get(key).get.bytes
    intercept[osqueue.FencedException](a.ackThrough(read.last.sequence))
    intercept[osqueue.FencedException](a.nextDescriptors(10))
    assert(store.get(key).get.bytes.sameElements(before), "nothing the fenced consumer did landed")
    assert(drain(b).size == 9)
  }

  test("manifestSegmentEntries must be at least 1") {
    val e = intercept[InvalidConfigException](ProducerConfig(manifestSegmentEntries = 0))
    assert(e.option == "manifestSegmentEntries")
  }
}
