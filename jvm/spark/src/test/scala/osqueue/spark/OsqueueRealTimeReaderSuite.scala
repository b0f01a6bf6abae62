package osqueue.spark

import java.util.concurrent.atomic.AtomicLong

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{Clock, SystemClock}
import osqueue.format.{BatchCodec, Compression, EntryTag, Incarnation, ManifestCodec, ManifestEdits, NewEntry}

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
}
