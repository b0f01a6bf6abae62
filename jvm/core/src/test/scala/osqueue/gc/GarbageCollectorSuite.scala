package osqueue.gc

import scala.concurrent.duration._

import java.util.concurrent.atomic.AtomicInteger

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{FencedException, StoreException}

import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.{BatchNames, Manifest, ManifestCodec, ManifestHead, ManifestEdits, NewEntry}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.queue.{ManifestAppender, ManifestStore, PendingLocation, RetryPolicy}
import osqueue.store.{InMemoryStore, ObjectStore, VersionedObject}
import osqueue.testing.{FaultInjectingStore, ManualClock}

class GarbageCollectorSuite extends AnyFunSuite {
  private val t0 = 1767225600000L
  private val grace = 10.minutes

  /** A batch named at `ms` and written when the store's clock (`clock`) read `ms`, so it is that old. */
  private def batchAt(store: InMemoryStore, clock: ManualClock, ms: Long): String = {
    val now = clock.nowMillis()
    val k = BatchNames.newKey("ingest", ms)
    clock.set(ms); store.put(k, Array[Byte](1)); clock.set(now)
    k
  }
  private def enqueue(store: InMemoryStore, locations: String*): Unit = {
    val raw = store.get("ingest/manifest").map(_.bytes).getOrElse(ManifestCodec.EmptyBytes)
    store.put("ingest/manifest", ManifestEdits.append(raw, locations.map(NewEntry(_, IndexedSeq.empty)), "m")._1)
  }

  test("should delete only unreferenced, old-enough batches older than the oldest entry") {
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val store = InMemoryStore.fresh(clock)
    val orphan = batchAt(store, clock, t0)
    val referenced = batchAt(store, clock, t0 + 1000)
    val newerThanOldest = batchAt(store, clock, t0 + 2000) // unreferenced but may be about to be enqueued
    val inGrace = batchAt(store, clock, clock.nowMillis() - 60000) // young
    store.put("ingest/not-a-ulid.batch", Array[Byte](1))
    store.put("ingest/notes.txt", Array[Byte](1))
    store.put("ingest/sub/" + BatchNames.newKey("", t0), Array[Byte](1)) // not directly under the prefix
    enqueue(store, referenced)
    val gc = new GarbageCollector(store, "ingest/manifest", "ingest", grace, clock)
    val dry = gc.runOnce(dryRun = true)
    assert(dry.deleted == Seq(orphan) && store.get(orphan).isDefined)
    val r = gc.runOnce()
    assert(r.deleted == Seq(orphan))
    assert(store.get(orphan).isEmpty)
    Seq(referenced, newerThanOldest, inGrace).foreach(k => assert(store.get(k).isDefined, k))
    assert(r.keptReferenced == 1 && r.keptNewerThanOldest == 2 && r.skippedNotBatch == 4) // + ingest/osqueue.owner
  }

  test("should skip the oldest-entry rule on an empty manifest but keep the grace period") {
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val store = InMemoryStore.fresh(clock)
    val old = batchAt(store, clock, t0)
    val young = batchAt(store, clock, clock.nowMillis() - 1000)
    store.put("ingest/manifest", ManifestCodec.encode(Manifest.Empty.copy(nextSequence = 9)))
    val r = new GarbageCollector(store, "ingest/manifest", "ingest", grace, clock).runOnce()
    assert(r.deleted == Seq(old) && r.keptInGrace == 1 && store.get(young).isDefined)
  }

