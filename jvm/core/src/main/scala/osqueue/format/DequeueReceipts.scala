package osqueue.format

import java.io.ByteArrayOutputStream
import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.CharacterCodingException
import java.nio.charset.StandardCharsets.UTF_8

/**
 * Dequeue receipts (docs/format.md §5.1): `locations(i)` held sequence `first + i` in the manifest
 * of `incarnation` and was dequeued. Every pair was read from a real manifest version and a sequence
 * is assigned once per incarnation (a reset starts again at 0, §5.2), so a receipt of the incarnation
 * a write was sent to is true whoever wrote it; receipts may only be missing. `incarnation` is None
 * for receipts v1, which do not say: a producer then trusts only a receipt naming its own location.
 */
final case class DequeueReceipts(first: Long = 0L, locations: Vector[String] = Vector.empty,
    incarnation: Option[Long] = None) {
  def locationAt(sequence: Long): Option[String] = {
    val i = sequence - first
    if (i >= 0 && i < locations.size) Some(locations(i.toInt)) else None
  }

  /** Plus `removed` (consecutive (sequence, location)) of `incarnation`, keeping the last `maxCount`; a gap or another incarnation starts afresh. */
  def extended(removed: Seq[(Long, String)], incarnation: Option[Long] = None,
      maxCount: Int = DequeueReceipts.MaxReceipts): DequeueReceipts =
    if (removed.isEmpty) this
    else {
      val lo = removed.head._1
      val added = removed.map(_._2).toVector
      val merged =
        if (locations.nonEmpty && this.incarnation == incarnation && first <= lo && lo <= first + locations.size)
          DequeueReceipts(first, locations.take((lo - first).toInt) ++ added, incarnation)
        else DequeueReceipts(lo, added, incarnation)
      val drop = math.max(0, merged.locations.size - maxCount)
      DequeueReceipts(merged.first + drop, merged.locations.drop(drop), incarnation)
    }

  /** "OSQR", version u8, [v2: incarnation u64], first u64, count u32, then per location u16 length + UTF-8 (LE); v2 when the incarnation is known. */
  def encode: Array[Byte] = {
    val out = new ByteArrayOutputStream()
    out.write(DequeueReceipts.Magic)
    val header = incarnation match {
      case Some(i) => ByteBuffer.allocate(21).order(ByteOrder.LITTLE_ENDIAN).put(2.toByte).putLong(i)
      case None => ByteBuffer.allocate(13).order(ByteOrder.LITTLE_ENDIAN).put(1.toByte)
    }
    out.write(header.putLong(first).putInt(locations.size).array())
    locations.foreach { l =>
      val b = l.getBytes(UTF_8)
      out.write(ByteBuffer.allocate(2).order(ByteOrder.LITTLE_ENDIAN).putShort(b.length.toShort).array())
      out.write(b)
    }
    out.toByteArray
  }
}

object DequeueReceipts {
  val Suffix = ".dequeued"
  val MaxReceipts = 4096
  private val Magic = "OSQR".getBytes(UTF_8)
  private val HeaderLen = 17

  /** None for bytes that are not receipts v1 or v2: they are advisory, a reader then knows less. */
  def decode(data: Array[Byte]): Option[DequeueReceipts] = {
    if (data.length < HeaderLen || !data.take(4).sameElements(Magic)) return None
    val b = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN).position(4)
    val version = b.get()
    if (version != 1 && !(version == 2 && data.length >= HeaderLen + 8)) return None
    val incarnation = if (version == 2) Some(b.getLong()) else None
    val first = b.getLong()
    val count = Integer.toUnsignedLong(b.getInt())
    if (first < 0 || count > (data.length - b.position()) / 2) return None
    val out = Vector.newBuilder[String]
    var i = 0L
    while (i < count) {
      if (b.remaining() < 2) return None
      val n = java.lang.Short.toUnsignedInt(b.getShort())
      if (b.remaining() < n) return None
      try out += UTF_8.newDecoder().decode(ByteBuffer.wrap(data, b.position(), n)).toString
      catch { case _: CharacterCodingException => return None }
      b.position(b.position() + n)
      i += 1
    }
    if (b.hasRemaining || (count > 0 && first > Long.MaxValue - (count - 1))) None
    else Some(DequeueReceipts(first, out.result(), incarnation))
  }
}
