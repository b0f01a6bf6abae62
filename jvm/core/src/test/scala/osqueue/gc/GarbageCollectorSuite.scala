package osqueue.gc

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.{BatchNames, Manifest, ManifestCodec, NewEntry, RawManifest}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.InMemoryStore
import osqueue.testing.ManualClock

class GarbageCollectorSuite extends AnyFunSuite {
  private val t0 = 1767225600000L
  private val grace = 10.minutes

  private def batchAt(store: InMemoryStore, ms: Long): String = {
    val k = BatchNames.newKey("ingest", ms); store.put(k, Array[Byte](1)); k
  }
  private def enqueue(store: InMemoryStore, locations: String*): Unit = {
    val raw = store.get("ingest/manifest").map(_.bytes).getOrElse(ManifestCodec.EmptyBytes)
    store.put("ingest/manifest", RawManifest.append(raw, locations.map(NewEntry(_, IndexedSeq.empty)), "m")._1)
  }

  test("should delete only unreferenced, old-enough batches older than the oldest entry") {
    val store = InMemoryStore.fresh()
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val orphan = batchAt(store, t0)
    val referenced = batchAt(store, t0 + 1000)
    val newerThanOldest = batchAt(store, t0 + 2000)           // unreferenced but may be about to be enqueued
    val inGrace = batchAt(store, clock.nowMillis() - 60000)   // young
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
    assert(r.keptReferenced == 1 && r.keptNewerThanOldest == 2 && r.skippedNotBatch == 3)
  }

  test("should skip the oldest-entry rule on an empty manifest but keep the grace period") {
    val store = InMemoryStore.fresh()
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val old = batchAt(store, t0)
    val young = batchAt(store, clock.nowMillis() - 1000)
    store.put("ingest/manifest", ManifestCodec.encode(Manifest.Empty.copy(nextSequence = 9)))
    val r = new GarbageCollector(store, "ingest/manifest", "ingest", grace, clock).runOnce()
    assert(r.deleted == Seq(old) && r.keptInGrace == 1 && store.get(young).isDefined)
  }

  test("should keep deleting nothing a consumer still needs while producers and GC run together") {
    val store = InMemoryStore.fresh()
    val clock = new ManualClock(System.currentTimeMillis())
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
    assert(store.list("ingest/").map(_.key).sorted == Seq("ingest/manifest", "ingest/manifest.dequeued"),
      "consumed batches were not collected (only the manifest and its dequeue receipts may remain)")
  }

  test("should never let a stalled producer enqueue a batch GC deleted") {
    val store = InMemoryStore.fresh()
    val clock = new ManualClock(System.currentTimeMillis())
    // The stalled producer's upload happened long ago; GC has since deleted it as an orphan.
    val stale = batchAt(store, clock.nowMillis() - 20.minutes.toMillis)
    assert(new GarbageCollector(store, "ingest/manifest", "ingest", grace, clock).runOnce().deleted == Seq(stale))
    val reupload = () => batchAt(store, clock.nowMillis())
    val qp = new osqueue.queue.QueueProducer(new osqueue.queue.ManifestStore(store, "ingest/manifest"),
      osqueue.queue.RetryPolicy(), clock, new osqueue.metrics.MetricsRegistry, grace.toMillis)
    val pending = new osqueue.queue.PendingLocation(stale, IndexedSeq.empty, reupload)
    qp.enqueue(pending).get()
    qp.close()
    val m = ManifestCodec.decode(store.get("ingest/manifest").get.bytes, "m")
    assert(m.entries.map(_.location) == Seq(pending.location) && pending.location != stale)
    assert(store.get(pending.location).isDefined, "the manifest points at a missing file")
  }

  test("should keep no write power in a fenced consumer's GC: it only reads the manifest") {
    val store = InMemoryStore.fresh()
    val clock = new ManualClock(t0 + 1.hour.toMillis)
    val referenced = batchAt(store, t0)
    enqueue(store, referenced)
    val before = store.get("ingest/manifest").get
    val old = new Consumer(store, ConsumerConfig(runGc = false), clock); old.initialize()
    new Consumer(store, ConsumerConfig(runGc = false), clock).initialize()
    val afterFence = store.get("ingest/manifest").get
    val r = new GarbageCollector(store, "ingest/manifest", "ingest", grace, clock).runOnce()
    assert(r.deleted.isEmpty && store.get(referenced).isDefined)
    assert(store.get("ingest/manifest").get.version == afterFence.version && afterFence.version != before.version)
  }
}
