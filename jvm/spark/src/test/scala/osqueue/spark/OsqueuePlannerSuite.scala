package osqueue.spark

import java.util.concurrent.atomic.AtomicInteger

import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.{BatchIntegrity, EntryTag, ManifestCodec, ManifestHead, NewEntry, SegmentRef}
import osqueue.queue.{ManifestStore, SegmentTree}
import osqueue.store.InMemoryStore

/** Planning on a segmented head reads only the segments covering the range and plans slices, not one partition per entry. */
class OsqueuePlannerSuite extends AnyFunSuite {
  private val location = QueueLocation("memory://q", "ingest/manifest", "ingest", Map.empty)

  /** `groups` appends of K entries each (every one seals the tail before it), then `tail` entries. */
  private def deepQueue(k: Int, groups: Int, tail: Int, batchBytes: Option[Long] = None): (ManifestHead, ManifestStore) = {
    val manifests = new ManifestStore(InMemoryStore.fresh(), "ingest/manifest")
    var raw = ManifestCodec.EmptyBytes
    // With batchBytes, every entry has an integrity record saying its batch file has that many bytes.
    val ext = batchBytes.fold(Array.emptyByteArray)(n => BatchIntegrity.record(n, 0L))
    (Seq.fill(groups)(k) :+ tail).foreach { n =>
      val entries = (0 until n).map(i => NewEntry(s"ingest/b-$i.batch", IndexedSeq.empty, ext))
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

  test("big batch files: partitions of at most SliceBytes by the integrity records, so a backlog spreads over tasks") {
    val mb = 1L << 20
    val (head, manifests) = deepQueue(k = 20, groups = 2, tail = 9, batchBytes = Some(12 * mb))
    val (read, _) = counting(manifests)
    val plan = OsqueuePlanner.plan(head, new SegmentTree(manifests), read, location, 0, head.nextSequence, EntryTag.Delivered.Empty,
      failOnDataLoss = true)
    val sizes = plan.partitions.toSeq.map {
      case s: OsqueueSlicePartition => (s.until - s.from).toInt
      case b: OsqueueInputPartition => b.descriptors.size
    }
    // 12 MiB each: two fit in 32 MiB, a third does not (2 segments of 20, a tail of 9)
    assert(sizes == Seq.fill(24)(2) :+ 1, sizes)
    val slices = plan.partitions.toSeq.collect { case s: OsqueueSlicePartition => (s.from, s.until) }
    assert(slices.head._1 == 0 && slices.zip(slices.tail).forall { case (a, b) => a._2 == b._1 }, "slices not contiguous")
    assert(plan.partitions.toSeq.collect { case b: OsqueueInputPartition => b.descriptors.map(_.sequence) }.flatten ==
      (head.tailFirstSequence until head.nextSequence))
  }

  test("runs: an entry larger than SliceBytes is a run of its own; entries without a size count by number only") {
    val big = OsqueuePlanner.SliceBytes + 1
    assert(OsqueuePlanner.runs[Long](IndexedSeq(1L, big, 1L, 1L), identity).map(_.toList).toList ==
      List(List(1L), List(big), List(1L, 1L)))
    assert(OsqueuePlanner.runs[Long](IndexedSeq.fill(300)(0L), identity).map(_.size).toList ==
      List(OsqueuePlanner.SliceEntries, OsqueuePlanner.SliceEntries, 300 - 2 * OsqueuePlanner.SliceEntries))
  }
}
