package osqueue.spark

import java.util.concurrent.{ConcurrentHashMap, CountDownLatch, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{CorruptBatchException, StoreException}
import osqueue.consumer.BatchDescriptor
import osqueue.format.{BatchCodec, BatchIntegrity, Compression, EntryIntegrity, EntryTag, ManifestCodec, ManifestHead, NewEntry}
import osqueue.queue.ManifestStore
import osqueue.store.{InMemoryStore, ObjectStore, VersionedObject}
import osqueue.testing.ForwardingStore

/**
 * The partition reader fetches a partition's batch files ahead of the one it reads, over a store
 * whose batch GETs are slow, fail or block: rows stay in sequence order, the fetches in flight stay
 * within the limits, an error fails at the rows of its own batch naming it, and close() stops the
 * fetches in flight and their threads.
 */
class OsqueuePartitionReaderSuite extends AnyFunSuite {
  private val location = QueueLocation("memory://reader-suite", "ingest/manifest", "ingest", Map.empty)
  private val Sequence = 1 // OsqueueSchema's `sequence` and `index` columns
  private val Index = 2

  /** Batch GETs (keys under ingest/batch-) go through `onGet`, and are counted while in flight. */
  private final class SlowStore(inner: ObjectStore, onGet: String => Unit) extends ForwardingStore(inner) {
    val inFlight = new AtomicInteger()
    val mostInFlight = new AtomicInteger()
    val started = ConcurrentHashMap.newKeySet[String]()
    override def get(key: String): Option[VersionedObject] =
      if (!key.startsWith("ingest/batch-")) inner.get(key)
      else {
        started.add(key)
        mostInFlight.accumulateAndGet(inFlight.incrementAndGet(), (a: Int, b: Int) => math.max(a, b))
        try { onGet(key); inner.get(key) }
        finally inFlight.decrementAndGet()
      }
  }

  private def key(i: Int) = f"ingest/batch-$i%05d.batch"

  /** `n` batch files of `records` records of `bytes` each, and the partition listing them. */
  private def batches(store: ObjectStore, n: Int, records: Int = 3, bytes: Int = 10): OsqueueInputPartition = {
    (0 until n).foreach(i => store.put(key(i), BatchCodec.encode(Seq.fill(records)(new Array[Byte](bytes)), Compression.None)))
    OsqueueInputPartition(location, (0 until n).map(i => BatchDescriptor(i.toLong, key(i), IndexedSeq.empty)),
      failOnDataLoss = true)
  }

  private def reader(p: OsqueueInputPartition, store: ObjectStore, limits: ReadAheadLimits = ReadAheadLimits.Default) =
    new OsqueuePartitionReader(p, Array(Sequence, Index), None, readAhead = limits, openStore = _ => store)

  /** (sequence, index) of every row, until the end or the first error (returned beside them). */
  private def readAll(r: OsqueuePartitionReader): (Seq[(Long, Int)], Option[Throwable]) = {
    val rows = mutable.ArrayBuffer.empty[(Long, Int)]
    try {
      while (r.next()) rows += ((r.get().getLong(0), r.get().getInt(1)))
      (rows.toSeq, None)
    } catch { case e: Exception => (rows.toSeq, Some(e)) }
    finally r.close()
  }

  private def readAheadThreads: Int =
    Thread.getAllStackTraces.keySet.asScala.count(t =>
      t.getName.startsWith(BatchReadAhead.ThreadPrefix) && t.getName.contains(location.identity))

  private def eventually(what: String)(cond: => Boolean): Unit = {
    val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10)
    while (!cond) {
      assert(System.nanoTime() < deadline, what)
      Thread.sleep(10)
    }
  }

  test("should hand out every batch's rows in sequence order while GETs finish out of order") {
    // Each GET sleeps 0-15 ms by its key: later batches often land before earlier ones.
    val store = new SlowStore(InMemoryStore.fresh(), k => Thread.sleep((k.hashCode & 0x7FFFFFFF) % 16L))
    val (rows, error) = readAll(reader(batches(store, 60), store))
    assert(error.isEmpty)
    assert(rows == (0 until 60).flatMap(i => (0 until 3).map(j => (i.toLong, j))))
    assert(store.mostInFlight.get() > 1, "the batch files were fetched one after another")
    eventually("read-ahead threads left after close")(readAheadThreads == 0)
  }

  test("should keep at most the window's batch files in flight, and one ahead when a batch file is large") {
    val store = new SlowStore(InMemoryStore.fresh(), _ => Thread.sleep(5))
    val (rows, _) = readAll(reader(batches(store, 40), store, ReadAheadLimits(batches = 4, bytes = 1L << 20)))
    assert(rows.size == 120)
    assert(store.mostInFlight.get() == 4, "4 batch files in flight at most, and the window filled")
    // 3 records of 1 MB: over the 2 MB byte limit with two ahead, so one at a time after the first.
    val big = new SlowStore(InMemoryStore.fresh(), _ => Thread.sleep(5))
    val (bigRows, _) = readAll(reader(batches(big, 6, records = 3, bytes = 1 << 20), big,
        ReadAheadLimits(batches = 8, bytes = 2L << 20)))
    assert(bigRows.size == 18)
    assert(big.mostInFlight.get() == 1)
  }

  test("should fetch small batch files whose sizes the manifest lists all at once, not the first alone") {
    // The first GET waits until the window's other GETs started (or 2 s): a reader that fetches the
    // first alone to learn a size leaves it waiting, one round trip before the rest.
    val window = ReadAheadLimits.Default.batches
    val inner = InMemoryStore.fresh()
    val listed = batches(inner, window)
    val p = listed.copy(descriptors = listed.descriptors.map { d =>
      val bytes = inner.get(d.location).get.bytes
      d.copy(integrity = Some(EntryIntegrity(bytes.length.toLong, BatchIntegrity.crc32(bytes), 0L)))
    })
    val othersStartedDuringFirst = new AtomicInteger()
    lazy val store: SlowStore = new SlowStore(inner,
      k =>
        if (k == key(0)) {
          val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(2)
          while (store.started.size < window && System.nanoTime() < deadline) Thread.sleep(1)
          othersStartedDuringFirst.set(store.started.size - 1)
        })
    val (rows, error) = readAll(reader(p, store))
    assert(error.isEmpty && rows.size == window * 3)
    assert(othersStartedDuringFirst.get() == window - 1, "the listed sizes are small: the window's GETs at once")
  }

  test("should fail a missing batch file at its own rows, naming it, after every batch before it") {
    val store = new SlowStore(InMemoryStore.fresh(), _ => Thread.sleep(2))
    val p = batches(store, 30)
    store.delete(key(12))
    val (rows, error) = readAll(reader(p, store))
    assert(rows == (0 until 12).flatMap(i => (0 until 3).map(j => (i.toLong, j))))
    assert(error.get.getMessage.contains("OSQUEUE_DATA_LOSS") && error.get.getMessage.contains(s"'${key(12)}'"),
      error.get.getMessage)
    // failOnDataLoss=false: skipped and counted, the rest read.
    val lenient = new OsqueuePartitionReader(p.copy(failOnDataLoss = false), Array(Sequence, Index), None,
      openStore = _ => store)
    val (all, none) = readAll(lenient)
    assert(none.isEmpty && all.map(_._1).distinct == (0 until 30).filter(_ != 12).map(_.toLong))
    assert(lenient.currentMetricsValues().find(_.name == OsqueueTaskMetrics.MissingBatches).get.value == 1)
  }

  test("should fail a batch file that does not match its integrity record; with failOnDataLoss=false skip and count it") {
    val store = new SlowStore(InMemoryStore.fresh(), _ => ())
    val listed = batches(store, 6)
    val p = listed.copy(descriptors = listed.descriptors.map { d =>
      val bytes = store.get(d.location).get.bytes
      d.copy(integrity = Some(EntryIntegrity(bytes.length.toLong, BatchIntegrity.crc32(bytes), 0L)))
    })
    val damaged = store.get(key(3)).get.bytes.clone()
    damaged(5) = (damaged(5) ^ 0x40).toByte // inside a record: still decodes, only the CRC-32 tells
    store.put(key(3), damaged)
    val (rows, error) = readAll(reader(p, store))
    assert(rows.map(_._1).distinct == (0 until 3).map(_.toLong))
    val e = error.get.asInstanceOf[CorruptBatchException]
    assert(e.integrityMismatch && e.key == key(3) && e.getMessage.contains("integrity check failed"), e.getMessage)
    val lenient = new OsqueuePartitionReader(p.copy(failOnDataLoss = false), Array(Sequence, Index), None,
      openStore = _ => store)
    val (all, none) = readAll(lenient)
    assert(none.isEmpty && all.map(_._1).distinct == (0 until 6).filter(_ != 3).map(_.toLong))
    assert(lenient.currentMetricsValues().find(_.name == OsqueueTaskMetrics.CorruptBatches).get.value == 1)
  }

  test("should fail a corrupt batch file or a failed GET at its own rows, with the store's error") {
    val store = new SlowStore(InMemoryStore.fresh(),
      k => if (k == key(20)) throw new StoreException(s"GET '$k' failed: 503 Slow Down"))
    val p = batches(store, 30)
    store.put(key(7), "bad".getBytes("UTF-8")) // shorter than a batch footer
    val (rows, error) = readAll(reader(p, store))
    assert(rows.map(_._1).distinct == (0 until 7).map(_.toLong))
    assert(error.get.isInstanceOf[CorruptBatchException] && error.get.getMessage.contains(s"'${key(7)}'"))
    store.put(key(7), BatchCodec.encode(Seq(Array[Byte](1)), Compression.None))
    val (rows2, error2) = readAll(reader(p, store))
    assert(rows2.map(_._1).distinct == (0 until 20).map(_.toLong))
    assert(error2.get.isInstanceOf[StoreException] && error2.get.getMessage.contains(s"'${key(20)}'"))
  }

  test("close() should cancel the fetches in flight and stop their threads") {
    val release = new CountDownLatch(1)
    val interrupted = new AtomicInteger()
    // Batches 0 and 1 are read; the GETs of the window after them (2 to 9) block until interrupted.
    val store = new SlowStore(InMemoryStore.fresh(),
      k =>
        if (k != key(0) && k != key(1))
          try release.await()
          catch { case e: InterruptedException => interrupted.incrementAndGet(); throw e })
    val window = ReadAheadLimits.Default.batches
    val r = reader(batches(store, 50), store)
    assert((1 to 4).forall(_ => r.next()) && r.get().getLong(0) == 1L)
    eventually("the window of GETs after batch 1 did not start")(store.inFlight.get() == window)
    assert(readAheadThreads == window)
    r.close()
    eventually("read-ahead threads left after close")(readAheadThreads == 0)
    assert(interrupted.get() == window, "every blocked GET was interrupted")
    assert(store.started.size == 2 + window, "no GET started after close")
    release.countDown()
  }

  test("should read a segment slice's batch files ahead too, in order, one copy of each sink batch") {
    val inner = InMemoryStore.fresh()
    val store = new SlowStore(inner, k => Thread.sleep((k.hashCode & 0x7FFFFFFF) % 8L))
    batches(store, 300)
    val manifests = new ManifestStore(store, location.manifestPath)
    def entries(r: Range) = r.map(i => NewEntry(key(i), IndexedSeq.empty, Array.emptyByteArray))
    // 256 entries, then 44 more: the first 256 are sealed into a segment.
    val raw = Seq(0 until 256, 256 until 300).foldLeft(ManifestCodec.EmptyBytes) { (raw, r) =>
      ManifestHead.parse(raw, manifests.key)
        .appended(entries(r), 256, t => manifests.writeSegment(t, 0L), f => manifests.writeIndex(f, 0L))._1
    }
    val ref = ManifestHead.parse(raw, manifests.key).refs.head
    assert(ref.firstSequence == 0 && ref.lastSequence == 255)
    val slice = OsqueueSlicePartition(location, ref, 100, 228, EntryTag.Delivered.Empty, failOnDataLoss = true)
    val r = new OsqueuePartitionReader(slice, Array(Sequence, Index), None, openStore = _ => store)
    val (rows, error) = readAll(r)
    assert(error.isEmpty)
    assert(rows == (100 until 228).flatMap(i => (0 until 3).map(j => (i.toLong, j))))
    assert(store.mostInFlight.get() > 1)
  }
}
