package osqueue.spark

import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.{ManifestCodec, ManifestHead, NewEntry}

/** The progress metrics: what is behind, how old the oldest unread entry is, the epoch and the loss counts. */
class SourceProgressMetricsSuite extends AnyFunSuite {
  /** A head holding sequences [first, next). */
  private def head(first: Int, next: Int): ManifestHead = {
    val entries = (0 until next).map(i => NewEntry(s"ingest/b-$i.batch", IndexedSeq.empty, Array.emptyByteArray))
    val full = ManifestHead.parse(ManifestHead.parse(ManifestCodec.EmptyBytes, "m")
        .appended(entries, 1000, _ => fail("no seal"), _ => fail("no fold"))._1, "m")
    ManifestHead.parse(full.withEpoch(5L, Some(first - 1L), _ => fail("no index")), "m")
  }

  test("behind the queue: from the consumed position, or the queue's first entry before anything was consumed") {
    val m = head(2, 10)
    val fresh = SourceProgressMetrics(m, None, None, 0L, None, 0, 0, 0)
    assert(fresh("queueLength") == "8" && fresh("batchesBehindLatest") == "8" && fresh("numFilesOutstanding") == "8")
    assert(fresh("epoch") == "" && fresh("lagSeconds") == "0.000")
    val later = SourceProgressMetrics(m, Some(7L), None, 0L, Some(5L), 0, 0, 0)
    assert(later("queueLength") == "3" && later("batchesBehindLatest") == "3" && later("epoch") == "5")
    // a consumed position behind the first entry (entries removed): the queue's length, but all behind
    val behindFirst = SourceProgressMetrics(m, Some(0L), None, 0L, None, 0, 0, 0)
    assert(behindFirst("queueLength") == "8" && behindFirst("batchesBehindLatest") == "10")
    assert(SourceProgressMetrics.oldestUnread(m, Some(0L)) == 2 && SourceProgressMetrics.oldestUnread(m, Some(7L)) == 7)
  }

  test("lagSeconds is the age of the oldest unread entry; dataLossEvents counts the executors' missing batches too") {
    val m = head(0, 3)
    val r = SourceProgressMetrics(m, Some(1L), Some(10000L), 12500L, None, dataLossEvents = 2, missingBatches = 3,
      duplicateCopiesSkipped = 4)
    assert(r("lagSeconds") == "2.500")
    assert(r("dataLossEvents") == "5" && r("missingBatches") == "3" && r("duplicateCopiesSkipped") == "4")
    assert(SourceProgressMetrics(m, None, Some(20000L), 12500L, None, 0, 0, 0)("lagSeconds") == "0.000", "never negative")
  }

  test("per subscription: its name, the position its record holds, its lag from there and its ack writes") {
    val name = "billing"
    val base = head(2, 10)
    val sections = base.sections.withSubscription(osqueue.format.Subscription(name, 1L << 32, 4L, 0L, 0L))
    val m = ManifestHead.parse(base.withReaders(base.epoch, sections, _ => fail("no index"), cut = false), "m")
    val r = SourceProgressMetrics(m, Some(7L), None, 0L, None, 0, 0, 0, subscription = Some(name), ackWrites = 3)
    assert(r("subscription") == name && r("subscriptionAcked") == "4" && r("subscriptionLag") == "6")
    assert(r("ackWrites") == "3" && r("queueLength") == "3")
    val unnamed = SourceProgressMetrics(head(2, 10), Some(7L), None, 0L, None, 0, 0, 0)
    assert(unnamed("subscription") == "" && unnamed("subscriptionAcked") == "" && unnamed("subscriptionLag") == "")
  }
}
