package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.CharacterCodingException
import java.nio.charset.StandardCharsets.UTF_8

/**
 * The osqueue extension of a manifest entry (docs/format.md §2.1): which sink write appended it.
 * A replayed Spark epoch that appends a second copy of its batch tags it with the same
 * (writerId, batchId) and a new attemptId, so osqueue readers deliver only one copy. Readers of
 * RFC 0001 skip extension bytes; bytes that are not a well-formed tag are ignored here too.
 */
final case class EntryTag(writerId: String, batchId: Long, attemptId: String) {
  def encode: Array[Byte] = {
    val w = writerId.getBytes(UTF_8)
    val a = attemptId.getBytes(UTF_8)
    require(w.length <= 0xFFFF && a.length <= 0xFF, "writer id or attempt id too long")
    ByteBuffer.allocate(4 + 1 + 2 + w.length + 8 + 1 + a.length).order(ByteOrder.LITTLE_ENDIAN)
      .put(EntryTag.Magic).put(EntryTag.SinkTag).putShort(w.length.toShort).put(w).putLong(batchId)
      .put(a.length.toByte).put(a).array()
  }
}

object EntryTag {
  private val Magic = "OSQ1".getBytes(UTF_8)
  private val SinkTag: Byte = 1

  /** The sink tag ending an entry's extension records (§2.1), if there is one. */
  def decode(extension: Array[Byte]): Option[EntryTag] =
    if (extension.length == 0) None else BatchIntegrity.sinkTagBytes(extension).flatMap(decodeTag)

  private def decodeTag(extension: Array[Byte]): Option[EntryTag] = {
    if (extension.length < 4 + 1 + 2 + 8 + 1 || !extension.take(4).sameElements(Magic) || extension(4) != SinkTag) None
    else {
      val b = ByteBuffer.wrap(extension).order(ByteOrder.LITTLE_ENDIAN).position(5)
      val wl = java.lang.Short.toUnsignedInt(b.getShort())
      if (b.remaining() < wl + 8 + 1) None
      else {
        val wAt = b.position(); b.position(wAt + wl)
        val batch = b.getLong()
        val al = java.lang.Byte.toUnsignedInt(b.get())
        if (b.remaining() != al) None
        else for (w <- utf8(extension, wAt, wl); a <- utf8(extension, b.position(), al)) yield EntryTag(w, batch, a)
      }
    }
  }

  // Strict: malformed UTF-8 is "not a tag" (as in Python), never a writer id with U+FFFD in it.
  private def utf8(bytes: Array[Byte], at: Int, len: Int): Option[String] =
    try Some(UTF_8.newDecoder().decode(ByteBuffer.wrap(bytes, at, len)).toString)
    catch { case _: CharacterCodingException => None }

  /**
   * Which copy of each writer's batches has been delivered: writerId → (batchId, attemptId).
   * `admit` says whether an entry is delivered, and returns the updated state. Entries of one
   * sink commit are appended in one write (contiguous), so a copy is delivered whole or not at all.
   */
  final case class Delivered(writers: Map[String, (Long, String)]) {
    def admit(tag: Option[EntryTag]): (Boolean, Delivered) = tag match {
      case None => (true, this)
      case Some(t) =>
        writers.get(t.writerId) match {
          case Some((batch, _)) if t.batchId < batch => (false, this)
          case Some((batch, attempt)) if t.batchId == batch && t.attemptId != attempt => (false, this)
          case _ => (true, Delivered(writers.updated(t.writerId, (t.batchId, t.attemptId))))
        }
    }

    /**
     * The reader rule folded over `entries` in order from this state, lazily (one entry read per
     * admission): each entry, whether it is delivered, and the state after it. Every reader (the
     * consumer, the Spark planner, partition and real-time readers) threads the sink-copy state
     * through what it reads with this. Python: `Delivered.admit_all`.
     */
    def admitAll(entries: Iterator[ManifestEntry]): Iterator[Admission] = {
      var state = this
      entries.map { e =>
        val (admitted, after) = state.admit(EntryTag.decode(e.extension))
        state = after
        Admission(e, admitted, after)
      }
    }
  }
  object Delivered { val Empty: Delivered = Delivered(Map.empty) }

  /** One entry of a read in order: whether the reader rule delivers it, and the sink-copy state after it. */
  final case class Admission(entry: ManifestEntry, admitted: Boolean, after: Delivered)
}
