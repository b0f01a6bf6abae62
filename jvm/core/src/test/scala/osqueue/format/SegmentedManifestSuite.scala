package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}

import java.nio.file.Files
import java.util.Base64

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.scalatest.funsuite.AnyFunSuite

import osqueue.{CorruptManifestException, UnsupportedFormatVersionException}
import osqueue.testing.{HeadVersions, RepoFiles}

/** The segmented head (docs/format.md §2.2): v1 below K, sealing, dequeues, and the decoder's checks. */
class SegmentedManifestSuite extends AnyFunSuite {
  private val key = "ingest/manifest"

  private def entry(i: Int, ext: Array[Byte] = Array.emptyByteArray) =
    NewEntry(BatchNames.newKey("ingest", 1767225600000L + i), IndexedSeq(MetadataItem(0, i.toLong, Array[Byte](i.toByte))), ext)

  /** Appends one entry at a time with tail limit `k`; segments are kept in `stored` (key -> bytes). */
  private def build(n: Int, k: Int, stored: mutable.Map[String, Array[Byte]] = mutable.Map.empty): Array[Byte] = {
    var raw = ManifestCodec.EmptyBytes
    for (i <- 0 until n) {
      raw = ManifestHead.parse(raw, key).appended(Seq(entry(i)), k,
        { t =>
          val ref = SegmentRef.of(t, SegmentNames.newKey(key, 1767225600000L + i))
          stored(ref.key) = t.bytes
          ref
        },
        { f =>
          val ref = SegmentRef.ofIndex(f, SegmentNames.newIndexKey(key, 1767225600000L + i))
          stored(ref.key) = f.bytes
          ref
        })._1
    }
    raw
  }

