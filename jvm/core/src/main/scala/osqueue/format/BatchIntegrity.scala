package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.StandardCharsets.UTF_8
import java.util.zip.CRC32

import osqueue.{CorruptBatchException, CorruptManifestException}

/** The type-3 entry-integrity record of an entry (docs/format.md §2.1): the batch's length and CRC-32, and the entry's own CRC-32. */
final case class EntryIntegrity(byteLength: Long, batchCrc32: Long, entryCrc32: Long)

/**
 * The extension records of a manifest entry and the integrity checks on them (docs/format.md
 * §2.1, docs/adr/0006 part 1). Python: `osqueue.format.batch_integrity`.
 */
object BatchIntegrity {
  val Magic: Array[Byte] = "OSQ1".getBytes(UTF_8)
  val SinkTagType = 1
  val IntegrityType = 3
  val IntegrityBodyLen = 12
  /** magic, tag_type, body_len. */
  val RecordHeaderSize = 4 + 1 + 2

  /** One length-prefixed record found by [[walk]]: its type, and where its body sits in the extension. */
  final case class Record(tagType: Int, bodyAt: Int, bodyLen: Int)

  /**
   * The records of an extension (type >= 3), in order, and where the sink tag starts (if the walk
   * ends at one). Never fails: bytes that are not a record end the walk.
   */
  def walk(ext: Array[Byte]): (IndexedSeq[Record], Option[Int]) = {
    val out = IndexedSeq.newBuilder[Record]
    var pos = 0
    var tagAt: Option[Int] = None
    var done = false
    while (!done && ext.length - pos >= 5 && magicAt(ext, pos)) {
      val t = java.lang.Byte.toUnsignedInt(ext(pos + 4))
      if (t == SinkTagType) { tagAt = Some(pos); done = true }
      else if (t >= 3 && ext.length - pos >= RecordHeaderSize) {
        val len = (ext(pos + 5) & 0xFF) | ((ext(pos + 6) & 0xFF) << 8)
        if (len > ext.length - pos - RecordHeaderSize) done = true
        else { out += Record(t, pos + RecordHeaderSize, len); pos += RecordHeaderSize + len }
      } else done = true
    }
    (out.result(), tagAt)
  }

  /** The sink tag's bytes (from its magic to the end), if the records walk ends at one. */
  def sinkTagBytes(ext: Array[Byte]): Option[Array[Byte]] =
    walk(ext)._2.map(at => java.util.Arrays.copyOfRange(ext, at, ext.length))

  /** The entry-integrity record of an extension, if it has one of the right length. */
  def of(ext: Array[Byte]): Option[EntryIntegrity] =
    integrityRecord(ext).map { r =>
      val b = ByteBuffer.wrap(ext).order(ByteOrder.LITTLE_ENDIAN)
      EntryIntegrity(u32(b, r.bodyAt), u32(b, r.bodyAt + 4), u32(b, r.bodyAt + 8))
    }

  /** The record for a batch of these bytes, its `entry_crc32` left 0 (the entry encoder computes it). */
  def record(batch: Array[Byte]): Array[Byte] = record(batch.length.toLong, crc32(batch))

  def record(byteLength: Long, batchCrc32: Long): Array[Byte] =
    ByteBuffer.allocate(RecordHeaderSize + IntegrityBodyLen).order(ByteOrder.LITTLE_ENDIAN)
      .put(Magic).put(IntegrityType.toByte).putShort(IntegrityBodyLen.toShort)
      .putInt(byteLength.toInt).putInt(batchCrc32.toInt).putInt(0).array()

  /** CRC-32 (ISO-HDLC) of `bytes`, as an unsigned value. */
  def crc32(bytes: Array[Byte]): Long = crc32(bytes, 0, bytes.length)

  def crc32(bytes: Array[Byte], from: Int, len: Int): Long = {
    val c = new CRC32(); c.update(bytes, from, len); c.getValue
  }

  /** CRC-32 of `bytes` from its position to its limit (the buffer's position does not move). */
  def crc32(bytes: ByteBuffer): Long = { val c = new CRC32(); c.update(bytes.duplicate()); c.getValue }

