package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}
import java.nio.file.Files
import java.util.Base64

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.scalatest.funsuite.AnyFunSuite

import osqueue.{CorruptManifestException, UnsupportedFormatVersionException}
import osqueue.testing.RepoFiles

/** The version 3 head (docs/format.md §2.3): the shared vectors of tests/golden/heads_v3.json, and the codec's edits. */
class HeadSectionsSuite extends AnyFunSuite {
  private val json = new ObjectMapper().readTree(RepoFiles.golden.resolve("heads_v3.json").toFile)
  private def bytesOf(v: JsonNode) = Files.readAllBytes(RepoFiles.golden.resolve(v.get("file").asText))
  private def hex(s: String) = s.grouped(2).map(Integer.parseInt(_, 16).toByte).toArray
  private def noIndex(r: SegmentRef): IndexedSeq[SegmentRef] = fail(s"no index expected: ${r.key}")

  private def sectionsOf(j: JsonNode): HeadSections = HeadSections(
    j.get("subscriptions").elements().asScala.toIndexedSeq.map(s =>
      Subscription(s.get("name").asText, s.get("epoch").asLong, s.get("next").asLong, s.get("created_ms").asLong,
        s.get("last_ack_ms").asLong)),
    Option(j.get("unnamed_reader")).filterNot(_.isNull).map(u => UnnamedReader(u.get("next").asLong, u.get("last_ack_ms").asLong)),
    Option(j.get("retention")).filterNot(_.isNull).map(r =>
      Retention(r.get("max_age_ms").asLong, r.get("max_bytes").asLong, r.get("max_entries").asLong, r.get("policy").asInt,
        r.get("queued_bytes").asLong)),
    j.get("opaque").elements().asScala.toIndexedSeq.map(o => OpaqueSection(o.get("section_type").asInt, hex(o.get("body_hex").asText)))
  )

  test("should have the accepted and rejected vectors the ADR lists") {
    assert(json.get("heads").size >= 4 && json.get("rejected").size >= 9)
  }

  for (v <- json.get("heads").elements().asScala) {
    val name = v.get("name").asText
    test(s"v3 vector $name: decodes to its sections, refs and tail, and re-encodes byte for byte") {
      val bytes = bytesOf(v)
      val h = ManifestHead.parse(bytes, name)
      val exp = v.get("head")
      assert(h.version == 3)
      assert(h.nextSequence == exp.get("next_sequence").asLong && h.epoch == exp.get("epoch").asLong)
      assert(h.lowWater == exp.get("low_water").asLong && h.firstSequence == exp.get("low_water").asLong)
      assert(h.sections == sectionsOf(exp.get("sections")))
      val refs = exp.get("refs").elements().asScala.toIndexedSeq
      assert(h.refs.map(r => (r.firstSequence, r.entryCount, r.level, r.key)) ==
        refs.map(r => (r.get("first_sequence").asLong, r.get("entry_count").asLong, r.get("level").asInt, r.get("key").asText)))
      assert(h.tailEntries.map(e => (e.sequence, e.location)) ==
        exp.get("tail").elements().asScala.toIndexedSeq.map(e => (e.get("sequence").asLong, e.get("location").asText)))
      assert(h.tailEntries.flatMap(_.metadata.map(m => Base64.getEncoder.encodeToString(m.payload))) ==
        exp.get("tail").elements().asScala.toIndexedSeq.flatMap(_.get("metadata").elements().asScala.map(_.get("payload_b64").asText)))
      // Encoding: the head rebuilt from its parts (sections and refs re-encoded, trailer and CRC recomputed).
      assert(h.withReaders(h.epoch, h.sections, noIndex, cut = false).sameElements(bytes))
      assert(HeadSections.encode(sectionsOf(exp.get("sections"))).length ==
        ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).getInt(bytes.length - 22 - 28))
      // An RFC v1 decoder (and an osqueue before v3 reading the footer) refuses it by version.
      assert(v.get("v1_error").asText == "UnsupportedFormatVersion")
      intercept[UnsupportedFormatVersionException](ManifestCodec.decode(bytes, name))
    }
  }

  for (v <- json.get("rejected").elements().asScala) {
    val name = v.get("name").asText
    test(s"v3 vector $name is refused with ${v.get("error").asText}") {
      val e = intercept[Exception](ManifestHead.parse(bytesOf(v), name))
      v.get("error").asText match {
        case "CorruptManifest" => assert(e.isInstanceOf[CorruptManifestException], e)
        case "UnsupportedFormatVersion" =>
          assert(e.isInstanceOf[UnsupportedFormatVersionException], e)
          assert(e.getMessage.contains("unknown head section 0x"), e.getMessage)
      }
      assert(e.getMessage.contains(name), "the error names the manifest")
    }
  }

  test("should refuse every single flipped byte of a v3 head (the CRC covers the footer too)") {
    val v = json.get("heads").elements().asScala.find(_.get("name").asText == "head_v3_subscriptions").get
    val bytes = bytesOf(v)
    bytes.indices.foreach { i =>
      val b = bytes.clone(); b(i) = (b(i) ^ 0x01).toByte
      val e = intercept[Exception](ManifestHead.parse(b, "flipped"))
      // Only the version field itself can turn it into another version's parse; everything else is the CRC.
      assert(e.isInstanceOf[CorruptManifestException] || (i >= bytes.length - 2 && e.isInstanceOf[UnsupportedFormatVersionException]),
        s"byte $i: $e")
    }
  }

  test("should carry an ignorable section byte for byte through appends and reader edits") {
    val v = json.get("heads").elements().asScala.find(_.get("name").asText == "head_v3_ignorable_section").get
    val h = ManifestHead.parse(bytesOf(v), "m")
    val (appended, first) = h.appended(Seq(NewEntry("ingest/x.batch", IndexedSeq.empty)), 2048, _ => fail("no seal"), _ => fail())
    val a = ManifestHead.parse(appended, "m")
    assert(first == h.nextSequence && a.nextSequence == h.nextSequence + 1 && a.sections == h.sections)
    val moved = a.sections.withSubscription(a.subscription("billing").get.copy(next = a.nextSequence))
    val edited = ManifestHead.parse(a.withReaders(a.epoch, moved, noIndex), "m")
    assert(edited.sections.opaque == h.sections.opaque)
    assert(edited.firstSequence == 16, "L = the slowest subscription's next ('analytics' at 16)")
  }

  test("should write v1 again, byte for byte, once the last section is gone") {
    val v1 = ManifestCodec.encode(Manifest(IndexedSeq(ManifestEntry(3, "ingest/a.batch", IndexedSeq.empty)), 4, 7L))
    val h = ManifestHead.parse(v1, "m")
    val s = HeadSections(IndexedSeq(Subscription("a", 1L << 32, 3, 1, 1)))
    val v3 = ManifestHead.parse(h.withReaders(h.epoch, s, noIndex, cut = false), "m")
    assert(v3.version == 3 && v3.subscription("a").isDefined && v3.tailEntries == h.tailEntries)
    assert(v3.withReaders(v3.epoch, HeadSections.Empty, noIndex).sameElements(v1))
  }

  test("should refuse names outside [A-Za-z0-9._-] or longer than 128 when encoding") {
    Seq("", "a/b", "a b", "é", "x" * 129).foreach { n =>
      intercept[IllegalArgumentException](HeadSections.encode(HeadSections(IndexedSeq(Subscription(n, 0, 0, 0, 0)))))
    }
    assert(HeadSections.validName("orders-v2.eu_west") && HeadSections.validName("x" * 128))
  }
}