  test("should keep deleting nothing a consumer still needs while producers and GC run together") {
    val clock = new ManualClock(System.currentTimeMillis())
    val store = InMemoryStore.fresh(clock)
    val p = new Producer(store, ProducerConfig(flushInterval = 5.millis), clock)
    (0 until 20).foreach(i => p.produce(Seq(s"e$i".getBytes)).awaitDurable(10.seconds))
    p.close()
    clock.advance(1.hour.toMillis) // everything is far past the grace period now
    val c = new Consumer(store, ConsumerConfig(runGc = false), clock)
    c.initialize()
    val gc = new GarbageCollector(store, "ingest/manifest", "ingest", grace, clock)
    (0 until 20).foreach { i =>
      val b = c.nextBatch().get
      assert(new String(b.entries.head) == s"e$i")
      c.ackThrough(b.sequence)
      gc.runOnce()
    }
    assert(
      store.list("ingest/").map(_.key).sorted ==
        Seq("ingest/manifest", "ingest/manifest.dequeued", "ingest/manifest.incarnation", "ingest/osqueue.owner"),
      "consumed batches were not collected (only the manifest and its sidecars may remain)")
  }

  test("should never let a stalled producer enqueue a batch GC deleted") {
    val clock = new ManualClock(System.currentTimeMillis())
    val store = InMemoryStore.fresh(clock)
    // The stalled producer's upload happened long ago; GC has since deleted it as an orphan.
    val stale = batchAt(store, clock, clock.nowMillis() - 20.minutes.toMillis)
    store.put("ingest/manifest", ManifestCodec.EmptyBytes)
    assert(new GarbageCollector(store, "ingest/manifest", "ingest", grace, clock).runOnce().deleted == Seq(stale))
    val reupload = () => batchAt(store, clock, clock.nowMillis())
    val qp = new osqueue.queue.QueueProducer(new osqueue.queue.ManifestStore(store, "ingest/manifest"),
      osqueue.queue.RetryPolicy(), clock, new osqueue.metrics.MetricsRegistry, grace.toMillis)
    val pending = new osqueue.queue.PendingLocation(stale, IndexedSeq.empty, reupload)
    qp.enqueue(pending).get()
    qp.close()
    val m = ManifestCodec.decode(store.get("ingest/manifest").get.bytes, "m")
    assert(m.entries.map(_.location) == Seq(pending.location) && pending.location != stale)
    assert(store.get(pending.location).isDefined, "the manifest points at a missing file")
  }

  test("should keep an unreferenced batch older than the oldest entry while it is in grace") {
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val store = InMemoryStore.fresh(clock)
    val young = batchAt(store, clock, clock.nowMillis() - 2.minutes.toMillis) // older than the oldest entry, young
    val referenced = batchAt(store, clock, clock.nowMillis() - 1.minute.toMillis)
    enqueue(store, referenced)
    val r = new GarbageCollector(store, "ingest/manifest", "ingest", grace, clock).runOnce()
    assert(r.deleted.isEmpty && r.keptInGrace == 1 && r.keptNewerThanOldest == 0 && r.keptReferenced == 1)
    assert(store.get(young).isDefined)
  }

  test("should count a failed delete and delete the file on the next cycle") {
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val store = InMemoryStore.fresh(clock)
    val orphan = batchAt(store, clock, t0)
    enqueue(store, batchAt(store, clock, t0 + 1000))
    val failures = new AtomicInteger(1)
    val flaky = new FaultInjectingStore(store, (_, _) => FaultInjectingStore.Fault.None) {
      override def delete(key: String): Unit =
        if (failures.getAndDecrement() > 0) throw new StoreException(s"injected: delete of '$key' failed")
        else super.delete(key)
    }
    val metrics = new MetricsRegistry
    val gc = new GarbageCollector(flaky, "ingest/manifest", "ingest", grace, clock, metrics)
    val first = gc.runOnce()
    assert(first.failed == Seq(orphan) && first.deleted.isEmpty && store.get(orphan).isDefined)
    assert(metrics.counterValue(MetricNames.GcFilesFailed) == 1 && metrics.counterValue(MetricNames.GcFilesDeleted) == 0)
    val second = gc.runOnce()
    assert(second.deleted == Seq(orphan) && second.failed.isEmpty && store.get(orphan).isEmpty)
    assert(metrics.counterValue(MetricNames.GcFilesFailed) == 1 && metrics.counterValue(MetricNames.GcFilesDeleted) == 1)
  }