  private def version(raw: Array[Byte]) = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).getShort(raw.length - 2).toInt

  /** An index object's refs from `stored` (CorruptManifest if it is not there). */
  private def children(stored: collection.Map[String, Array[Byte]])(r: SegmentRef): IndexedSeq[SegmentRef] =
    IndexObject.decode(stored.getOrElse(r.key, throw new CorruptManifestException(r.key, "not stored")), r)

  private def leaves(h: ManifestHead, stored: collection.Map[String, Array[Byte]]): IndexedSeq[SegmentRef] = {
    def walk(r: SegmentRef): IndexedSeq[SegmentRef] = if (r.isIndex) children(stored)(r).flatMap(walk) else IndexedSeq(r)
    h.refs.flatMap(walk)
  }

  private def allEntries(raw: Array[Byte], stored: collection.Map[String, Array[Byte]]): IndexedSeq[ManifestEntry] = {
    val h = ManifestHead.parse(raw, key)
    leaves(h, stored).flatMap(r => ManifestHead.decodeSegment(stored(r.key), r).filter(_.sequence >= h.lowWater)) ++
      h.tailEntries
  }

  test("up to K queued entries the manifest stays byte-for-byte RFC v1") {
    val segmented = build(4, k = 4)
    var v1 = ManifestCodec.EmptyBytes
    // the same entries through the v1 path: equal bytes (ULIDs differ per call, so rebuild from the decoded entries)
    val m = ManifestCodec.decode(segmented, key)
    m.entries.foreach(e => v1 = ManifestEdits.append(v1, Seq(NewEntry(e.location, e.metadata, e.extension)), key)._1)
    assert(version(segmented) == 1)
    assert(segmented.sameElements(v1))
  }

  test("an append past K seals the tail into a segment that is an RFC v1 manifest of those entries, extensions kept") {
    val stored = mutable.Map.empty[String, Array[Byte]]
    val ext = "OSQ1-not-really".getBytes("UTF-8")
    var raw = ManifestCodec.EmptyBytes
    val added = (0 until 5).map(i => entry(i, if (i == 1) ext else Array.emptyByteArray))
    added.foreach { e =>
      raw = ManifestHead.parse(raw, key).appended(Seq(e), 4,
        { t =>
          val ref = SegmentRef.of(t, SegmentNames.newKey(key, 1L)); stored(ref.key) = t.bytes; ref
        }, _ => fail("one segment: nothing to fold"))._1
    }
    assert(version(raw) == 3) // a segmented head is v3 without sections (docs/adr/0006 item 3)
    intercept[UnsupportedFormatVersionException](ManifestCodec.decode(raw, key)) // what a v1 reader does
    val h = ManifestHead.parse(raw, key)
    assert(h.refs.size == 1 && h.tailSize == 1 && h.lowWater == 0 && h.nextSequence == 5 && h.depth == 5)
    val seg = ManifestCodec.decode(stored(h.refs.head.key), h.refs.head.key) // plain v1 decoder
    assert(seg.entries.map(_.sequence) == (0L until 4L) && seg.nextSequence == 4 && seg.epoch == 0)
    assert(seg.entries(1).extension.sameElements(ext))
    assert(h.refs.head.oldestBatchMs == BatchNames.ulidTimeMs(added.head.location).get)
    assert(allEntries(raw, stored).map(_.location) == added.map(_.location))
  }

  test("an unknown version is refused naming the versions the reader reads: 1 to 3 by a head reader, 1 by v1") {
    val v4 = build(3, 4).clone()
    v4(v4.length - 2) = 4
    val byHead = intercept[UnsupportedFormatVersionException](ManifestHead.parse(v4, key))
    assert(byHead.getMessage.endsWith("has format version 4; this osqueue reads versions 1, 2 and 3 only (upgrade osqueue)"))
    val byV1 = intercept[UnsupportedFormatVersionException](ManifestCodec.decode(v4, key))
    assert(byV1.getMessage.endsWith("has format version 4; this osqueue reads version 1 only (upgrade osqueue)"))
  }

  test("dequeues: inside a segment move low_water, past every segment give v1 again; the epoch edit keeps all") {
    val stored = mutable.Map.empty[String, Array[Byte]]
    val raw = build(11, k = 3, stored) // segments [0..2] [3..5] [6..8], tail 9, 10; the last two folded (F = 2)
    val h = ManifestHead.parse(raw, key)
    assert(h.refs.map(_.level) == Seq(0, 1))
    assert(leaves(h, stored).map(s => (s.firstSequence, s.lastSequence)) == Seq((0L, 2L), (3L, 5L), (6L, 8L)))
    val locs = allEntries(raw, stored).map(_.location)
    val partial = ManifestHead.parse(raw, key).dequeuedThrough(3, children(stored)).get
    val p = ManifestHead.parse(partial, key)
    assert(p.refs.map(_.level) == Seq(0, 0), "the index was expanded")
    assert(p.refs.size == 2 && p.lowWater == 4 && p.firstSequence == 4 && p.depth == 7)
    assert(allEntries(partial, stored).map(_.location) == locs.drop(4))
    assert(p.dequeuedThrough(3, children(stored)).isEmpty && p.dequeuedThrough(2, children(stored)).isEmpty)
    val pastAll = p.dequeuedThrough(9, children(stored)).get
    assert(version(pastAll) == 1)
    assert(ManifestCodec.decode(pastAll, key).entries.map(_.location) == locs.drop(10))
    val bumped = ManifestHead.parse(partial, key).withEpoch(42, None, children(stored))
    val b = ManifestHead.parse(bumped, key)
    assert(b.epoch == 42 && b.refs == p.refs && b.lowWater == 4 && b.tailLocations == p.tailLocations)
    // re-encoding through an edit that changes nothing gives the bytes back
    assert(ManifestHead.parse(partial, key).withEpoch(p.epoch, None, children(stored)).sameElements(partial))
    assert(ManifestHead.parse(raw, key).withEpoch(h.epoch, None, _ => fail("no index read")).sameElements(raw))
  }

  test("a segment whose bytes differ from its ref is CorruptManifest naming the segment") {
    val stored = mutable.Map.empty[String, Array[Byte]]
    val raw = build(5, k = 4, stored)
    val ref = ManifestHead.parse(raw, key).refs.head
    val bytes = stored(ref.key).clone()
    bytes(10) = (bytes(10) ^ 1).toByte
    val e = intercept[CorruptManifestException](ManifestHead.decodeSegment(bytes, ref))
    assert(e.getMessage.contains(ref.key) && e.getMessage.contains("SHA-256"))
    intercept[CorruptManifestException](ManifestHead.decodeSegment(stored(ref.key).dropRight(1), ref))
  }

  test("the decoder refuses heads that break the invariants") {
    val stored = mutable.Map.empty[String, Array[Byte]]
    // the v2 decoder's invariants, on the v2 form of a written head (v3's CRC would catch these first)
    val raw = HeadVersions.asV2(build(8, k = 3, stored)) // segments [0..2] [3..5], tail 6, 7
    val h = ManifestHead.parse(raw, key)
    val refsLen = ManifestHead.encodeRefs(h.refs).length
    def withTrailer(segmentsLen: Int, count: Int, lowWater: Long): Array[Byte] = {
      val out = raw.clone()
      ByteBuffer.wrap(out).order(ByteOrder.LITTLE_ENDIAN).position(raw.length - 38)
        .putInt(segmentsLen).putInt(count).putLong(lowWater)
      out
    }
    def refused(bytes: Array[Byte], words: String) = {
      val e = intercept[CorruptManifestException](ManifestHead.parse(bytes, key))
      assert(e.getMessage.contains(words), e.getMessage)
    }
    refused(withTrailer(refsLen, 2, 3), "not in the first segment")
    refused(withTrailer(refsLen, 0, 0), "lists no segment")
    refused(withTrailer(refsLen, 1, 0), "unexpected bytes after the last segment ref")
    refused(withTrailer(Int.MaxValue, 2, 0), "runs past the head")
    // the second segment made to start one later: not contiguous
    val gap = raw.clone()
    val second = ManifestHead.encodeRefs(h.refs.take(1)).length
    ByteBuffer.wrap(gap).order(ByteOrder.LITTLE_ENDIAN).putLong(second, 4L)
    refused(gap, "contiguous")
    // the tail not where the segments end: drop the first tail entry
    val firstTail = ManifestHead.parse(raw, key)
    val cutHead = ManifestHead.parse(raw, key).dequeuedThrough(5, children(stored)).get // v1 with 6, 7
    assert(version(cutHead) == 1 && firstTail.tailSize == 2)
    refused(
      ManifestHead.encodeRefs(h.refs.take(1)) ++ cutHead.dropRight(22) ++
        ByteBuffer.allocate(38).order(ByteOrder.LITTLE_ENDIAN).putInt(second).putInt(1).putLong(0)
          .put(ManifestCodec.encodeFooter(ManifestFooter(2, 8, 0), 2)).array(), "not where the last segment ends")
    refused(raw.take(10) ++ raw.takeRight(22), "shorter than a segmented head")
  }

  // The golden heads and index objects of tests/golden/heads.json (built by hand in make_vectors.py, read by Python too).
  private val heads = new ObjectMapper().readTree(RepoFiles.golden.resolve("heads.json").toFile)
  private def golden(file: String) = Files.readAllBytes(RepoFiles.golden.resolve(file))
  private def hex(bytes: Array[Byte]) = bytes.map(b => f"${b & 0xFF}%02x").mkString
  private def nodes(n: JsonNode): IndexedSeq[JsonNode] = n.elements().asScala.toIndexedSeq
  /** The ref a JSON ref describes, after checking the decoded one (when given) says the same. */
  private def refOf(j: JsonNode): SegmentRef =
    SegmentRef(j.get("first_sequence").asLong, j.get("entry_count").asLong, j.get("level").asInt, j.get("byte_length").asLong,
      j.get("oldest_batch_ms").asLong, j.get("sha256_hex").asText.grouped(2).map(Integer.parseInt(_, 16).toByte).toArray,
      j.get("key").asText)

  for (v <- nodes(heads.get("heads"))) {
    val name = v.get("name").asText
    test(s"golden head $name: refs, low_water, tail and the objects it reaches as built by hand; v1 readers refuse it") {
      val bytes = golden(v.get("file").asText)
      val h = ManifestHead.parse(bytes, name)
      val e = v.get("head")
      assert(h.version == 2 && h.nextSequence == e.get("next_sequence").asLong && h.epoch == e.get("epoch").asLong)
      assert(h.lowWater == e.get("low_water").asLong)
      val refs = nodes(e.get("refs"))
      assert(h.refs == refs.map(refOf))
      refs.zip(h.refs).foreach { case (j, r) => assert(hex(r.sha256) == j.get("sha256_hex").asText) }
      // every object it reaches, walked through the one tree walk readers use (SegmentTree)
      val store = osqueue.store.InMemoryStore.fresh()
      v.get("objects").fields().asScala.foreach(f => store.put(f.getKey, golden(f.getValue.asText)))
      val manifests = new osqueue.queue.ManifestStore(store, name)
      val leaves = new osqueue.queue.SegmentTree(manifests).leaves(h, h.lowWater, h.tailFirstSequence).toIndexedSeq
      assert(leaves.forall(_.level == 0))
      val queued = leaves.flatMap(r => manifests.readSegment(r).map(_.sequence).filter(_ >= h.lowWater)) ++
        h.tailEntries.map(_.sequence)
      assert(queued == nodes(e.get("queued_sequences")).map(_.asLong))
      val tail = nodes(e.get("tail"))
      assert(h.tailEntries.map(x => (x.sequence, x.location)) == tail.map(t => (t.get("sequence").asLong, t.get("location").asText)))
      assert(h.tailEntries.head.metadata.head.payload.sameElements(
          Base64.getDecoder.decode(tail.head.get("metadata").get(0).get("payload_b64").asText)))
      // an edit that changes nothing re-encodes the same bytes
      assert(h.withEpoch(h.epoch, None, _ => fail("no index read")).sameElements(HeadVersions.asV3(bytes))) // v2 read, v3 written
      assert(v.get("v1_error").asText == "UnsupportedFormatVersion")
      intercept[UnsupportedFormatVersionException](ManifestCodec.decode(bytes, name))
    }
  }

  for (v <- nodes(heads.get("indexes"))) {
    val name = v.get("name").asText
    test(s"golden index object $name decodes for its ref to the refs built by hand, and re-encodes to its bytes") {
      val bytes = golden(v.get("file").asText)
      val ref = refOf(v.get("ref"))
      val refs = IndexObject.decode(bytes, ref)
      assert(refs == nodes(v.get("refs")).map(refOf))
      assert(IndexObject.encode(refs, ref.level).sameElements(bytes))
      assert(SegmentRef.ofIndex(IndexObject.fold(refs), ref.key) == ref)
    }
  }

  for (v <- nodes(heads.get("rejected"))) {
    val name = v.get("name").asText
    test(s"golden head $name is CorruptManifest") {
      assert(v.get("error").asText == "CorruptManifest")
      val e = intercept[CorruptManifestException](ManifestHead.parse(golden(v.get("file").asText), s"some/key/$name"))
      assert(e.getMessage.contains(s"some/key/$name"))
    }
  }

  for (v <- nodes(heads.get("rejected_indexes"))) {
    val name = v.get("name").asText
    test(s"golden index object $name is CorruptManifest naming it") {
      assert(v.get("error").asText == "CorruptManifest")
      val ref = refOf(v.get("ref"))
      val e = intercept[CorruptManifestException](IndexObject.decode(golden(v.get("file").asText), ref))
      assert(e.getMessage.contains(ref.key))
    }
  }

  test("mutated and truncated heads parse, or fail with a typed error only") {
    val stored = mutable.Map.empty[String, Array[Byte]]
    val valid = build(9, k = 2, stored)
    val rnd = new scala.util.Random(7)
    for (i <- 0 until 3000) {
      val b = valid.clone()
      if (i % 3 == 0) (0 until 1 + rnd.nextInt(3)).foreach(_ => b(rnd.nextInt(b.length)) = rnd.nextInt(256).toByte)
      val bytes = if (i % 3 == 1) b.drop(rnd.nextInt(b.length)) else if (i % 3 == 2) b.take(rnd.nextInt(b.length)) else b
      try {
        val h = ManifestHead.parse(bytes, key)
        h.tailEntries; h.dequeuedThrough(h.firstSequence, children(stored)); h.withEpoch(1, None, children(stored))
      } catch {
        case _: CorruptManifestException | _: UnsupportedFormatVersionException =>
      }
    }
  }
}
