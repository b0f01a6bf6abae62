package osqueue.spark

import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.{EntryTag, ManifestCodec, ManifestHead, NewEntry}

/** One walk, not two: the same present range at the same epoch reuses the last plan; anything else plans anew. */
class PlanCacheSuite extends AnyFunSuite {
  /** A v1 head holding sequences [first, next) at `epoch`. */
  private def head(first: Int, next: Int, epoch: Long = 0L): ManifestHead = {
    val entries = (0 until next).map(i => NewEntry(s"ingest/b-$i.batch", IndexedSeq.empty, Array.emptyByteArray))
    val full = ManifestHead.parse(ManifestHead.parse(ManifestCodec.EmptyBytes, "m")
        .appended(entries, 1000, _ => fail("no seal"), _ => fail("no fold"))._1, "m")
    ManifestHead.parse(full.withEpoch(epoch, Some(first - 1L), _ => fail("no index")), "m")
  }

  test("the same range, state, skip and epoch is planned once; another of any of them is planned again") {
    val cache = new PlanCache[String]
    var plans = 0
    def plan(m: ManifestHead, from: Long, to: Long, d: EntryTag.Delivered = EntryTag.Delivered.Empty, skip: Int = 0) =
      cache.planOf(m, from, to, d, skip) { plans += 1; s"plan-$plans" }
    val m = head(0, 5)
    assert(plan(m, 0, 5) == "plan-1")
    assert(plan(m, 0, 5) == "plan-1" && plans == 1)
    assert(plan(m, 0, 4) == "plan-2")
    assert(plan(m, 0, 4, skip = 1) == "plan-3")
    assert(plan(head(0, 5, epoch = m.epoch + 1), 0, 4, skip = 1) == "plan-4", "another reader may have dequeued")
  }

  test("the key is the present part of the range: an end past the queue's next sequence is the same plan") {
    val cache = new PlanCache[String]
    var plans = 0
    val m = head(2, 5)
    def plan(from: Long, to: Long) = cache.planOf(m, from, to, EntryTag.Delivered.Empty, 0) { plans += 1; s"plan-$plans" }
    assert(plan(0, 9) == "plan-1")
    assert(plan(2, 5) == "plan-1", "[0, 9) of a queue holding [2, 5) is [2, 5)")
    assert(plans == 1)
  }
}
