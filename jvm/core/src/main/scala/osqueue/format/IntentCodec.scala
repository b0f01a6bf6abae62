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

/**
 * What an intent's name says (a committer skips intents of landed batches without reading them);
 * `payload`: the in-key form's batches (base64url, §2.4 "In-key intents"), None when the body has to be read.
 */
final case class IntentName(ulid: String, writerId: String, firstBatch: Long, count: Int, payload: Option[String] = None)

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
  private val Name =
    "([0-9A-HJKMNP-TV-Z]{26})-([0-9a-f]{32})-([0-9]{1,20})-([0-9]{1,5})(?:-([A-Za-z0-9_-]{1,1024}))?\\.intent".r
  /** The longest key an in-key intent takes (S3's, GCS's and Azure's key limit). */
  val MaxKeyBytes = 1024
  /** The longest in-key intent name (after `.intents/`) on the local file system store: one file name. */
  val MaxFileNameBytes = 255
  private val TimeLimit = 1L << 53 // in-key ingestion times are in [0, 2^53): their deltas fit 54 bits

  /** Where a manifest's intents live, with the trailing `/`. */
  def intentsPrefix(manifestPath: String): String = s"$manifestPath$IntentsSuffix/"

  def intentKey(manifestPath: String, ulid: String, writerId: String, firstBatch: Long, count: Int): String =
    s"${intentsPrefix(manifestPath)}$ulid-$writerId-$firstBatch-$count.intent"

  /** A fresh intent key, its ULID at `nowMs` (`random` gives its 80 bits of entropy). */
  def newIntentKey(manifestPath: String, nowMs: Long, random: osqueue.RandomSource, writerId: String,
      firstBatch: Long, count: Int): String =
    intentKey(manifestPath, BatchNames.newUlid(nowMs, random), writerId, firstBatch, count)

  /** A fresh intent ULID at `nowMs` (`random` gives its 80 bits of entropy). */
  def newIntentUlid(nowMs: Long, random: osqueue.RandomSource): String = BatchNames.newUlid(nowMs, random)

  /** The fields of an intent's key, or None if it is not one of this manifest's intents. */
  def parseIntentName(manifestPath: String, key: String): Option[IntentName] = {
    val prefix = intentsPrefix(manifestPath)
    if (!key.startsWith(prefix)) None
    else key.substring(prefix.length) match {
      case Name(ulid, wid, first, count, payload) =>
        val f = BigInt(first)
        val c = count.toInt
        if (f > Long.MaxValue || c < 1 || c > MaxIntentBatches) None
        else Some(IntentName(ulid, wid, f.toLong, c, Option(payload)))
      case _ => None
    }
  }

  // -- in-key intents (§2.4 "In-key intents"): the name carries the batches, a committer reads no body --

  private def varint(out: ByteArrayOutputStream, value: Long): Unit = {
    var v = value
    while ((v & ~0x7FL) != 0) {
      out.write(((v & 0x7F) | 0x80).toInt)
      v >>>= 7
    }
    out.write(v.toInt)
  }

  private def zigzag(v: Long): Long = if (v >= 0) v * 2 else -v * 2 - 1

  /**
   * The in-key form of these batches (base64url, no padding), or None if one of them does not have its
   * shape: a location, metadata items in `start_index` order with times in [0, 2^53), and an extension
   * that is exactly an integrity record (`entry_crc32` 0) or none, then the type-4 record of its
   * `(writer_id, batch)`.
   */
  def inKeyPayload(writerId: String, firstBatch: Long, entries: Seq[NewEntry]): Option[String] = {
    val wid = WriterSequence.unhex(writerId)
    val out = new ByteArrayOutputStream()
    var time = 0L
    var payload = Array.emptyByteArray
    val fits = entries.zipWithIndex.forall { case (e, i) =>
      val rec = BatchIntegrity.of(e.extension)
      val integrity = rec.fold(Array.emptyByteArray)(r => BatchIntegrity.record(r.byteLength, r.batchCrc32))
      val expected = integrity ++ WriterSequence.sequenceRecord(wid, firstBatch + i)
      java.util.Arrays.equals(e.extension, expected) && {
        val loc = e.location.getBytes(StandardCharsets.UTF_8)
        varint(out, loc.length.toLong)
        out.write(loc)
        rec match {
          case None => varint(out, 0)
          case Some(r) =>
            varint(out, r.byteLength + 1)
            out.write(le(4).putInt(r.batchCrc32.toInt).array())
        }
        varint(out, e.metadata.size.toLong)
        var start = -1L // per batch; time and payload run on across the intent's batches
        e.metadata.forall { m =>
          m.startIndex >= math.max(start, 0L) && m.ingestionTimeMs >= 0 && m.ingestionTimeMs < TimeLimit && {
            val ownStart = m.startIndex - start != 1
            val ownPayload = !java.util.Arrays.equals(m.payload, payload)
            varint(out, zigzag(m.ingestionTimeMs - time) * 4 + (if (ownStart) 1 else 0) + (if (ownPayload) 2 else 0))
            if (ownStart) varint(out, m.startIndex - start)
            if (ownPayload) {
              varint(out, m.payload.length.toLong)
              out.write(m.payload)
            }
            start = m.startIndex.toLong
            time = m.ingestionTimeMs
            payload = m.payload
            true
          }
        }
      }
    }
    if (fits) Some(java.util.Base64.getUrlEncoder.withoutPadding.encodeToString(out.toByteArray)) else None
  }

  /**
   * The in-key intent key of these batches, or None when they do not have the shape ([[inKeyPayload]]) or
   * the key would pass 1,024 bytes or its name (after `.intents/`) `maxNameBytes`: announce them with
   * [[intentKey]] then (a committer GETs its body).
   */
  def inKeyIntentKey(manifestPath: String, ulid: String, writerId: String, firstBatch: Long, entries: Seq[NewEntry],
      maxNameBytes: Int = MaxKeyBytes): Option[String] =
    inKeyPayload(writerId, firstBatch, entries).flatMap { payload =>
      val name = s"$ulid-$writerId-$firstBatch-${entries.size}-$payload.intent"
      val key = intentsPrefix(manifestPath) + name
      if (name.length > maxNameBytes || key.getBytes(StandardCharsets.UTF_8).length > MaxKeyBytes) None else Some(key)
    }

  /**
   * The intent an in-key name announces (no GET; the name decides, its body is not read). A payload that
   * does not decode exactly is CorruptManifestException (the committer skips and counts it).
   */
  def decodeInKeyIntent(name: IntentName, key: String): Intent = {
    def corrupt(msg: String) = new CorruptManifestException(key, s"in-key intent: $msg")
    val text = name.payload.getOrElse(throw corrupt("the name carries no batches"))
    val data =
      try java.util.Base64.getUrlDecoder.decode(text)
      catch { case _: IllegalArgumentException => throw corrupt("not base64url") }
    if (java.util.Base64.getUrlEncoder.withoutPadding.encodeToString(data) != text) throw corrupt("not canonical base64url")
    var pos = 0
    def take(n: Long): Array[Byte] = {
      if (n > data.length - pos) throw corrupt("runs past the end")
      val out = java.util.Arrays.copyOfRange(data, pos, pos + n.toInt)
      pos += n.toInt
      out
    }
    def readVarint(): Long = {
      var v = 0L
      var shift = 0
      while (true) {
        val b = take(1)(0) & 0xFF
        v |= (b & 0x7FL) << shift
        if ((b & 0x80) == 0) {
          if (b == 0 && shift > 0) throw corrupt("a varint is not in its shortest form")
          return v
        }
        shift += 7
        if (shift >= 63) throw corrupt("a varint is longer than 9 bytes")
      }
      v
    }
    val wid = WriterSequence.unhex(name.writerId)
    var time = 0L
    var payload = Array.emptyByteArray
    val entries = (0 until name.count).map { i =>
      val locBytes = take(readVarint())
      val decoder = StandardCharsets.UTF_8.newDecoder()
      val location =
        try decoder.decode(ByteBuffer.wrap(locBytes)).toString
        catch { case _: java.nio.charset.CharacterCodingException => throw corrupt(s"batch $i: its location is not UTF-8") }
      val length1 = readVarint() // 0: no integrity record, else its byte_length + 1 (then its batch_crc32)
      val integrity =
        if (length1 == 0) Array.emptyByteArray
        else BatchIntegrity.record(length1 - 1, Integer.toUnsignedLong(le(4).put(take(4)).getInt(0)))
      if (length1 > 0x100000000L || location.isEmpty || locBytes.length > 0xFFFF)
        throw corrupt(s"batch $i: byte_length or location out of range")
      var start = -1L
      val items = (0L until readVarint()).map { _ =>
        val tag = readVarint()
        val z = tag >>> 2
        time += (if ((z & 1) != 0) -((z >>> 1) + 1) else z >>> 1)
        start += (if ((tag & 1) != 0) readVarint() else 1L)
        if ((tag & 2) != 0) payload = take(readVarint())
        if (start < 0 || start > Int.MaxValue || time < 0 || time >= TimeLimit)
          throw corrupt(s"batch $i: a metadata item is out of range")
        MetadataItem(start.toInt, time, payload)
      }
      NewEntry(location, items, integrity ++ WriterSequence.sequenceRecord(wid, name.firstBatch + i))
    }
    if (pos != data.length) throw corrupt(s"${data.length - pos} bytes after the last batch")
    Intent(name.writerId, name.firstBatch, entries)
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
