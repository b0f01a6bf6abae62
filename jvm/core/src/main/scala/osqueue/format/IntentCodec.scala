package osqueue.format

import java.io.ByteArrayOutputStream
import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.StandardCharsets

import osqueue.CorruptManifestException

/**
 * A decoded intent: batches `firstBatch ..` of `writerId` (hex), one manifest entry each (their
 * integrity records' `entry_crc32` 0: the committer's encoder fills it at the sequence it assigns).
 */
final case class Intent(writerId: String, firstBatch: Long, entries: IndexedSeq[NewEntry]) {
  def lastBatch: Long = firstBatch + entries.size - 1
}

/** What an intent's name says (a committer skips intents of landed batches without reading them). */
final case class IntentName(ulid: String, writerId: String, firstBatch: Long, count: Int)

/**
 * Intent objects of cooperative commit (docs/format.md §2.4, docs/adr/0007 part 1): a producer
 * announces batches it uploaded, so that whichever producer's CAS wins appends them too.
 *
 * `<manifestPath>.intents/<ULID>-<writer_id hex>-<first_batch>-<count>.intent`; integers
 * little-endian as the manifest's. Python: `osqueue.format.intent_codec`.
 */
object IntentCodec {
  val IntentMagic: Array[Byte] = "OSQI".getBytes(StandardCharsets.US_ASCII)
  val IntentVersion = 1
  val IntentsSuffix = ".intents"
  val MaxIntentBatches = 0xFFFF
  /** magic 4 | version u8 | writer_id 16 | first_batch u64 | count u16. */
  private val HeadSize = 4 + 1 + 16 + 8 + 2
  private val Name = "([0-9A-HJKMNP-TV-Z]{26})-([0-9a-f]{32})-([0-9]{1,20})-([0-9]{1,5})\\.intent".r

  /** Where a manifest's intents live, with the trailing `/`. */
  def intentsPrefix(manifestPath: String): String = s"$manifestPath$IntentsSuffix/"

  def intentKey(manifestPath: String, ulid: String, writerId: String, firstBatch: Long, count: Int): String =
    s"${intentsPrefix(manifestPath)}$ulid-$writerId-$firstBatch-$count.intent"

  /** A fresh intent key, its ULID at `nowMs` (`random` gives its 80 bits of entropy). */
  def newIntentKey(manifestPath: String, nowMs: Long, random: osqueue.RandomSource, writerId: String,
      firstBatch: Long, count: Int): String =
    intentKey(manifestPath, BatchNames.newUlid(nowMs, random), writerId, firstBatch, count)

  /** The fields of an intent's key, or None if it is not one of this manifest's intents. */
  def parseIntentName(manifestPath: String, key: String): Option[IntentName] = {
    val prefix = intentsPrefix(manifestPath)
    if (!key.startsWith(prefix)) None
    else key.substring(prefix.length) match {
      case Name(ulid, wid, first, count) =>
        val f = BigInt(first)
        val c = count.toInt
        if (f > Long.MaxValue || c < 1 || c > MaxIntentBatches) None else Some(IntentName(ulid, wid, f.toLong, c))
      case _ => None
    }
  }

  /** An entry of §2 without `entry_len` and `sequence`, its integrity record's `entry_crc32` 0. */
  private def body(e: NewEntry): Array[Byte] = {
    val out = new ByteArrayOutputStream()
    ManifestCodec.encodeEntry(out, 0, e.location, e.metadata, e.extension, sealIntegrity = false)
    val all = out.toByteArray
    java.util.Arrays.copyOfRange(all, 12, all.length)
  }

  def encodeIntent(writerId: String, firstBatch: Long, entries: Seq[NewEntry]): Array[Byte] = {
    val wid = WriterSequence.unhex(writerId)
    require(wid.length == 16 && entries.nonEmpty && entries.size <= MaxIntentBatches,
      s"an intent holds 1 to $MaxIntentBatches batches of a 16-byte writer id")
    val out = new ByteArrayOutputStream()
    out.write(le(HeadSize).put(IntentMagic).put(IntentVersion.toByte).put(wid).putLong(firstBatch)
        .putShort(entries.size.toShort).array())
    entries.foreach { e =>
      val b = body(e)
      out.write(le(4).putInt(b.length).array())
      out.write(b)
    }
    val data = out.toByteArray
    out.write(le(4).putInt(BatchIntegrity.crc32(data).toInt).array())
    out.toByteArray
  }

  /**
   * Decodes an intent exactly; with `name`, its writer id, first batch and count must match it.
   * Anything that does not decode exactly is CorruptManifestException (the committer skips and counts it).
   */
  def decodeIntent(data: Array[Byte], key: String, name: Option[IntentName] = None): Intent = {
    def corrupt(msg: String) = new CorruptManifestException(key, s"intent: $msg")
    if (data.length < HeadSize + 4) throw corrupt(s"${data.length} bytes is too short")
    val b = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN)
    val end = data.length - 4
    if (Integer.toUnsignedLong(b.getInt(end)) != BatchIntegrity.crc32(data, 0, end)) throw corrupt("crc32 does not match")
    val version = java.lang.Byte.toUnsignedInt(data(4))
    if (!java.util.Arrays.equals(data, 0, 4, IntentMagic, 0, 4) || version != IntentVersion)
      throw corrupt(s"magic ${new String(data, 0, 4, StandardCharsets.ISO_8859_1)} version $version is not OSQI 1")
    val wid = WriterSequence.hex(java.util.Arrays.copyOfRange(data, 5, 21))
    val first = b.getLong(21)
    val count = java.lang.Short.toUnsignedInt(b.getShort(29))
    if (count < 1) throw corrupt("count 0")
    var pos = HeadSize
    val entries = (0 until count).map { i =>
      if (end - pos < 4) throw corrupt(s"batch $i runs past the end")
      val n = Integer.toUnsignedLong(b.getInt(pos))
      if (n > end - pos - 4 || n > 0xFFFFFFFFL - 8) throw corrupt(s"batch $i runs past the end")
      val one = new ByteArrayOutputStream()
      one.write(le(12).putInt((n + 8).toInt).putLong(0L).array())
      one.write(data, pos + 4, n.toInt)
      one.write(ManifestCodec.encodeFooter(ManifestFooter(1, 1, 0)))
      pos += 4 + n.toInt
      val e = ManifestCodec.decode(one.toByteArray, key).entries.head
      val ext = e.extension
      if (BatchIntegrity.walk(ext)._1.exists(r =>
          r.tagType == BatchIntegrity.IntegrityType &&
            !(ext(r.bodyAt + 8) == 0 && ext(r.bodyAt + 9) == 0 && ext(r.bodyAt + 10) == 0 && ext(r.bodyAt + 11) == 0)))
        throw corrupt(s"batch $i: entry_crc32 is not 0")
      NewEntry(e.location, e.metadata, ext)
    }
    if (pos != end) throw corrupt(s"${end - pos} bytes after the last batch")
    name.foreach { n =>
      if (n.writerId != wid || n.firstBatch != first || n.count != count) throw corrupt("its name disagrees with its contents")
    }
    Intent(wid, first, entries)
  }

  private def le(size: Int): ByteBuffer = ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN)
}
