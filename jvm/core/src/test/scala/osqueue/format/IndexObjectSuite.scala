package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}

import scala.collection.mutable

import org.scalatest.funsuite.AnyFunSuite

import osqueue.CorruptManifestException
import osqueue.testing.HeadVersions

/** Index objects (docs/format.md §2.2): the codec and its checks, folding on seal, expanding on dequeue. */
class IndexObjectSuite extends AnyFunSuite {
  private val key = "ingest/manifest"
  private val t0 = 1767225600000L

  private def entry(i: Int) = NewEntry(BatchNames.newKey("ingest", t0 + i), IndexedSeq(MetadataItem(0, i.toLong, Array[Byte](1))))

  /** A queue built by appends of `group` entries with segment size `k`; segments and index objects kept in `stored`. */
  private final class Built(k: Int, group: Int = 1) {
    val stored = mutable.LinkedHashMap.empty[String, Array[Byte]]
    var raw: Array[Byte] = ManifestCodec.EmptyBytes
    var appended = 0
    var seals = 0
    def append(n: Int): Unit = (0 until n).foreach { _ =>
      val es = (0 until group).map(j => entry(appended + j))
      raw = ManifestHead.parse(raw, key).appended(es, k,
        { t =>
          seals += 1
          val r = SegmentRef.of(t, SegmentNames.newKey(key, t0 + appended)); stored(r.key) = t.bytes; r
        },
        { f =>
          val r = SegmentRef.ofIndex(f, SegmentNames.newIndexKey(key, t0 + appended)); stored(r.key) = f.bytes; r
        })._1
      appended += group
    }
    def head: ManifestHead = ManifestHead.parse(raw, key)
    def children(r: SegmentRef): IndexedSeq[SegmentRef] = IndexObject.decode(stored(r.key), r)
    /** Every segment reachable from the head, in order (each index object checked against its ref). */
    def leaves(h: ManifestHead = head): IndexedSeq[SegmentRef] = {
      def walk(r: SegmentRef): IndexedSeq[SegmentRef] = if (r.isIndex) children(r).flatMap(walk) else IndexedSeq(r)
      h.refs.flatMap(walk)
    }
    def queued(h: ManifestHead = head): IndexedSeq[Long] =
      leaves(h).flatMap(r => ManifestHead.decodeSegment(stored(r.key), r).map(_.sequence)).filter(_ >= h.lowWater) ++
        h.tailEntries.map(_.sequence)
  }

  private def levels(h: ManifestHead) = h.refs.map(_.level)

  test("F = max(2, K / 32)") {
    assert(ManifestHead.fanout(1) == 2 && ManifestHead.fanout(64) == 2 && ManifestHead.fanout(95) == 2)
    assert(ManifestHead.fanout(96) == 3 && ManifestHead.fanout(2048) == 64 && ManifestHead.fanout(Int.MaxValue) == 67108863)
  }

  test("an index object round-trips through its ref, and its ref covers its refs' entries and oldest batch") {
    val b = new Built(k = 2)
    b.append(7) // segments [0,1] [2,3] [4,5], tail 6: the last two fold into an index
    val h = b.head
    assert(levels(h) == Seq(0, 1))
    val index = h.refs(1)
    val below = b.children(index)
    assert(below.map(r => (r.firstSequence, r.lastSequence, r.level)) == Seq((2L, 3L, 0), (4L, 5L, 0)))
    assert(index.firstSequence == 2 && index.entryCount == 4 && index.oldestBatchMs == below.map(_.oldestBatchMs).min)
    assert(index.key.endsWith(".index") && SegmentNames.ulidTimeMs(key, index.key).isDefined)
    val bytes = b.stored(index.key)
    assert(bytes.sameElements(IndexObject.encode(below, 1)))
    assert(IndexObject.fold(below).bytes.sameElements(bytes))
    // the refs moved into the index byte for byte
    assert(bytes.take(bytes.length - IndexObject.FooterSize).sameElements(ManifestHead.encodeRefs(below)))
  }

  test("an index object that does not match its ref, or breaks an invariant, is CorruptManifest naming it") {
    val b = new Built(k = 2)
    b.append(7)
    val index = b.head.refs(1)
    val below = b.children(index)
    def refused(bytes: Array[Byte], ref: SegmentRef, words: String) = {
      val e = intercept[CorruptManifestException](IndexObject.decode(bytes, ref))
      assert(e.getMessage.contains(ref.key) && e.getMessage.contains(words), e.getMessage)
    }
    /** `bytes` with a ref made for them (length and SHA-256 right), so the structural checks are what refuse. */
    def asListed(bytes: Array[Byte], level: Int = 1, first: Long = index.firstSequence, count: Long = index.entryCount,
        oldest: Long = index.oldestBatchMs): SegmentRef =
      SegmentRef.ofIndex(FoldedIndex(bytes, first, count, level, oldest), index.key)
    val good = b.stored(index.key)
    val flipped = good.clone(); flipped(3) = (flipped(3) ^ 1).toByte
    refused(flipped, index, "SHA-256")
    refused(good.dropRight(1), index, "bytes")
    // a child of the wrong level
    val wrongLevel = IndexObject.encode(Seq(below(0), below(1).copy(level = 1)), 1)
    refused(wrongLevel, asListed(wrongLevel), "of level 1, not 0")
    // counts that do not sum to the ref's
    refused(good, asListed(good, count = index.entryCount + 1), "count")
    // not starting at the ref's first sequence
    refused(good, asListed(good, first = 1, count = 5), "starts at 2")
    // the ref's level differs from the footer's
    refused(good, asListed(good, level = 2), "level 1, but its ref has level 2")
    // oldest batch time not the refs' minimum
    refused(good, asListed(good, oldest = index.oldestBatchMs - 1), "oldest batch time")
    // fewer than two refs
    val one = ManifestHead.encodeRefs(below.take(1)) ++
      ByteBuffer.allocate(7).order(ByteOrder.LITTLE_ENDIAN).putInt(1).put(1.toByte).putShort(2.toShort).array()
    refused(one, asListed(one, count = 2), "at least 2")
    // a wrong version, and a ref_count the bytes cannot hold
    val v3 = good.clone(); v3(v3.length - 2) = 3
    refused(v3, asListed(v3), "version 3")
    val many = good.clone(); ByteBuffer.wrap(many).order(ByteOrder.LITTLE_ENDIAN).putInt(many.length - 7, 1000)
    refused(many, asListed(many), "cannot fit")
    // a segment ref is not an index
    refused(good, below(0), "not an index")
    intercept[CorruptManifestException](ManifestHead.decodeSegment(good, index))
  }