  test("should keep no write power in a fenced consumer's background GC, which still collects orphans") {
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val store = InMemoryStore.fresh(clock)
    val referenced = batchAt(store, clock, t0)
    enqueue(store, referenced)
    val metrics = new MetricsRegistry
    val old = new Consumer(store, ConsumerConfig(runGc = true, gcInterval = 10.millis), clock, metrics)
    old.initialize()
    new Consumer(store, ConsumerConfig(runGc = false), clock).initialize()
    intercept[FencedException](old.nextBatch())
    val afterFence = store.get("ingest/manifest").get
    // docs/format.md §6: GC reads the newest manifest and checks no epoch, so the fenced consumer's
    // GC may still delete a true orphan (older than the oldest entry, past grace), nothing else.
    val orphan = batchAt(store, clock, t0 - 1000)
    val newer = batchAt(store, clock, t0 + 1000)
    val cycles = metrics.histogram(MetricNames.GcDuration)
    val start = cycles.count
    val deadline = System.nanoTime() + 10.seconds.toNanos
    while (cycles.count < start + 2 && System.nanoTime() < deadline) Thread.sleep(5) // one whole cycle after the orphan
    try {
      assert(cycles.count >= start + 2, "the fenced consumer's GC did not run")
      val now = store.get("ingest/manifest").get
      assert(now.version == afterFence.version && now.bytes.sameElements(afterFence.bytes), "fenced GC wrote the manifest")
      assert(store.get(referenced).isDefined && store.get(newer).isDefined)
      assert(store.get(orphan).isEmpty && metrics.counterValue(MetricNames.GcFilesDeleted) == 1)
    } finally old.close()
  }

  test("should delete nothing when its manifest is missing (a wrong manifest path)") {
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val store = InMemoryStore.fresh(clock)
    val referenced = (0 until 3).map(i => batchAt(store, clock, t0 + i))
    enqueue(store, referenced: _*)
    val e = intercept[osqueue.IllegalQueueStateException](
      new GarbageCollector(store, "wrong/manifest", "ingest", Duration.Zero, clock).runOnce())
    assert(e.getMessage.contains("no manifest at 'wrong/manifest'"), e.getMessage)
    referenced.foreach(k => assert(store.get(k).isDefined, s"GC deleted the real queue's batch $k"))
  }

  test("should refuse a second queue on a data prefix another queue owns: its producer and its GC") {
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val store = InMemoryStore.fresh(clock)
    val a = new Producer(store, ProducerConfig(manifestPath = "a/manifest", flushInterval = 1.hour), clock)
    a.produce(Seq("a0".getBytes)); a.flush(); a.close()
    val e = intercept[osqueue.InvalidConfigException](
      new Producer(store, ProducerConfig(manifestPath = "b/manifest", flushInterval = 1.hour), clock))
    assert(e.option == "dataPathPrefix" && e.getMessage.contains("a/manifest"), e.getMessage)
    // A queue b written by an older osqueue into the same prefix: its GC is refused, a's batch stays.
    store.put("b/manifest", ManifestCodec.EmptyBytes)
    val aBatches = store.list("ingest/").map(_.key).filter(_.endsWith(".batch"))
    assert(aBatches.size == 1)
    val refused = intercept[osqueue.InvalidConfigException](
      new GarbageCollector(store, "b/manifest", "ingest", Duration.Zero, clock).runOnce())
    assert(refused.getMessage.contains("whose manifest is 'a/manifest'"), refused.getMessage)
    assert(store.get(aBatches.head).isDefined)
    assert(new GarbageCollector(store, "a/manifest", "ingest", Duration.Zero, clock).runOnce().keptReferenced == 1)
  }

