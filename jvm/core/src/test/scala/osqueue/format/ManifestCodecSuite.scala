package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.StandardCharsets.UTF_8

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{CorruptManifestException, UnsupportedFormatVersionException}

class ManifestCodecSuite extends AnyFunSuite {
  private val key = "ingest/manifest"
  private def meta(i: Int, t: Long, p: String) = MetadataItem(i, t, p.getBytes(UTF_8))

  private val sample = Manifest(
    IndexedSeq(
      ManifestEntry(5, "ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch", IndexedSeq(meta(0, 1000, "a"), meta(3, 1001, ""))),
      ManifestEntry(6, "ingest/01J5T4R7NP39QWAAAAAAAAAAAA.batch", IndexedSeq.empty)),
    nextSequence = 7, epoch = 3)

  test("should encode the empty manifest as the 22-byte footer") {
    assert(ManifestCodec.EmptyBytes.length == 22)
    assert(ManifestCodec.decode(ManifestCodec.EmptyBytes, key) == Manifest.Empty)
  }

  test("should round-trip entries with metadata, empty payloads and no metadata") {
    val bytes = ManifestCodec.encode(sample)
    assert(ManifestCodec.decode(bytes, key) == sample)
    assert(sample.entries(0).metadataFor(2).map(_.startIndex).contains(0))
    assert(sample.entries(0).metadataFor(3).map(_.startIndex).contains(3))
  }

  test("should append without touching existing bytes and assign sequences from next_sequence") {
    val before = ManifestCodec.encode(sample)
    val (after, first) = ManifestEdits.append(before, Seq(NewEntry("ingest/x.batch", IndexedSeq(meta(0, 5, "m")))), key)
    assert(first == 7)
    assert(after.take(before.length - 22).sameElements(before.take(before.length - 22)))
    val m = ManifestCodec.decode(after, key)
    assert(m.nextSequence == 8 && m.epoch == 3 && m.entries.map(_.sequence) == Seq(5, 6, 7))
  }

  test("should dequeue a prefix, keep next_sequence, and report a no-op as None") {
    val bytes = ManifestCodec.encode(sample)
    val m = ManifestCodec.decode(ManifestEdits.dequeueThrough(bytes, 5, key).get, key)
    assert(m.entries.map(_.sequence) == Seq(6) && m.nextSequence == 7)
    assert(ManifestEdits.dequeueThrough(bytes, 4, key).isEmpty)
    val all = ManifestCodec.decode(ManifestEdits.dequeueThrough(bytes, 100, key).get, key)
    assert(all.entries.isEmpty && all.nextSequence == 7 && all.firstSequence == 7)
  }

  test("should set the epoch and dequeue in one edit, carrying extension bytes verbatim") {
    val withExt = sample.copy(entries = sample.entries.map(_.copy(extension = Array[Byte](9, 8, 7))))
    val bytes = ManifestEdits.withEpoch(ManifestCodec.encode(withExt), 4, Some(5), key)
    val m = ManifestCodec.decode(bytes, key)
    assert(m.epoch == 4 && m.entries.size == 1 && m.entries.head.extension.sameElements(Array[Byte](9, 8, 7)))
  }

  private def footer(count: Int, next: Long, epoch: Long, version: Int): Array[Byte] =
    ByteBuffer.allocate(22).order(ByteOrder.LITTLE_ENDIAN)
      .putInt(count).putLong(next).putLong(epoch).putShort(version.toShort).array()

  private def rejects[T <: Throwable](bytes: Array[Byte], fragment: String)(implicit ct: reflect.ClassTag[T]): Unit = {
    val e = intercept[T](ManifestCodec.decode(bytes, key))
    assert(e.getMessage.contains(key), e.getMessage)
    assert(e.getMessage.contains(fragment), e.getMessage)
  }

