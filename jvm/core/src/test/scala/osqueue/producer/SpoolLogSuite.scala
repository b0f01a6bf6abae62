package osqueue.producer

import java.nio.file.Files
import java.util.Base64

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.scalatest.funsuite.AnyFunSuite

import osqueue.CorruptSpoolException
import osqueue.testing.RepoFiles

/** The spool log's bytes (docs/format.md §9) against the shared vectors Python reads too, and its files. */
class SpoolLogSuite extends AnyFunSuite {
  private val spool = new ObjectMapper().readTree(RepoFiles.golden.resolve("spool.json").toFile)
  private def golden(name: String): Array[Byte] = Files.readAllBytes(RepoFiles.golden.resolve(name))
  private def b64(n: JsonNode): Array[Byte] = Base64.getDecoder.decode(n.asText)
  private def longs(n: JsonNode): Seq[Long] = n.elements.asScala.map(_.asLong).toSeq

  private def described(r: JsonNode): SpoolRecord = r.get("type").asText match {
    case "entries" =>
      EntriesRecord(r.get("call_no").asLong, r.get("ingestion_time_ms").asLong, b64(r.get("metadata")),
        r.get("entries").elements.asScala.map(b64).toSeq)
    case "batch" =>
      BatchRecord(r.get("batch_no").asLong, r.get("first_call").asLong, r.get("last_call").asLong,
        r.get("byte_length").asLong, r.get("batch_crc32").asLong, r.get("location").asText)
    case "attempt" =>
      AttemptRecord(r.get("base").asLong, longs(r.get("batch_nos")),
        r.get("locations").elements.asScala.map(_.asText).toSeq)
    case "landed" => LandedRecord(r.get("first_sequence").asLong, longs(r.get("batch_nos")))
    case _ => DroppedRecord(r.get("first_call").asLong, r.get("last_call").asLong)
  }

  private val expected = spool.get("spool_log_v1.bin").get("records").elements.asScala.map(described).toSeq

  test("should decode the golden log and encode its records to the same bytes") {
    val log = golden("spool_log_v1.bin")
    assert(SpoolLog.decodeRecords(log, "v1") == ((expected, log.length)))
    assert(expected.map(SpoolLog.encodeRecord).reduce(_ ++ _).sameElements(log))
  }

  test("should encode a call's ENTRIES record as the generic record encoding, its length the cap's size") {
    val samples = Seq(
      EntriesRecord(7L, 1700000000000L, "meta".getBytes, Seq("a".getBytes, Array.emptyByteArray, "ccc".getBytes)),
      EntriesRecord(0L, -1L, Array.emptyByteArray, Seq(Array.emptyByteArray)),
      EntriesRecord(-1L, Long.MaxValue, Array.tabulate(256)(_.toByte), (0 until 20).map(i => Array.fill(i * 97)(i.toByte)))
    )
    for (r <- samples) {
      val body = r.body
      val head = SpoolLog.bytes { out =>
        out.write(SpoolLog.Magic); out.writeInt(body.length); out.writeByte(SpoolLog.Entries); out.write(body)
      }
      val crc = new java.util.zip.CRC32(); crc.update(head)
      val generic = head ++ SpoolLog.bytes(_.writeInt(crc.getValue.toInt))
      val fast = SpoolLog.encodeEntries(r.callNo, r.ingestionTimeMs, r.metadata, r.entries)
      assert(fast.sameElements(generic) && SpoolLog.encodeRecord(r).sameElements(generic))
      assert(fast.length - 4L == Spool.sizeOf(r))
    }
  }

  test("should stop at a torn tail and cut it off the file at open") {
    val torn = golden("spool_torn_tail.bin")
    val valid = spool.get("spool_torn_tail.bin").get("valid_length").asInt
    assert(SpoolLog.decodeRecords(torn, "torn") == ((expected, valid)))
    val dir = Files.createTempDirectory("spool-log")
    Files.write(dir.resolve(SpoolLog.logFileName(0)), torn)
    val log = new SpoolLog(dir)
    assert(log.readAll().map(_._2) == expected)
    assert(Files.size(dir.resolve(SpoolLog.logFileName(0))) == valid.toLong)
  }

  test("should read a preallocated file's zero tail as a clean end, after a torn record") {
    val zeros = golden("spool_zero_tail.bin")
    val valid = spool.get("spool_zero_tail.bin").get("valid_length").asInt
    assert(SpoolLog.decodeRecords(zeros, "zeros") == ((expected, valid)))
    val gap = SpoolLog.encodeRecord(expected.head) ++ new Array[Byte](100) ++ SpoolLog.encodeRecord(expected(1))
    val e = intercept[CorruptSpoolException](SpoolLog.decodeRecords(gap, "gap")) // a record after zeros: damage
    assert(e.offset == SpoolLog.encodeRecord(expected.head).length.toLong)
  }

  test("should preallocate zeros, and a reopen after a crash cuts them and appends after the records") {
    val dir = Files.createTempDirectory("spool-log")
    val log = new SpoolLog(dir)
    log.readAll()
    val path = log.write(expected.take(2))
    val whole = expected.take(2).map(SpoolLog.encodeRecord).reduce(_ ++ _)
    assert(Files.readAllBytes(path).sameElements(whole ++ new Array[Byte](SpoolLog.PreallocMinBytes.toInt)))
    val again = new SpoolLog(dir) // the first one never closed: a crash
    assert(again.readAll().map(_._2) == expected.take(2))
    assert(Files.readAllBytes(path).sameElements(whole))
    again.write(expected.slice(2, 3))
    again.close() // cuts its own zeros
    assert(Files.readAllBytes(path).sameElements(whole ++ SpoolLog.encodeRecord(expected(2))))
  }

  test("should refuse damage in the middle as CorruptSpool naming the file and offset") {
    val bad = golden("spool_bad_record_middle.bin")
    val e = intercept[CorruptSpoolException](SpoolLog.decodeRecords(bad, "the-file"))
    assert(e.path == "the-file" && e.offset == spool.get("spool_bad_record_middle.bin").get("offset").asLong)
  }

  test("should append, force, rotate and read its files back in order") {
    val dir = Files.createTempDirectory("spool-log")
    val log = new SpoolLog(dir, rotateBytes = 100)
    log.readAll()
    val records = (0 until 5).map(i => EntriesRecord(i.toLong, 1L, Array.emptyByteArray, Seq(Array.fill(40)(i.toByte))))
    records.foreach(r => log.write(Seq(r)))
    assert(log.logFiles.size == 5) // each record is 90 bytes: one per file
    log.delete(log.logFiles.take(2))
    log.close()
    val again = new SpoolLog(dir)
    assert(again.readAll().map(_._2) == records.drop(2))
    assert(again.logFiles.map(_.getFileName.toString) == Seq(2, 3, 4).map(n => SpoolLog.logFileName(n.toLong)))
  }
}