  test("a head whose first ref is an index, or with a level above 32, is CorruptManifest") {
    val b = new Built(k = 2)
    b.append(7)
    val h = b.head
    // the v2 form of the written head: the ref checks are what fails, not v3's CRC (docs/adr/0006 item 3)
    val tail = HeadVersions.asV2(h.raw).drop(ManifestHead.encodeRefs(h.refs).length)
    def withRefs(refs: Seq[SegmentRef]): Array[Byte] = {
      val encoded = ManifestHead.encodeRefs(refs)
      val out = encoded ++ tail
      ByteBuffer.wrap(out).order(ByteOrder.LITTLE_ENDIAN).putInt(out.length - 38, encoded.length).putInt(out.length - 34, refs.size)
      out
    }
    assert(withRefs(h.refs).sameElements(HeadVersions.asV2(h.raw)))
    val firstIndex = intercept[CorruptManifestException](ManifestHead.parse(withRefs(Seq(h.refs(0).copy(level = 1), h.refs(1))), key))
    assert(firstIndex.getMessage.contains("first ref is an index"))
    val deep = withRefs(Seq(h.refs(0), h.refs(1))).clone()
    deep(ManifestHead.encodeRefs(h.refs.take(1)).length + 16) = 33 // the second ref's level byte
    val e = intercept[CorruptManifestException](ManifestHead.parse(deep, key))
    assert(e.getMessage.contains("level 33"))
  }

  /** The refs at the head's back, per level: fewer than F of each, levels falling from front to back (after s0). */
  private def checkFolded(h: ManifestHead, f: Int, seals: Int): Unit = {
    val back = levels(h).drop(1)
    assert(levels(h).head == 0)
    assert(back == back.sorted(Ordering[Int].reverse), s"levels fall toward the back: $back")
    back.groupBy(identity).foreach { case (l, rs) => assert(rs.size < f, s"level $l: ${rs.size} refs, F = $f") }
    // exactly the digits of (seals - 1) in base F after the first segment
    def digits(n: Int): Int = if (n == 0) 0 else n % f + digits(n / f)
    assert(back.size == digits(seals - 1))
  }

  test("folding at K = 64 (F = 2): after each seal fewer than F refs per level at the back; every entry reachable in order") {
    val b = new Built(k = 64, group = 64)
    for (round <- 1 to 6) {
      b.append(round * 37)
      checkFolded(b.head, 2, b.seals)
      assert(b.queued() == (0L until b.appended.toLong))
    }
    assert(b.head.refs.map(_.level).max >= 8 && b.head.refs.size <= 10, levels(b.head))
  }

  test("folding at K = 2048 (F = 64): level-1 index objects of 64 segments, fewer than F refs per level at the back") {
    val b = new Built(k = 2048, group = 2048)
    b.append(64 * 2 + 10)
    val h = b.head
    checkFolded(h, 64, b.seals)
    assert(levels(h) == Seq(0, 1, 1) ++ Seq.fill(8)(0), levels(h))
    assert(b.children(h.refs(1)).size == 64)
    assert(b.queued() == (0L until b.appended.toLong))
  }

  test("a dequeue expands the index it reaches: the first ref stays a segment and every later entry stays reachable") {
    val b = new Built(k = 2)
    b.append(70) // 34 segments folded into a tree of F = 2
    val all = b.queued()
    assert(levels(b.head).max >= 4)
    var h = b.head
    for (s <- Seq(0L, 1L, 2L, 5L, 17L, 18L, 40L, 63L)) {
      val bytes = h.dequeuedThrough(s, b.children).get
      h = ManifestHead.parse(bytes, key) // parse checks the first ref is a segment
      assert(h.refs.head.level == 0 && h.lowWater == s + 1 && h.refs.head.contains(s + 1))
      assert(b.queued(h) == all.filter(_ > s), s"through $s")
      // expansion leaves fewer than F of each level at the front (up to F segments: the last index
      // expanded keeps all its children after s), folding fewer than F at the back
      assert(levels(h).groupBy(identity).forall { case (l, rs) => rs.size <= (if (l == 0) 2 * 2 - 1 else 2 * (2 - 1)) },
        levels(h))
    }
    // an epoch edit reads no index (the first ref is already a segment) and keeps everything
    val bumped = ManifestHead.parse(h.withEpoch(9, None, _ => fail("no index read")), key)
    assert(bumped.epoch == 9 && bumped.refs == h.refs && b.queued(bumped) == b.queued(h))
    // past every ref: v1 again
    val v1 = h.dequeuedThrough(h.tailFirstSequence - 1, b.children).get
    assert(!ManifestHead.parse(v1, key).isSegmented && ManifestCodec.decode(v1, key).entries.map(_.sequence) == all.filter(_ >= 68))
  }
}