  /**
   * Fills in `entry_crc32` of an encoded entry (from `entry_len` on) whose extension starts at
   * `extAt`, when it has an integrity record; the entry bytes are changed in place.
   */
  def seal(entry: Array[Byte], extAt: Int): Unit = {
    val ext = java.util.Arrays.copyOfRange(entry, extAt, entry.length)
    integrityRecord(ext).foreach { r =>
      val at = extAt + r.bodyAt + 8
      ByteBuffer.wrap(entry).order(ByteOrder.LITTLE_ENDIAN).putInt(at, entryCrc(entry, at).toInt)
    }
  }

  /** CRC-32 of an encoded entry from `sequence` to its end, leaving out the 4 bytes at `crcAt`. */
  private def entryCrc(entry: Array[Byte], crcAt: Int): Long = {
    val c = new CRC32()
    c.update(entry, 4, crcAt - 4)
    c.update(entry, crcAt + 4, entry.length - crcAt - 4)
    c.getValue
  }

  /**
   * Checks an entry's own CRC when it has an integrity record; `key` names the manifest it was
   * read from. Returns the record (None: an entry written without one, delivered unverified).
   */
  def verifyEntry(e: ManifestEntry, key: String): Option[EntryIntegrity] = {
    val rec = integrityRecord(e.extension)
    rec.map { r =>
      val out = new java.io.ByteArrayOutputStream()
      ManifestCodec.encodeEntry(out, e.sequence, e.location, e.metadata, e.extension, sealIntegrity = false)
      val bytes = out.toByteArray
      val at = bytes.length - e.extension.length + r.bodyAt + 8
      val b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
      val expected = u32(b, at)
      val actual = entryCrc(bytes, at)
      if (expected != actual)
        throw new CorruptManifestException(key,
          f"entry at sequence ${e.sequence}%d: entry_crc32 0x$expected%08x does not match its bytes (CRC-32 0x$actual%08x)")
      EntryIntegrity(u32(b, at - 8), u32(b, at - 4), expected)
    }
  }

  /** Whether `bytes` are the batch the record describes. */
  def matches(rec: EntryIntegrity, bytes: Array[Byte]): Boolean =
    bytes.length.toLong == rec.byteLength && crc32(bytes) == rec.batchCrc32

  /** `CorruptBatch` naming the object and the expected and actual length and CRC. */
  def mismatch(rec: EntryIntegrity, bytes: Array[Byte], key: String): CorruptBatchException =
    mismatch(rec, ByteBuffer.wrap(bytes), key)

  private def mismatch(rec: EntryIntegrity, bytes: ByteBuffer, key: String): CorruptBatchException =
    new CorruptBatchException(key,
      f"integrity check failed: expected ${rec.byteLength}%d bytes with CRC-32 0x${rec.batchCrc32}%08x, " +
        f"read ${bytes.remaining}%d bytes with CRC-32 0x${crc32(bytes)}%08x", integrityMismatch = true)

  /** [[verify]] over the bytes from a buffer's position to its limit (a mapped file, `ObjectStore.getBuffer`). */
  def verify(rec: EntryIntegrity, bytes: ByteBuffer, key: String)(reread: => ByteBuffer): ByteBuffer = {
    def matching(b: ByteBuffer) = b.remaining.toLong == rec.byteLength && crc32(b) == rec.batchCrc32
    if (matching(bytes)) bytes
    else {
      val again = reread
      if (matching(again)) again else throw mismatch(rec, again, key)
    }
  }

  /**
   * Checks a batch read for an entry with a record, reading it once more (`reread`) on a
   * mismatch; returns the bytes that check, or throws `CorruptBatch`.
   */
  def verify(rec: EntryIntegrity, bytes: Array[Byte], key: String)(reread: => Array[Byte]): Array[Byte] =
    if (matches(rec, bytes)) bytes
    else {
      val again = reread
      if (matches(rec, again)) again else throw mismatch(rec, again, key)
    }

  private def integrityRecord(ext: Array[Byte]): Option[Record] =
    walk(ext)._1.find(r => r.tagType == IntegrityType && r.bodyLen == IntegrityBodyLen)

  private def magicAt(b: Array[Byte], at: Int): Boolean =
    b(at) == Magic(0) && b(at + 1) == Magic(1) && b(at + 2) == Magic(2) && b(at + 3) == Magic(3)

  private def u32(b: ByteBuffer, at: Int): Long = Integer.toUnsignedLong(b.getInt(at))
}
