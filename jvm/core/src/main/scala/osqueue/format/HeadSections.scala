package osqueue.format

import java.io.ByteArrayOutputStream
import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.StandardCharsets
import java.util.Arrays
import java.util.zip.CRC32

import osqueue.{CorruptManifestException, UnsupportedFormatVersionException}

/**
 * A named subscription's record in a version 3 head (docs/format.md §2.3, ADR 0005): its epoch
 * (high 32 bits the incarnation, low 32 bits the takeovers), the first sequence it has not
 * acknowledged, and its creation and last-ack times.
 */
final case class Subscription(name: String, epoch: Long, next: Long, createdMs: Long, lastAckMs: Long) {
  def incarnation: Long = epoch >>> 32
}

/** The RFC's unnamed consumer on a version 3 head (section type 2). */
final case class UnnamedReader(next: Long, lastAckMs: Long)

/** A queue's retention policy and its running byte count (section type 3). */
final case class Retention(maxAgeMs: Long, maxBytes: Long, maxEntries: Long, policy: Int, queuedBytes: Long)

object Retention {
  val Backpressure = 0
  val DropOldest = 1
}

/** A section this osqueue carries byte for byte: the writers section (type 4) and any unknown ignorable type. */
final case class OpaqueSection(sectionType: Int, body: Array[Byte]) {
  override def equals(o: Any): Boolean = o match {
    case s: OpaqueSection => sectionType == s.sectionType && Arrays.equals(body, s.body)
    case _ => false
  }
  override def hashCode(): Int = (sectionType, Arrays.hashCode(body)).hashCode()
}

/** The typed sections of a version 3 head; empty for a v1 manifest or a v2 head. */
final case class HeadSections(
    subscriptions: IndexedSeq[Subscription] = IndexedSeq.empty,
    unnamedReader: Option[UnnamedReader] = None,
    retention: Option[Retention] = None,
    opaque: IndexedSeq[OpaqueSection] = IndexedSeq.empty) {

  def isEmpty: Boolean = subscriptions.isEmpty && unnamedReader.isEmpty && retention.isEmpty && opaque.isEmpty
  def subscription(name: String): Option[Subscription] = subscriptions.find(_.name == name)

  /** These sections with `s` added or replacing the record of its name (kept sorted by name, bytewise). */
  def withSubscription(s: Subscription): HeadSections =
    copy(subscriptions = (subscriptions.filterNot(_.name == s.name) :+ s).sortWith(HeadSections.nameBefore))

  def withoutSubscription(name: String): HeadSections = copy(subscriptions = subscriptions.filterNot(_.name == name))

  /** The smallest `next` of every reader record (subscriptions and the unnamed reader); None without one. */
  def slowestNext: Option[Long] = (subscriptions.map(_.next) ++ unnamedReader.map(_.next)).reduceOption(_ min _)
}

object HeadSections {
  val Version = 3
  /** sections_len u32 | section_count u32 | segments_len u32 | segment_count u32 | low_water u64 | head_crc32 u32. */
  val TrailerSize = 28
  val SubscriptionsSection = 1
  val UnnamedReaderSection = 2
  val RetentionSection = 3
  val WritersSection = 4
  val IgnorableBit = 0x8000
  val MaxNameLength = 128
  /** name_len u8 | name | epoch u64 | next u64 | created_ms i64 | last_ack_ms i64: 33 fixed bytes. */
  val SubscriptionFixedSize = 33
  private val UnnamedReaderSize = 16
  private val RetentionSize = 33
  private val SectionHeaderSize = 6

  val Empty: HeadSections = HeadSections()

