package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}

import osqueue.CorruptManifestException

/** One writer's record in the writers section: the highest batch number of it that landed (hex id, lowercase). */
final case class WriterRecord(writerId: String, lastBatch: Long, lastAppendMs: Long)

/**
 * Writer sequences: the type-4 entry record `(writer_id, batch_no)` and the v3 head's writers
 * section (docs/format.md §2.1 and §2.3, docs/adr/0006 part 2, docs/adr/0007 part 1).
 *
 * A batch `n` of writer `w` is in the queue (queued, sealed or dequeued) iff `n <= last_batch[w]`:
 * every CAS that appends `(w, n)` requires `n == last_batch[w] + 1` (or a contiguous run from it)
 * on the head it is conditioned on and sets `last_batch[w]` in the same write, so no batch is ever
 * appended twice. Writer ids are 16 bytes, handled here as 32 lowercase hex digits (their order is
 * the bytes' order). Python: `osqueue.format.writer_sequence`.
 */
object WriterSequence {
  val WriterSequenceType = 4
  val WriterSequenceBodyLen = 24
  val WriterIdLen = 16
  /** `writerTtl`: a head writer drops writer records whose last append is older than this (ADR 0006). */
  val DefaultWriterTtlMs: Long = 7L * 24 * 3600 * 1000
  private val WriterSize = 32

  def hex(id: Array[Byte]): String = id.map(b => f"${b & 0xFF}%02x").mkString
  def unhex(id: String): Array[Byte] = id.grouped(2).map(Integer.parseInt(_, 16).toByte).toArray

  /** The type-4 extension record of batch `batchNo` of `writerId` (after the integrity record). */
  def sequenceRecord(writerId: Array[Byte], batchNo: Long): Array[Byte] = {
    require(writerId.length == WriterIdLen, s"writer id of ${writerId.length} bytes (16 expected)")
    ByteBuffer.allocate(BatchIntegrity.RecordHeaderSize + WriterSequenceBodyLen).order(ByteOrder.LITTLE_ENDIAN)
      .put(BatchIntegrity.Magic).put(WriterSequenceType.toByte).putShort(WriterSequenceBodyLen.toShort)
      .put(writerId).putLong(batchNo).array()
  }

  /** The `(writer id hex, batch_no)` of an entry's extension, if it has a type-4 record of the right length. */
  def sequenceOf(extension: Array[Byte]): Option[(String, Long)] =
    BatchIntegrity.walk(extension)._1.find(r => r.tagType == WriterSequenceType && r.bodyLen == WriterSequenceBodyLen)
      .map { r =>
        val b = ByteBuffer.wrap(extension).order(ByteOrder.LITTLE_ENDIAN)
        (hex(java.util.Arrays.copyOfRange(extension, r.bodyAt, r.bodyAt + 16)), b.getLong(r.bodyAt + 16))
      }

  /** The writers section's body: `count u32` then the records sorted by writer id. */
  def encodeWriters(records: Iterable[WriterRecord]): Array[Byte] = {
    val rows = records.toIndexedSeq.sortBy(_.writerId)
    val b = ByteBuffer.allocate(4 + rows.size * WriterSize).order(ByteOrder.LITTLE_ENDIAN)
    b.putInt(rows.size)
    rows.foreach(r => b.put(unhex(r.writerId)).putLong(r.lastBatch).putLong(r.lastAppendMs))
    b.array()
  }

  /** The records of a writers section's body, checked (count, length, ids strictly increasing); `key` names the manifest. */
  def decodeWriters(body: Array[Byte], key: String): Map[String, WriterRecord] = {
    if (body.length < 4) throw new CorruptManifestException(key, "writers section: shorter than its count")
    val b = ByteBuffer.wrap(body).order(ByteOrder.LITTLE_ENDIAN)
    val count = Integer.toUnsignedLong(b.getInt(0))
    if (body.length.toLong != 4 + count * WriterSize)
      throw new CorruptManifestException(key, s"writers section: $count records cannot fill ${body.length} bytes")
    var previous = ""
    (0 until count.toInt).map { i =>
      val at = 4 + i * WriterSize
      val id = hex(java.util.Arrays.copyOfRange(body, at, at + 16))
      if (i > 0 && id <= previous)
        throw new CorruptManifestException(key, s"writers section: record $i: writer ids must increase")
      previous = id
      id -> WriterRecord(id, b.getLong(at + 16), b.getLong(at + 24))
    }.toMap
  }

  /** The writers section of a head's sections (empty without one). */
  def writersOf(sections: HeadSections, key: String): Map[String, WriterRecord] =
    sections.opaque.find(_.sectionType == HeadSections.WritersSection).fold(Map.empty[String, WriterRecord])(o =>
      decodeWriters(o.body, key))

  /**
   * `sections` with the writers section replaced by `writers`, minus records whose last append is
   * `ttlMs` older than `nowMs` (no section when none is left).
   */
  def withWriters(sections: HeadSections, writers: Map[String, WriterRecord], nowMs: Long,
      ttlMs: Long = DefaultWriterTtlMs): HeadSections = {
    val kept = writers.values.filter(r => nowMs - r.lastAppendMs < ttlMs)
    val others = sections.opaque.filterNot(_.sectionType == HeadSections.WritersSection)
    val opaque =
      if (kept.isEmpty) others
      else (others :+ OpaqueSection(HeadSections.WritersSection, encodeWriters(kept))).sortBy(_.sectionType)
    sections.copy(opaque = opaque)
  }
}
