package osqueue.queue

import scala.collection.mutable.ArrayBuffer
import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.SystemClock
import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.{BatchNames, ManifestCodec, ManifestHead, NewEntry, SegmentChunks, SegmentRef}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.{CasOutcome, InMemoryStore, ObjectInfo, ObjectStore, ObjectVersion, VersionedObject}

/**
 * Sealing a deep RFC v1 manifest into K-entry segments and splitting oversized segments (docs/format.md
 * §2.2 "Append", ADR 0007 part 2): chunks aligned on the tail's first sequence, the head K-at-a-time
 * sealing builds, readers see every entry in order, a conflict during the seal reuses the chunks.
 */
class DeepSealSuite extends AnyFunSuite {
  private val key = "ingest/manifest"
  private val fastRetry = RetryPolicy(baseDelayMs = 1, maxDelayMs = 5)
  private val grace = 10.minutes.toMillis
  private val t0 = 1767225600000L

  private def appender(store: ObjectStore, k: Int, metrics: MetricsRegistry = new MetricsRegistry) =
    new ManifestAppender(new ManifestStore(store, key), fastRetry, SystemClock, metrics, grace, segmentEntries = k)
  private def locations(n: Int, from: Int = 0): IndexedSeq[String] =
    (from until from + n).map(i => BatchNames.newKey("ingest", t0 + i))
  private def pending(location: String) = new PendingLocation(location, IndexedSeq.empty, () => location)
  private def noSeal: Any => SegmentRef = _ => fail("no seal here")

  /** A v1 manifest of `locs` (as the RFC reference writes it). */
  private def writeV1(store: ObjectStore, locs: IndexedSeq[String]): Unit =
    store.put(key,
      ManifestHead.parse(ManifestCodec.EmptyBytes, key)
        .appended(locs.map(l => NewEntry(l, IndexedSeq.empty)), Int.MaxValue, noSeal, noSeal)._1)

  private def head(store: ObjectStore) = ManifestHead.parse(store.get(key).get.bytes, key)
  private def leaves(store: ObjectStore): IndexedSeq[SegmentRef] = {
    val h = head(store)
    if (h.refs.isEmpty) IndexedSeq.empty
    else new SegmentTree(new ManifestStore(store, key)).leaves(h, h.refs.head.firstSequence, Long.MaxValue).toIndexedSeq
  }
  private def drain(store: ObjectStore): IndexedSeq[String] = {
    val c = new Consumer(store, ConsumerConfig(runGc = false, retry = fastRetry))
    c.initialize(None)
    val out = ArrayBuffer.empty[String]
    var ds = c.nextDescriptors(1000)
    while (ds.nonEmpty) {
      out ++= ds.map(_.location)
      c.ackThrough(ds.last.sequence)
      ds = c.nextDescriptors(1000)
    }
    c.close()
    out.toIndexedSeq
  }
  private def dequeueThrough(store: ObjectStore, s: Long): Unit = {
    val cur = store.get(key).get
    val out = ManifestHead.parse(cur.bytes, key).dequeuedThrough(s, _ => fail("no index here")).get
    assert(store.putIfVersionMatches(key, out, cur.version).isInstanceOf[CasOutcome.Written])
  }

  test("chunk bounds are aligned on the first sequence") {
    assert(SegmentChunks.chunkBounds(10, 9, 4, 10) == IndexedSeq((10L, 4L), (14L, 4L), (18L, 1L)))
    assert(SegmentChunks.chunkBounds(12, 7, 4, 10) == IndexedSeq((12L, 2L), (14L, 4L), (18L, 1L)))
  }

  test("a 10k-entry v1 queue with K = 64 becomes segments of at most 64 entries, read in order") {
    val store = InMemoryStore.fresh()
    val locs = locations(10000)
    writeV1(store, locs)
    val extra = locations(1, from = 20000).head
    assert(appender(store, 64).append(IndexedSeq(pending(extra))) == IndexedSeq(10000L))
    val h = head(store)
    val ls = leaves(store)
    assert(h.version == 3 && h.lowWater == 0 && h.tailSize == 1)
    assert(ls.map(_.firstSequence) == (0L until 10000L by 64L))
    assert(ls.forall(_.entryCount <= 64) && ls.map(_.entryCount).sum == 10000)
    assert(h.refs.size <= 2 * 63)
    assert(drain(store) == locs :+ extra)
  }