  test("should reject every corrupt form with a typed error naming the object") {
    val good = ManifestCodec.encode(sample)
    rejects[CorruptManifestException](Array.emptyByteArray, "empty object")
    rejects[CorruptManifestException](good.takeRight(21), "shorter than the 22-byte footer")
    rejects[UnsupportedFormatVersionException](footer(0, 0, 0, 2), "format version 2")
    rejects[CorruptManifestException](footer(1, 1, 0, 1), "cannot fit")
    rejects[CorruptManifestException](good.take(40) ++ footer(2, 7, 3, 1), "runs past")
    rejects[CorruptManifestException](good.dropRight(22) ++ Array[Byte](1, 2) ++ good.takeRight(22),
      "between the last entry and the footer")
    // entry_len below 14 + location_len
    val shortLen = good.clone(); ByteBuffer.wrap(shortLen).order(ByteOrder.LITTLE_ENDIAN).putInt(0, 20)
    rejects[CorruptManifestException](shortLen, "entry 0")
    // last sequence must stay below next_sequence
    rejects[CorruptManifestException](good.dropRight(22) ++ footer(2, 6, 3, 1), "next_sequence")
    rejects[CorruptManifestException](good.dropRight(22) ++ footer(2, 9, 3, 1), "not next_sequence - 1")
  }

  test("should reject non-contiguous sequences and invalid UTF-8 locations") {
    val gap = sample.copy(entries = IndexedSeq(sample.entries(0), sample.entries(1).copy(sequence = 9)), nextSequence = 10)
    rejects[CorruptManifestException](ManifestCodec.encode(gap), "contiguous")
    val bad = ManifestCodec.encode(Manifest(IndexedSeq(ManifestEntry(0, "ab", IndexedSeq.empty)), 1, 0))
    bad(4 + 10) = 0xC3.toByte; bad(4 + 11) = 0x28.toByte // an invalid 2-byte sequence
    rejects[CorruptManifestException](bad, "UTF-8")
  }

  test("should refuse an append that would exhaust the sequence space") {
    val top = ManifestCodec.encode(Manifest(IndexedSeq.empty, Long.MaxValue - 1, 0))
    ManifestEdits.append(top, Seq(NewEntry("a", IndexedSeq.empty)), key)
    val e = intercept[CorruptManifestException](
      ManifestEdits.append(top, Seq(NewEntry("a", IndexedSeq.empty), NewEntry("b", IndexedSeq.empty)), key))
    assert(e.getMessage.contains("sequence space exhausted"))
  }

  test("should reject metadata that runs past its own entry") {
    val one = ManifestCodec.encode(Manifest(IndexedSeq(ManifestEntry(0, "l", IndexedSeq(meta(0, 1, "abc")))), 1, 0))
    // payload_len is the last 4 bytes before the payload: 4 + 8 + 2 + 1 + 4 + 4 + 8 = 31
    ByteBuffer.wrap(one).order(ByteOrder.LITTLE_ENDIAN).putInt(31, 1000)
    rejects[CorruptManifestException](one, "past the entry's end")
  }

  test("should ignore extension bytes that are not exactly a sink tag (malformed UTF-8 too, as Python)") {
    val tag = EntryTag("wé", 258L, "A")
    assert(EntryTag.decode(tag.encode).contains(tag))
    val bad = tag.encode.clone(); bad(7) = 0xFF.toByte // first writer byte
    for (raw <- Seq(Array.emptyByteArray, tag.encode :+ 0.toByte, tag.encode.dropRight(1), bad, "OSQ2".getBytes ++ tag.encode.drop(4)))
      assert(EntryTag.decode(raw).isEmpty)
  }

  test("should reject a start_index of 2^31 or more, as the Python reader does (docs/format.md 2)") {
    val ok = ManifestCodec.encode(Manifest(IndexedSeq(ManifestEntry(0, "ingest/a.batch",
            IndexedSeq(MetadataItem(Int.MaxValue, 0, Array.emptyByteArray)))), 1, 0))
    assert(ManifestCodec.decode(ok, key).entries.head.metadata.head.startIndex == Int.MaxValue)
    val at = ok.indexOfSlice(Array[Byte](-1, -1, -1, 0x7F))
    val bad = ok.clone(); bad(at + 3) = 0x80.toByte; bad(at) = 0; bad(at + 1) = 0; bad(at + 2) = 0
    val e = intercept[CorruptManifestException](ManifestCodec.decode(bad, key))
    assert(e.getMessage.contains("start_index is out of range"), e.getMessage)
  }
}
