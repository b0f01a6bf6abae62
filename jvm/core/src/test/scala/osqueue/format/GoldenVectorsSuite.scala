package osqueue.format

import java.nio.file.Files
import java.util.Base64

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.scalatest.funsuite.AnyFunSuite

import osqueue.{CorruptBatchException, CorruptManifestException, UnsupportedFormatVersionException}
import osqueue.testing.RepoFiles

/** The shared vectors under tests/golden (also read by the Python tests): decode, compare, re-encode. */
class GoldenVectorsSuite extends AnyFunSuite {
  private val vectors: Seq[JsonNode] = {
    val json = new ObjectMapper().readTree(RepoFiles.golden.resolve("vectors.json").toFile)
    json.get("vectors").elements().asScala.toSeq
  }
  private def b64(s: String) = Base64.getDecoder.decode(s)

  test("should have vectors of every kind, including rejections") {
    assert(vectors.exists(v => v.get("kind").asText == "manifest" && !v.has("error")))
    assert(vectors.exists(_.path("manifest").path("entries").elements().asScala.exists(_.has("tag"))))
    assert(vectors.exists(v => v.get("kind").asText == "batch" && !v.has("error")))
    assert(vectors.count(_.has("error")) >= 10)
  }

  for (v <- vectors) {
    val name = v.get("name").asText
    test(s"golden vector $name") {
      val bytes = Files.readAllBytes(RepoFiles.golden.resolve(v.get("file").asText))
      val kind = v.get("kind").asText
      if (v.has("error")) {
        val e = intercept[Exception](
          if (kind == "manifest") ManifestCodec.decode(bytes, name) else BatchCodec.decode(bytes, name))
        val expected: Class[_] = v.get("error").asText match {
          case "CorruptManifest" => classOf[CorruptManifestException]
          case "CorruptBatch" => classOf[CorruptBatchException]
          case "UnsupportedFormatVersion" => classOf[UnsupportedFormatVersionException]
        }
        assert(expected.isInstance(e), s"$name: expected ${expected.getSimpleName}, got $e")
      } else if (kind == "manifest") {
        val m = ManifestCodec.decode(bytes, name)
        val exp = v.get("manifest")
        assert(m.nextSequence == exp.get("next_sequence").asLong && m.epoch == exp.get("epoch").asLong)
        val entries = exp.get("entries").elements().asScala.toIndexedSeq.map { e =>
          ManifestEntry(e.get("sequence").asLong, e.get("location").asText,
            e.get("metadata").elements().asScala.toIndexedSeq.map { mi =>
              MetadataItem(mi.get("start_index").asInt, mi.get("ingestion_time_ms").asLong, b64(mi.get("payload_b64").asText))
            },
            Option(e.get("extension_b64")).map(x => b64(x.asText)).getOrElse(Array.emptyByteArray))
        }
        assert(m.entries == entries)
        // Sink tags (docs/format.md §2.1): listed entries decode to the tag and re-encode to the same bytes.
        exp.get("entries").elements().asScala.zip(m.entries).foreach { case (e, entry) =>
          val tag = Option(e.get("tag")).map(t => EntryTag(t.get("writer_id").asText, t.get("batch_id").asLong, t.get("attempt_id").asText))
          assert(EntryTag.decode(entry.extension) == tag, s"$name: entry ${entry.sequence}")
          tag.foreach(t => assert(entry.extension.endsWith(t.encode))) // the last extension record
          // Entry-integrity records (§2.1): the record, the entry's own CRC, and the batch it describes.
          val integrity = Option(e.get("integrity")).filterNot(_.isNull)
          assert(BatchIntegrity.verifyEntry(entry, name) == integrity.map(i =>
            EntryIntegrity(i.get("byte_length").asLong, i.get("batch_crc32").asLong, i.get("entry_crc32").asLong)))
          integrity.foreach { i =>
            val batch = Files.readAllBytes(RepoFiles.golden.resolve(i.get("batch_file").asText))
            assert(BatchIntegrity.matches(BatchIntegrity.of(entry.extension).get, batch))
            // Re-encoding the entry with its entry_crc32 zeroed computes the golden one (the JVM's encoder).
            val zeroed = entry.extension.clone(); java.util.Arrays.fill(zeroed, 15, 19, 0.toByte)
            val out = new java.io.ByteArrayOutputStream()
            ManifestCodec.encodeEntry(out, entry.sequence, entry.location, entry.metadata, zeroed)
            assert(out.toByteArray.endsWith(entry.extension), s"$name: entry ${entry.sequence}")
          }
        }
        if (v.path("reencode_identical").asBoolean(false)) assert(ManifestCodec.encode(m).sameElements(bytes))
      } else {
        val records = BatchCodec.decode(bytes, name)
        val exp = v.get("batch")
        val expected = exp.get("records_b64").elements().asScala.toIndexedSeq.map(r => b64(r.asText))
        assert(records.map(_.toSeq) == expected.map(_.toSeq))
        val c = Compression.parse("compression", exp.get("compression").asText)
        assert(bytes(bytes.length - 7) == c.id)
        val reencoded = BatchCodec.encode(records, c)
        if (v.path("reencode_identical").asBoolean(false)) assert(reencoded.sameElements(bytes))
        else assert(BatchCodec.decode(reencoded, name).map(_.toSeq) == expected.map(_.toSeq))
      }
    }
  }
}