  test("should use the queue's grace period when its own option is shorter (GC 1 s, producers told 10 min)") {
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val store = InMemoryStore.fresh(clock)
    new Producer(store, ProducerConfig(flushInterval = 1.hour), clock).close() // claims the queue: 10 min
    store.put("ingest/manifest", ManifestCodec.EmptyBytes)
    val inFlight = batchAt(store, clock, clock.nowMillis() - 2.minutes.toMillis) // uploaded, its manifest write still running
    val r = new GarbageCollector(store, "ingest/manifest", "ingest", 1.second, clock).runOnce()
    assert(r.deleted.isEmpty && r.keptInGrace == 1 && r.gracePeriodMs == 10.minutes.toMillis)
    assert(store.get(inFlight).isDefined, "GC deleted a batch a producer may still enqueue")
    val longer = new GarbageCollector(store, "ingest/manifest", "ingest", 1.hour, clock).runOnce()
    assert(longer.gracePeriodMs == 1.hour.toMillis, "an option may raise the grace period")
  }

  test("should never record a grace period below the default when GC claims the queue") {
    val clock = new ManualClock(t0)
    val store = InMemoryStore.fresh(clock)
    store.put("ingest/manifest", ManifestCodec.EmptyBytes)
    new GarbageCollector(store, "ingest/manifest", "ingest", Duration.Zero, clock).runOnce()
    val owner = osqueue.queue.DataPrefixOwner.claim(store, "ingest/manifest", "ingest", clock, None)
    assert(owner.map(_.gcGracePeriodMs).contains(10.minutes.toMillis))
  }

  test("should re-upload by half the queue's grace period when a producer was given a longer one") {
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val store = InMemoryStore.fresh(clock)
    new Producer(store, ProducerConfig(flushInterval = 1.hour), clock).close() // the queue's: 10 min
    val sixMinutesOld = batchAt(store, clock, clock.nowMillis() - 6.minutes.toMillis)
    val reupload = () => batchAt(store, clock, clock.nowMillis())
    val qp = new osqueue.queue.QueueProducer(new osqueue.queue.ManifestStore(store, "ingest/manifest"),
      osqueue.queue.RetryPolicy(), clock, new osqueue.metrics.MetricsRegistry, 20.minutes.toMillis) // told 20 min
    val pending = new osqueue.queue.PendingLocation(sixMinutesOld, IndexedSeq.empty, reupload)
    qp.enqueue(pending).get()
    qp.close()
    assert(pending.location != sixMinutesOld, "a batch older than half the queue's grace period was enqueued")
  }

  // -- clock skew: ages come from the store's clock only (docs/format.md §6) --

  private val key = "ingest/manifest"

  /** A store GC's clock runs, and a producer (K = 2) whose clock is `behindMs` behind, with `entries` enqueued. */
  private final class SkewedQueue(behindMs: Long, entries: Int) {
    val storeClock = new ManualClock(t0)
    val store = InMemoryStore.fresh(storeClock)
    val behind = new ManualClock(t0 - behindMs)
    store.put(key, ManifestCodec.EmptyBytes)
    def appender(on: ObjectStore = store) = new ManifestAppender(new ManifestStore(on, key), RetryPolicy(), behind,
      new MetricsRegistry, grace.toMillis, segmentEntries = 2)
    def pending(): PendingLocation = {
      val upload = () => { val k = BatchNames.newKey("ingest", behind.nowMillis()); store.put(k, Array[Byte](1)); k }
      new PendingLocation(upload(), IndexedSeq.empty, upload)
    }
    (0 until entries).foreach(_ => appender().append(IndexedSeq(pending())))
    def head: ManifestHead = ManifestHead.parse(store.get(key).get.bytes, key)
    def locations: IndexedSeq[String] = new ManifestStore(store, key).decode(new ManifestStore(store, key).read()).entries.map(_.location)
    /** The store for GC: `action` runs once, right after GC's first GET of the manifest. */
    def afterHeadRead(action: () => Unit): ObjectStore = new FaultInjectingStore(store, (_, _) => FaultInjectingStore.Fault.None) {
      private var fired = false
      override def get(k: String): Option[VersionedObject] = {
        val o = super.get(k)
        if (k == key && !fired) { fired = true; action() }
        o
      }
    }
  }