  test("the chunked seal builds the head K-at-a-time sealing builds") {
    for ((k, chunks) <- Seq((4, 3), (4, 8), (64, 5), (5, 13))) {
      val locs = locations(k * chunks + 1)
      val deep = InMemoryStore.fresh()
      val stepwise = InMemoryStore.fresh()
      writeV1(deep, locs.init)
      appender(deep, k).append(IndexedSeq(pending(locs.last)))
      val a = appender(stepwise, k)
      locs.foreach(l => a.append(IndexedSeq(pending(l))))
      def shape(s: ObjectStore) =
        (head(s).refs.map(r => (r.firstSequence, r.entryCount, r.level)), leaves(s).map(_.sha256.toSeq), head(s).tailSize)
      assert(shape(deep) == shape(stepwise), s"K = $k, $chunks chunks")
    }
  }

  test("a conflict during the seal reuses the chunks and keeps their boundaries") {
    val inner = InMemoryStore.fresh()
    val locs = locations(1000)
    writeV1(inner, locs)
    val segmentPuts = ArrayBuffer.empty[String]
    @volatile var dequeued = false
    val store = new ObjectStore {
      def uri: String = inner.uri
      def get(k: String): Option[VersionedObject] = inner.get(k)
      def put(k: String, b: Array[Byte]): Unit = {
        if (k.endsWith(".segment")) segmentPuts.synchronized(segmentPuts += k)
        inner.put(k, b)
      }
      def putIfAbsent(k: String, b: Array[Byte]): CasOutcome = inner.putIfAbsent(k, b)
      def list(p: String): Seq[ObjectInfo] = inner.list(p)
      def delete(k: String): Unit = inner.delete(k)
      def putIfVersionMatches(k: String, b: Array[Byte], v: ObjectVersion): CasOutcome = {
        if (k == key && !dequeued) {
          dequeued = true // a consumer dequeues 10 entries between the producer's read and its CAS
          dequeueThrough(inner, 9)
        }
        inner.putIfVersionMatches(k, b, v)
      }
    }
    appender(store, 64).append(IndexedSeq(pending(locations(1, from = 5000).head)))
    val h = head(inner)
    val ls = leaves(inner)
    assert(dequeued)
    assert(segmentPuts.size == 16 && ls.size == 16, "the retry wrote nothing new: every chunk was reused")
    assert(ls.head.firstSequence == 0 && h.lowWater == 10)
    assert(ls.map(_.firstSequence) == (0L until 1000L by 64L))
    assert(drain(inner).init == locs.drop(10))
  }

  test("an oversized segment is split by the next append, chunks below low_water left out") {
    val store = InMemoryStore.fresh()
    val locs = locations(500)
    writeV1(store, locs)
    appender(store, 500).append(IndexedSeq(pending(locations(1, from = 3000).head)))
    assert(leaves(store).map(_.entryCount) == IndexedSeq(500L))
    dequeueThrough(store, 99)
    val metrics = new MetricsRegistry
    appender(store, 32, metrics).append(IndexedSeq(pending(locations(1, from = 4000).head)))
    val ls = leaves(store)
    assert(head(store).lowWater == 100)
    assert(ls.map(_.firstSequence) == (96L until 500L by 32L))
    assert(ls.forall(_.entryCount <= 32))
    assert(metrics.counterValue(MetricNames.SegmentsResplit) == 1)
    assert(drain(store).dropRight(2) == locs.drop(100))
  }

  test("seal only seals, and a second seal has nothing to do") {
    val store = InMemoryStore.fresh()
    val locs = locations(300)
    writeV1(store, locs)
    val a = appender(store, 64)
    assert(a.seal() == 300)
    assert(head(store).tailSize == 0 && head(store).nextSequence == 300)
    assert(leaves(store).map(_.entryCount) == IndexedSeq(64L, 64L, 64L, 64L, 44L))
    assert(a.seal() == 0)
    assert(drain(store) == locs)
  }
}
