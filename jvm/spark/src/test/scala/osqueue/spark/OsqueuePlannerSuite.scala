package osqueue.spark

import java.util.concurrent.atomic.AtomicInteger

import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.{EntryTag, ManifestCodec, ManifestHead, NewEntry, SegmentRef}
import osqueue.queue.{ManifestStore, SegmentTree}
import osqueue.store.InMemoryStore

/** Planning on a segmented head reads only the segments covering the range and plans slices, not one partition per entry. */
class OsqueuePlannerSuite extends AnyFunSuite {
  private val location = QueueLocation("memory://q", "ingest/manifest", "ingest", Map.empty)

  /** `groups` appends of K entries each (every one seals the tail before it), then `tail` entries. */
  private def deepQueue(k: Int, groups: Int, tail: Int): (ManifestHead, ManifestStore) = {
    val manifests = new ManifestStore(InMemoryStore.fresh(), "ingest/manifest")
    var raw = ManifestCodec.EmptyBytes
    (Seq.fill(groups)(k) :+ tail).foreach { n =>
      val entries = (0 until n).map(i => NewEntry(s"ingest/b-$i.batch", IndexedSeq.empty, Array.emptyByteArray))
      raw = ManifestHead.parse(raw, manifests.key)
        .appended(entries, k, t => manifests.writeSegment(t, 0L), f => manifests.writeIndex(f, 0L))._1
    }
    (ManifestHead.parse(raw, manifests.key), manifests)
  }

  private def counting(manifests: ManifestStore): (SegmentRef => IndexedSeq[osqueue.format.ManifestEntry], AtomicInteger) = {
    val reads = new AtomicInteger()
    ((r: SegmentRef) => { reads.incrementAndGet(); manifests.readSegment(r) }, reads)
  }

  test("a range inside the segments reads only the segments covering it and plans contiguous slices") {
    val (head, manifests) = deepQueue(k = 100, groups = 100, tail = 30)
    // 100 segments, 99 of them folded by 3 (F at K = 100) into index objects of up to 4 levels
    assert(new SegmentTree(manifests).leaves(head, 0, Long.MaxValue).size == 100 && head.tailSize == 30)
    assert(head.refs.map(_.level) == Seq(0, 4, 2, 2))
    val (read, reads) = counting(manifests)
    val plan =
      OsqueuePlanner.plan(head, new SegmentTree(manifests), read, location, 2550, 2750, EntryTag.Delivered.Empty, failOnDataLoss = true)
    assert(reads.get() == 3, "segments 25, 26 and 27 cover [2550, 2750)")
    val slices = plan.partitions.toSeq.map(_.asInstanceOf[OsqueueSlicePartition])
    assert(slices.map(s => (s.from, s.until)) == Seq((2550L, 2600L), (2600L, 2700L), (2700L, 2750L)))
    assert(slices.map(_.segment.firstSequence) == Seq(2500L, 2600L, 2700L))
  }

  test("the whole backlog: slices of at most SliceEntries per segment, then the tail's batch files in one partition") {
    val (head, manifests) = deepQueue(k = 300, groups = 10, tail = 5)
    val (read, reads) = counting(manifests)
    val plan = OsqueuePlanner.plan(head, new SegmentTree(manifests), read, location, 0, head.nextSequence, EntryTag.Delivered.Empty,
      failOnDataLoss = true)
    assert(reads.get() == 10)
    val (slices, batches) = plan.partitions.toSeq.partition(_.isInstanceOf[OsqueueSlicePartition])
    val ranges = slices.map(_.asInstanceOf[OsqueueSlicePartition]).map(s => (s.from, s.until))
    assert(ranges.forall { case (f, u) => u - f <= OsqueuePlanner.SliceEntries })
    assert(ranges.head._1 == 0 && ranges.zip(ranges.tail).forall { case (a, b) => a._2 == b._1 }, "slices not contiguous")
    assert(ranges.last._2 == head.tailFirstSequence)
    assert(batches.flatMap(_.asInstanceOf[OsqueueInputPartition].descriptors.map(_.sequence)) ==
      (head.tailFirstSequence until head.nextSequence))
  }

  test("a range within the tail reads no segment") {
    val (head, manifests) = deepQueue(k = 50, groups = 20, tail = 10)
    val (read, reads) = counting(manifests)
    val plan = OsqueuePlanner.plan(head, new SegmentTree(manifests), read, location, head.tailFirstSequence + 3, head.nextSequence,
      EntryTag.Delivered.Empty, failOnDataLoss = true)
    assert(reads.get() == 0)
    assert(plan.partitions.toSeq.flatMap(_.asInstanceOf[OsqueueInputPartition].descriptors.map(_.sequence)) ==
      (head.tailFirstSequence + 3 until head.nextSequence))
  }
}