  /** A subscription name: 1 to 128 bytes of `[A-Za-z0-9._-]`. */
  def validName(name: String): Boolean =
    name.nonEmpty && name.length <= MaxNameLength && name.forall(c =>
      (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')

  private[format] def nameBefore(a: Subscription, b: Subscription): Boolean = a.name.compareTo(b.name) < 0

  def sectionCount(s: HeadSections): Int =
    (if (s.subscriptions.nonEmpty) 1 else 0) + s.unnamedReader.size + s.retention.size + s.opaque.size

  /** The sections region: sections sorted by type, each type once (an empty subscription list is no section). */
  def encode(s: HeadSections): Array[Byte] = {
    val sections = IndexedSeq.newBuilder[(Int, Array[Byte])]
    if (s.subscriptions.nonEmpty) {
      val names = s.subscriptions.map(_.name)
      require(names.forall(validName), s"subscription names must be 1-128 of [A-Za-z0-9._-]: $names")
      require(names.zip(names.drop(1)).forall { case (a, b) => a.compareTo(b) < 0 }, s"names not strictly increasing: $names")
      val body = le(4 + s.subscriptions.map(SubscriptionFixedSize + _.name.length).sum)
      body.putInt(s.subscriptions.size)
      s.subscriptions.foreach { r =>
        body.put(r.name.length.toByte).put(r.name.getBytes(StandardCharsets.US_ASCII))
          .putLong(r.epoch).putLong(r.next).putLong(r.createdMs).putLong(r.lastAckMs)
      }
      sections += SubscriptionsSection -> body.array()
    }
    s.unnamedReader.foreach(u => sections += UnnamedReaderSection -> le(UnnamedReaderSize).putLong(u.next).putLong(u.lastAckMs).array())
    s.retention.foreach { r =>
      require(r.policy == Retention.Backpressure || r.policy == Retention.DropOldest, s"retention policy ${r.policy}")
      sections += RetentionSection -> le(RetentionSize).putLong(r.maxAgeMs).putLong(r.maxBytes).putLong(r.maxEntries)
        .put(r.policy.toByte).putLong(r.queuedBytes).array()
    }
    s.opaque.foreach(o => sections += o.sectionType -> o.body)
    val all = sections.result().sortBy(_._1)
    require(all.map(_._1).distinct.size == all.size, s"a section type appears twice: ${all.map(_._1)}")
    val out = new ByteArrayOutputStream(all.map(SectionHeaderSize + _._2.length).sum)
    all.foreach { case (t, body) =>
      require(t > 0 && t <= 0xFFFF && (t == WritersSection || t >= IgnorableBit || t <= RetentionSection), s"section type $t")
      out.write(le(SectionHeaderSize).putShort(t.toShort).putInt(body.length).array())
      out.write(body)
    }
    out.toByteArray
  }

  /**
   * Decodes `count` sections filling `bytes[start, end)` exactly (docs/format.md §2.3). An unknown
   * type without the ignorable bit is UnsupportedFormatVersionException; any other violation is
   * CorruptManifestException naming `key`.
   */
  def decode(bytes: Array[Byte], start: Int, end: Int, count: Long, key: String): HeadSections = {
    def corrupt(msg: String) = new CorruptManifestException(key, msg)
    if (count > (end - start) / SectionHeaderSize) throw corrupt(s"$count sections cannot fit in ${end - start} bytes")
    val b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
    var pos = start
    var previous = 0
    var out = Empty
    for (i <- 0L until count) {
      if (end - pos < SectionHeaderSize) throw corrupt(s"head section $i runs past the sections region")
      val t = java.lang.Short.toUnsignedInt(b.getShort(pos))
      val len = Integer.toUnsignedLong(b.getInt(pos + 2))
      pos += SectionHeaderSize
      if (len > end - pos) throw corrupt(s"head section ${hex(t)}: body_len $len runs past the sections region")
      if (t <= previous)
        throw corrupt(s"head section ${hex(t)} follows ${hex(previous)} (sections sorted by type, each type once)")
      previous = t
      val body = Arrays.copyOfRange(bytes, pos, pos + len.toInt)
      pos += len.toInt
      t match {
        case SubscriptionsSection => out = out.copy(subscriptions = decodeSubscriptions(body, key))
        case UnnamedReaderSection =>
          if (body.length != UnnamedReaderSize) throw corrupt(s"unnamed reader section has ${body.length} bytes, not 16")
          val r = le(body)
          out = out.copy(unnamedReader = Some(UnnamedReader(r.getLong(0), r.getLong(8))))
        case RetentionSection =>
          if (body.length != RetentionSize) throw corrupt(s"retention section has ${body.length} bytes, not 33")
          val r = le(body)
          val policy = java.lang.Byte.toUnsignedInt(r.get(24))
          if (policy > Retention.DropOldest) throw corrupt(s"retention policy $policy is neither 0 nor 1")
          if (r.getLong(0) < 0) throw corrupt(s"retention max_age_ms ${r.getLong(0)} is negative")
          out = out.copy(retention = Some(Retention(r.getLong(0), r.getLong(8), r.getLong(16), policy, r.getLong(25))))
        case WritersSection => out = out.copy(opaque = out.opaque :+ OpaqueSection(t, body))
        case _ if (t & IgnorableBit) != 0 => out = out.copy(opaque = out.opaque :+ OpaqueSection(t, body))
        case _ => throw new UnsupportedFormatVersionException(key, s"manifest head section (unknown head section ${hex(t)})",
            t, Seq(SubscriptionsSection, UnnamedReaderSection, RetentionSection, WritersSection))
      }
    }
    if (pos != end) throw corrupt(s"${end - pos} unexpected bytes after the last head section")
    out
  }

  private def decodeSubscriptions(body: Array[Byte], key: String): IndexedSeq[Subscription] = {
    def corrupt(msg: String) = new CorruptManifestException(key, s"subscriptions section: $msg")
    if (body.length < 4) throw corrupt(s"${body.length} bytes is shorter than its count")
    val b = le(body)
    val count = Integer.toUnsignedLong(b.getInt(0))
    if (count > (body.length - 4) / (SubscriptionFixedSize + 1)) throw corrupt(s"$count records cannot fit in ${body.length} bytes")
    if (count == 0) throw corrupt("no records (a head without subscriptions has no subscriptions section)")
    var pos = 4
    val out = IndexedSeq.newBuilder[Subscription]
    var previous: Option[String] = None
    for (i <- 0L until count) {
      if (body.length - pos < 1) throw corrupt(s"record $i runs past the section")
      val nameLen = java.lang.Byte.toUnsignedInt(b.get(pos))
      if (body.length - pos < SubscriptionFixedSize + nameLen) throw corrupt(s"record $i runs past the section")
      val name = new String(body, pos + 1, nameLen, StandardCharsets.ISO_8859_1)
      if (!validName(name)) throw corrupt(s"record $i: name '${name}' is not 1-128 of [A-Za-z0-9._-]")
      if (previous.exists(_.compareTo(name) >= 0))
        throw corrupt(s"record $i: name '$name' does not follow '${previous.get}' (names strictly increasing)")
      previous = Some(name)
      val at = pos + 1 + nameLen
      out += Subscription(name, b.getLong(at), b.getLong(at + 8), b.getLong(at + 16), b.getLong(at + 24))
      pos = at + 32
    }
    if (pos != body.length) throw corrupt(s"${body.length - pos} unexpected bytes after the last record")
    out.result()
  }

  /** CRC-32 (zlib's) of `bytes` without the 4 bytes at `crcAt` (the head_crc32 field). */
  def headCrc32(bytes: Array[Byte], crcAt: Int): Long = {
    val c = new CRC32
    c.update(bytes, 0, crcAt)
    c.update(bytes, crcAt + 4, bytes.length - crcAt - 4)
    c.getValue
  }

  private def hex(t: Int): String = f"0x$t%04x"
  private def le(size: Int): ByteBuffer = ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN)
  private def le(bytes: Array[Byte]): ByteBuffer = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
}
