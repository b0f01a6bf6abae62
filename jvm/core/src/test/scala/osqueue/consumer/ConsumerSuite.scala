package osqueue.consumer

import java.nio.file.Files

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.scalatest.funsuite.AnyFunSuite

import osqueue._
import osqueue.format.{BatchCodec, Compression, EntryTag, Manifest, ManifestCodec, ManifestEntry, MetadataItem}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.InMemoryStore
import osqueue.testing.{FaultInjectingStore, RepoFiles}

class ConsumerSuite extends AnyFunSuite {
  private val noGc = ConsumerConfig(runGc = false, ackBatchSize = 2)

  /** A store holding `n` batches of 3 entries each ("b<i>-<j>"), sequences 0..n-1. */
  private def queueWith(n: Int): InMemoryStore = {
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour))
    (0 until n).foreach { i =>
      p.produce((0 until 3).map(j => s"b$i-$j".getBytes), s"meta$i".getBytes)
      p.flush()
    }
    p.close()
    store
  }

  private def text(b: ConsumedBatch) = b.entries.map(new String(_))
  private def manifest(store: InMemoryStore) = ManifestCodec.decode(store.get("ingest/manifest").get.bytes, "m")

  test("should read batches in order with their metadata and dequeue acked ones") {
    val store = queueWith(5)
    val c = new Consumer(store, noGc)
    val epoch = c.initialize()
    assert((epoch & 0xFFFFFFFFL) == 1L && c.incarnation.contains(epoch >>> 32), "the first takeover of a new incarnation")
    val batches = Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.toList
    assert(batches.map(_.sequence) == List(0, 1, 2, 3, 4))
    assert(text(batches(2)) == Seq("b2-0", "b2-1", "b2-2"))
    assert(new String(batches(2).metadataFor(1).get.payload) == "meta2")
    c.ack(0); c.ack(1) // ackBatchSize = 2 → one dequeue
    assert(manifest(store).firstSequence == 2)
    c.ack(2)
    assert(manifest(store).firstSequence == 2, "dequeued before the ack batch was full")
    c.close()
    assert(manifest(store).firstSequence == 3)
  }

  test("should reject out-of-order acks and acks of batches not read yet") {
    val c = new Consumer(queueWith(3), noGc)
    c.initialize()
    c.nextBatch()
    intercept[IllegalQueueStateException](c.ack(1))
    c.ack(0)
    val e = intercept[IllegalQueueStateException](c.ack(1))
    assert(e.getMessage.contains("has not been read"))
  }

  test("should move the frontier with ackThrough in one write, and leave state untouched when fenced") {
    val store = queueWith(4)
    val c = new Consumer(store, noGc)
    c.initialize()
    assert(c.nextDescriptors(10).map(_.sequence) == Seq(0, 1, 2, 3))
    assert(c.nextDescriptors(10).isEmpty, "descriptors are never reissued")
    c.ackThrough(1)
    assert(manifest(store).firstSequence == 2)
    intercept[IllegalQueueStateException](c.ackThrough(1))
    new Consumer(store, noGc).initialize()
    intercept[FencedException](c.ackThrough(3))
    assert(manifest(store).firstSequence == 2)
  }

  test("should fence the previous consumer on every read, ack and dequeue") {
    val store = queueWith(3)
    val old = new Consumer(store, noGc)
    val oldEpoch = old.initialize()
    old.nextBatch()
    val fresh = new Consumer(store, noGc)
    val newEpoch = fresh.initialize()
    assert(newEpoch == oldEpoch + 1)
    // Entries it already read are handed out without a manifest read (harmless: nothing is written);
    // its next manifest read finds the fence.
    assert(Seq(old.nextBatch(), old.nextBatch()).map(_.map(_.sequence)) == Seq(Some(1L), Some(2L)))
    val e = intercept[FencedException](old.nextBatch())
    assert(e.ownEpoch == oldEpoch && e.currentEpoch == newEpoch && e.kind == ErrorKind.Fenced)
    val afterFence = store.get("ingest/manifest").get.version
    // The fence is remembered: every later call fails with it, before touching any cursor.
    intercept[FencedException](old.nextDescriptors(5))
    intercept[FencedException](old.ack(0))
    intercept[FencedException](old.ackThrough(0))
    intercept[FencedException](old.nextBatch())
    val f = intercept[FencedException](old.flush())
    assert(f.ownEpoch == oldEpoch && f.currentEpoch == newEpoch)
    old.close() // no dequeue once fenced: it could never land
    assert(store.get("ingest/manifest").get.version == afterFence, "a fenced consumer wrote the manifest")
    assert(manifest(store).firstSequence == 0, "a fenced consumer's dequeue landed")
    assert(fresh.nextBatch().map(_.sequence).contains(0L))
  }

  test("should check the epoch on flush with nothing to dequeue, reading only") {
    val store = queueWith(2)
    var writes = 0
    val counting = new FaultInjectingStore(store, (_, _) => { writes += 1; FaultInjectingStore.Fault.None })
    val old = new Consumer(counting, noGc)
    old.initialize()
    old.flush() // owner, nothing acked: a read, no write
    new Consumer(store, noGc).initialize()
    val writesBefore = writes
    val versionBefore = store.get("ingest/manifest").get.version
    intercept[FencedException](old.flush())
    intercept[FencedException](old.ack(0)) // remembered, although ack itself reads nothing
    assert(writes == writesBefore && store.get("ingest/manifest").get.version == versionBefore)
  }

  test("should resume after a checkpointed sequence, dequeueing it with the epoch bump") {
    val store = queueWith(4)
    val c = new Consumer(store, noGc)
    c.initialize(Some(1L))
    assert(manifest(store).firstSequence == 2)
    assert(c.nextBatch().map(_.sequence).contains(2L))
    c.ack(2)
  }

  test("should refuse a resume point ahead of the queue or behind its first entry") {
    val store = queueWith(4)
    val ahead = intercept[ResumePointException](new Consumer(store, noGc).initialize(Some(4L)))
    assert(ahead.getMessage.contains("ahead of the queue"))
    val c = new Consumer(store, noGc); c.initialize(Some(2L)); c.close()
    val behind = intercept[ResumePointException](new Consumer(store, noGc).initialize(Some(0L)))
    assert(behind.getMessage.contains("entries 1 to 2 were removed"))
    new Consumer(store, noGc).initialize(Some(2L)) // exactly the first remaining - 1 is fine
  }

  test("should not write the manifest for a dequeue that removes nothing") {
    val store = queueWith(2)
    var writes = 0
    val counting = new FaultInjectingStore(store, (_, _) => { writes += 1; FaultInjectingStore.Fault.None })
    val c = new Consumer(counting, noGc)
    c.initialize()
    val afterInit = writes
    c.flush(); c.close()
    assert(writes == afterInit)
  }

  test("should name a missing or corrupt batch instead of skipping it") {
    val store = queueWith(2)
    val m = manifest(store)
    store.delete(m.entries(0).location)
    val c = new Consumer(store, noGc); c.initialize()
    val missing = intercept[BatchNotFoundException](c.nextBatch())
    assert(missing.getMessage.contains(m.entries(0).location) && missing.sequence == 0)
    store.put(m.entries(0).location, BatchCodec.encode(Seq(Array[Byte](1)), Compression.None).dropRight(1))
    // Other bytes than the entry's record describes (docs/format.md §2.1): refused before decoding.
    val corrupt = intercept[CorruptBatchException](c.nextBatch())
    assert(corrupt.getMessage.contains(m.entries(0).location) && corrupt.getMessage.contains("integrity check failed"))
    store.put(m.entries(0).location, Array[Byte](1, 2))
    intercept[CorruptBatchException](c.nextBatch())
  }

  /** Produces `values` (one batch each) into `store`. */
  private def produce(store: InMemoryStore, values: Seq[String]): Unit = {
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour))
    values.foreach { v => p.produce(Seq(v.getBytes)); p.flush() }
    p.close()
  }

  /** Consumes and acks everything; (last acked, incarnation). */
  private def drain(store: InMemoryStore): (Long, Long) = {
    val c = new Consumer(store, noGc)
    c.initialize()
    val batches = Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.toList
    batches.foreach(b => c.ack(b.sequence))
    c.close()
    (batches.last.sequence, c.incarnation.get)
  }

  /** An operator reset: the manifest and its receipts deleted, the other sidecars kept. */
  private def reset(store: InMemoryStore): Unit = {
    store.delete("ingest/manifest"); store.delete("ingest/manifest.dequeued")
  }

  test("should refuse a resume point into a reset queue that has grown past it (docs/format.md 5.2)") {
    val store = InMemoryStore.fresh()
    produce(store, (0 until 5).map(i => s"old-$i"))
    val (last, _) = drain(store)
    assert(last == 4L)
    reset(store)
    produce(store, (0 until 8).map(i => s"new-$i"))
    val e = intercept[ResumePointException](new Consumer(store, noGc).initialize(Some(4L)))
    assert(e.getMessage.contains("reset or recreated"), e.getMessage)
    val c = new Consumer(store, noGc) // nothing was dequeued: a fresh start reads the new queue whole
    c.initialize()
    val values = Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.map(b => text(b).head).toList
    assert(values == (0 until 8).map(i => s"new-$i"))
  }

  test("should refuse a resume point of another incarnation whoever took the new queue over since") {
    val store = InMemoryStore.fresh()
    produce(store, (0 until 5).map(i => s"old-$i"))
    val (last, oldIncarnation) = drain(store)
    reset(store)
    produce(store, (0 until 8).map(i => s"new-$i"))
    val other = new Consumer(store, noGc)
    other.initialize() // records the new incarnation
    assert(!other.incarnation.contains(oldIncarnation))
    val e = intercept[ResumePointException](new Consumer(store, noGc).initialize(Some(last), Some(oldIncarnation)))
    assert(e.getMessage.contains(s"incarnation $oldIncarnation"), e.getMessage)
    val same = new Consumer(store, noGc) // the new incarnation's own resume point is fine
    same.initialize(Some(1L), other.incarnation)
    assert(same.nextBatch().map(b => text(b).head).contains("new-2"))
  }

  test("should hand out what it already read before reading the manifest again (no quadratic drain)") {
    val inner = queueWith(50)
    val manifestReads = new java.util.concurrent.atomic.AtomicInteger()
    val store = new FaultInjectingStore(inner, (_, _) => FaultInjectingStore.Fault.None) {
      override def get(k: String): Option[osqueue.store.VersionedObject] = {
        if (k == "ingest/manifest") manifestReads.incrementAndGet()
        super.get(k)
      }
    }
    val c = new Consumer(store, ConsumerConfig(runGc = false, ackBatchSize = 1000))
    c.initialize()
    val before = manifestReads.get()
    val got = Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.map(_.sequence).toList
    assert(got == (0L until 50L).toList)
    assert(manifestReads.get() - before == 2, s"${manifestReads.get() - before} manifest reads for one backlog of 50")
    c.ackThrough(49)
    c.close()
  }

  test("should wrap the epoch past 2^64 - 2 to 0") {
    assert(queue.QueueConsumer.nextEpoch(-3L) == -2L)
    assert(queue.QueueConsumer.nextEpoch(-2L) == 0L)
    assert(queue.QueueConsumer.nextEpoch(41L) == 42L)
  }

  test("should refuse reads before initialize") {
    val e = intercept[IllegalQueueStateException](new Consumer(queueWith(1), noGc).nextBatch())
    assert(e.getMessage.contains("not initialized"))
  }

  /**
   * Sequences 0..4: writer w1 batch 0 attempt a1 (two entries), an untagged entry, a replayed copy
   * of w1 batch 0 (attempt a2), w1 batch 1; tags written by `EntryTag.encode`.
   */
  private def sinkQueue(): InMemoryStore = {
    val store = InMemoryStore.fresh()
    val tags = Seq(Some(EntryTag("w1", 0, "a1")), Some(EntryTag("w1", 0, "a1")), None,
      Some(EntryTag("w1", 0, "a2")), Some(EntryTag("w1", 1, "a3")))
    val entries = tags.zipWithIndex.map { case (tag, i) =>
      val loc = s"ingest/s$i.batch"
      store.put(loc, BatchCodec.encode(Seq(s"s$i".getBytes), Compression.None))
      ManifestEntry(i.toLong, loc, IndexedSeq(MetadataItem(0, 1000L + i, Array.emptyByteArray)),
        tag.map(_.encode).getOrElse(Array.emptyByteArray))
    }
    store.put("ingest/manifest", ManifestCodec.encode(Manifest(entries.toIndexedSeq, 5, 0)))
    store
  }

  test("should skip a replayed sink copy, and let in-order acks pass over it") {
    val store = sinkQueue()
    val metrics = new MetricsRegistry
    val c = new Consumer(store, noGc, metrics = metrics)
    c.initialize()
    val batches = Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.toList
    assert(batches.map(_.sequence) == List(0, 1, 2, 4))
    assert(batches.map(text) == List(Seq("s0"), Seq("s1"), Seq("s2"), Seq("s4")))
    assert(metrics.counterValue(MetricNames.DuplicateCopiesSkipped) == 1)
    c.ack(0); c.ack(1); c.ack(2)
    intercept[IllegalQueueStateException](c.ack(3)) // counted as acked already
    c.ack(4)
    c.close()
    assert(manifest(store).isEmpty)
    assert(metrics.counterValue(MetricNames.DuplicateCopiesSkipped) == 1)
  }

  test("should pass a skipped copy read after the previous ack") {
    val store = sinkQueue()
    val c = new Consumer(store, noGc)
    c.initialize()
    val seen = Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.map { b => c.ack(b.sequence); b.sequence }
    assert(seen.toList == List(0, 1, 2, 4))
    c.close()
    assert(manifest(store).isEmpty)
  }

  test("should hand out descriptors without the copy, and dequeue it with ackThrough") {
    val store = sinkQueue()
    val metrics = new MetricsRegistry
    val c = new Consumer(store, noGc, metrics = metrics)
    c.initialize()
    assert(c.nextDescriptors(2).map(_.sequence) == Seq(0, 1))
    assert(c.nextDescriptors(10).map(_.sequence) == Seq(2, 4))
    assert(c.nextDescriptors(10).isEmpty)
    assert(metrics.counterValue(MetricNames.DescriptorsHandedOut) == 4)
    assert(metrics.counterValue(MetricNames.DuplicateCopiesSkipped) == 1)
    c.ackThrough(2)
    c.ack(4) // 3 was skipped: the next delivered sequence is expected
    c.flush()
    assert(manifest(store).isEmpty)

    val all = sinkQueue()
    val c2 = new Consumer(all, noGc)
    c2.initialize()
    assert(c2.nextDescriptors(10).map(_.sequence) == Seq(0, 1, 2, 4))
    c2.ackThrough(4)
    assert(manifest(all).isEmpty)
  }

  test("should skip the replayed copy of the shared golden manifest (hand-built bytes)") {
    val vector = new ObjectMapper().readTree(RepoFiles.golden.resolve("vectors.json").toFile)
      .get("vectors").elements().asScala.find(_.get("name").asText == "manifest_sink_tags").get
    val store = InMemoryStore.fresh()
    store.put("ingest/manifest", Files.readAllBytes(RepoFiles.golden.resolve(vector.get("file").asText)))
    vector.get("manifest").get("entries").elements().asScala.foreach { e =>
      store.put(e.get("location").asText, BatchCodec.encode(Seq(e.get("sequence").asText.getBytes), Compression.None))
    }
    val c = new Consumer(store, noGc)
    c.initialize()
    assert(Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.map(_.sequence).toList == List(10, 11, 12, 14))
    c.ackThrough(14)
    assert(manifest(store).isEmpty)
  }
}
