package osqueue.spark

import java.util.concurrent.{CountDownLatch, TimeUnit}
import java.util.concurrent.atomic.{AtomicBoolean, AtomicInteger, AtomicLong}

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{Clock, SystemClock}
import osqueue.format.{BatchCodec, Compression, EntryTag, Incarnation, ManifestCodec, ManifestEdits, NewEntry}
import osqueue.store.{ConditionalRead, ObjectStore}

/**
 * The real-time reader (Spark 4.1+) follows the manifest and reads each batch file through the
 * partition readers' read-ahead ([[BatchReadAhead]]), one copy of each sink batch, reporting the
 * position after what it read.
 */
class OsqueueRealTimeReaderSuite extends AnyFunSuite {
  private val Sequence = 1 // OsqueueSchema's `sequence` and `index` columns
  private val Index = 2

  /** Time that moves only while the reader waits: a deadline ends a read without real sleeps. */
  private final class SteppingClock extends Clock {
    private val now = new AtomicLong(1000)
    override def nowMillis(): Long = now.get()
    override def nanoTime(): Long = SystemClock.nanoTime()
    override def sleepMillis(ms: Long): Unit = { now.addAndGet(ms); () }
  }

  test("should read one copy of each sink batch in order and report the position after them") {
    val location = QueueLocation("memory://realtime-reader-suite", "ingest/manifest", "ingest", Map.empty)
    val store = OsqueueStores.open(location)
    val epoch = 7L << 32
    // Sequence 1 is a replayed copy of batch 0 (another attempt): skipped.
    val tags = Seq(Some(EntryTag("w", 0, "a1")), Some(EntryTag("w", 0, "a2")), None, Some(EntryTag("w", 1, "a3")))
    val keys = tags.indices.map(i => f"ingest/batch-$i%05d.batch")
    keys.foreach(k => store.put(k, BatchCodec.encode(Seq.fill(2)(new Array[Byte](4)), Compression.None)))
    val entries = keys.zip(tags).map { case (k, t) => NewEntry(k, IndexedSeq.empty, t.fold(Array.emptyByteArray)(_.encode)) }
    val appended = ManifestEdits.append(ManifestCodec.EmptyBytes, entries, location.manifestPath)._1
    store.put(location.manifestPath, ManifestEdits.withEpoch(appended, epoch, None, location.manifestPath))
    val p = OsqueueRealTimePartition(location, "queue-id", epoch, Incarnation.of(epoch), nextSequence = 0, entryIndex = 0,
      EntryTag.Delivered.Empty, failOnDataLoss = true, pollIntervalMs = 10, maxPollIntervalMs = 10, initialWaitMs = 10)
    val clock = new SteppingClock
    val reader = new OsqueueRealTimeReader(p, Array(Sequence, Index), None, clock)
    val rows =
      try
        Iterator.continually(reader.nextWithTimeout(clock.nowMillis(), 100L)).takeWhile(_.hasRecord)
          .map(_ => (reader.get().getLong(0), reader.get().getInt(1))).toList
      finally reader.close()
    assert(rows == Seq((0L, 0), (0L, 1), (2L, 0), (2L, 1), (3L, 0), (3L, 1)))
    assert(reader.getOffset == OsqueueRealTimePartitionOffset(4, 0, EntryTag.Delivered(Map("w" -> ((1L, "a3")))),
      Incarnation.of(epoch)))
  }

  /** A queue at `location` with `files` batch files of two 4-byte rows each, at epoch `epoch`. */
  private def queueOf(location: QueueLocation, files: Int, epoch: Long): ObjectStore = {
    val store = OsqueueStores.open(location)
    val keys = (0 until files).map(i => f"ingest/batch-$i%05d.batch")
    keys.foreach(k => store.put(k, BatchCodec.encode(Seq.fill(2)(new Array[Byte](4)), Compression.None)))
    val appended = ManifestEdits.append(ManifestCodec.EmptyBytes, keys.map(k => NewEntry(k, IndexedSeq.empty, Array.emptyByteArray)),
      location.manifestPath)._1
    store.put(location.manifestPath, ManifestEdits.withEpoch(appended, epoch, None, location.manifestPath))
    store
  }

  test("should start the next manifest poll while one is in flight, at most two at once") {
    val location = QueueLocation("gated://realtime-overlapping-polls", "ingest/manifest", "ingest", Map.empty)
    val epoch = 9L << 32
    queueOf(location, files = 1, epoch)
    // The first poll is held until a second one starts (or 30 s pass, long enough for a stalled test JVM): polls one
    // after another would hold it the whole 30 s, and the first record would not come in time.
    val secondStarted = new CountDownLatch(1)
    val overlapped = new AtomicBoolean(false)
    val reads = new AtomicInteger()
    val inFlight = new AtomicInteger()
    val mostInFlight = new AtomicInteger()
    GatedStores.register("realtime-overlapping-polls", location.manifestPath) { () =>
      val n = reads.incrementAndGet()
      mostInFlight.accumulateAndGet(inFlight.incrementAndGet(), (a: Int, b: Int) => math.max(a, b))
      try {
        if (n == 1) overlapped.set(secondStarted.await(30, TimeUnit.SECONDS))
        else secondStarted.countDown()
      } finally { inFlight.decrementAndGet(); () }
    }
    val p = OsqueueRealTimePartition(location, "queue-id", epoch, Incarnation.of(epoch), nextSequence = 0, entryIndex = 0,
      EntryTag.Delivered.Empty, failOnDataLoss = true, pollIntervalMs = 1, maxPollIntervalMs = 1, initialWaitMs = 1)
    val reader = new OsqueueRealTimeReader(p, Array(Sequence, Index), None, SystemClock)
    val rows =
      try (1 to 2).map { _ =>
          assert(reader.nextWithTimeout(SystemClock.nowMillis(), 20000L).hasRecord)
          (reader.get().getLong(0), reader.get().getInt(1))
        }
      finally { reader.close(); GatedStores.remove("realtime-overlapping-polls") }
    assert(overlapped.get(), "the second poll did not start while the first was in flight")
    assert(mostInFlight.get() == OsqueueRealTimeReader.MaxPollsInFlight)
    assert(rows == Seq((0L, 0), (0L, 1)))
  }

  test("should drop a poll's head that is older than one an earlier poll returned (polls served out of order)") {
    val location = QueueLocation("memory://realtime-poll-order", "ingest/manifest", "ingest", Map.empty)
    val epoch = 11L << 32
    val store = queueOf(location, files = 1, epoch)
    val poller = new ManifestPoller(store, location.manifestPath)
    val v1 = poller.read(None)
    queueOf(location, files = 2, epoch)
    val v2 = poller.read(None)
    queueOf(location, files = 3, epoch)
    val v3 = poller.read(None)
    assert(poller.take(v2).map(_.nextSequence).contains(2L))
    assert(poller.take(v1).isEmpty, "an older head was taken after a newer one")
    assert(poller.take(v2).isEmpty) // the same version again: no change
    assert(poller.take(v3).map(_.nextSequence).contains(3L))
    assert(poller.known == Some(v3).collect { case ConditionalRead.Changed(o) => o.version })
    assert(poller.requests == 3)
  }
}