  test("should keep a segment a producer 11 minutes behind sealed after GC read the head (issue 24)") {
    val q = new SkewedQueue(11.minutes.toMillis, 2)
    val gcStore = q.afterHeadRead(() => q.appender().append(IndexedSeq(q.pending())))
    new GarbageCollector(gcStore, key, "ingest", grace, q.storeClock).runOnce()
    assert(q.head.refs.size == 1, "the third append sealed the tail")
    assert(q.head.refs.forall(r => q.store.get(r.key).isDefined), "GC deleted a segment the head lists")
    assert(q.locations.size == 3)
  }

  test("should keep a segment whose slow PUT ran across a GC cycle, with a producer 6 minutes behind") {
    val q = new SkewedQueue(6.minutes.toMillis, 2)
    var cycle = Option.empty[GcResult]
    // The seal's PUT takes 4.5 min (under grace / 2, so the producer keeps its name); GC runs meanwhile.
    val slow = new FaultInjectingStore(q.store, (_, _) => FaultInjectingStore.Fault.None) {
      override def put(k: String, b: Array[Byte]): Unit = {
        super.put(k, b)
        if (k.endsWith(".segment") && cycle.isEmpty) {
          q.storeClock.advance(270000); q.behind.advance(270000)
          cycle = Some(new GarbageCollector(q.store, key, "ingest", grace, q.storeClock).runOnce())
        }
      }
    }
    q.appender(slow).append(IndexedSeq(q.pending()))
    assert(cycle.exists(_.deleted.isEmpty), cycle)
    assert(q.head.refs.forall(r => q.store.get(r.key).isDefined), "GC deleted a segment the head lists")
    assert(q.locations.size == 3)
  }

  test("should keep a batch enqueued on an empty queue after GC read the head, by a producer 11 minutes behind") {
    val q = new SkewedQueue(11.minutes.toMillis, 0)
    var enqueued = Option.empty[String]
    val gcStore = q.afterHeadRead { () =>
      val p = q.pending(); q.appender().append(IndexedSeq(p)); enqueued = Some(p.location)
    }
    val r = new GarbageCollector(gcStore, key, "ingest", grace, q.storeClock).runOnce()
    assert(r.deleted.isEmpty && enqueued.isDefined)
    assert(q.locations == enqueued.toSeq && q.store.get(enqueued.get).isDefined, "GC deleted an enqueued batch")
  }

  test("should keep an old orphan of an idle queue until a head is written a grace period after it") {
    val q = new SkewedQueue(0, 1)
    val orphan = BatchNames.newKey("ingest", t0 - 1.minute.toMillis) // older than the oldest entry by name
    q.store.put(orphan, Array[Byte](1))
    q.storeClock.advance(1.hour.toMillis); q.behind.advance(1.hour.toMillis)
    val gc = new GarbageCollector(q.store, key, "ingest", grace, q.storeClock)
    assert(gc.runOnce().deleted.isEmpty, "the store's time is the head's: it has not moved")
    q.appender().append(IndexedSeq(q.pending()))
    assert(gc.runOnce().deleted == Seq(orphan))
  }

  test("should upload again a batch whose PUT started half a grace period ago, whatever its name says") {
    // The PUT takes 6 min by the producer's monotonic clock while its wall clock is stepped back: the
    // name looks fresh, but GC ages the file by the store's clock, so it must not be enqueued.
    val clock = new ManualClock(t0)
    val uploads = scala.collection.mutable.ArrayBuffer.empty[String]
    val store = new FaultInjectingStore(InMemoryStore.fresh(clock), (_, _) => FaultInjectingStore.Fault.None) {
      override def put(k: String, b: Array[Byte]): Unit = {
        super.put(k, b)
        if (k.endsWith(".batch")) { uploads += k; if (uploads.size == 1) clock.advanceMonotonic(6.minutes.toMillis) }
      }
    }
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour), clock)
    val handle = p.produce(Seq("r".getBytes))
    p.flush()
    val durable = handle.awaitDurable(10.seconds)
    p.close()
    assert(uploads.size == 2 && durable.location == uploads(1), s"a batch older than grace / 2 was enqueued: $uploads")
  }
}
