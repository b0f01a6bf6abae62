package osqueue.format

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, IOException}
import java.nio.{ByteBuffer, ByteOrder}

import com.github.luben.zstd.{ZstdCompressCtx, ZstdInputStream}

import osqueue.{CorruptBatchException, InvalidConfigException, UnsupportedFormatVersionException}

/**
 * Compression of a batch's record block (the footer's first byte). Serializable: Spark ships it to
 * tasks, and Scala 2.12 deserializes a case object only if its first non-serializable superclass
 * has a no-argument constructor (2.13 uses a proxy).
 */
sealed abstract class Compression(val id: Int, val name: String) extends Serializable
object Compression {
  case object None extends Compression(0, "none")
  case object Zstd extends Compression(1, "zstd")

  def parse(option: String, value: String): Compression = value.trim.toLowerCase match {
    case "none" | "" => None
    case "zstd" => Zstd
    case _ => throw new InvalidConfigException(option, value, "expected 'none' or 'zstd'")
  }
}

/** Byte codec of a data batch (docs/format.md §3). */
object BatchCodec {
  val FooterSize = 7
  val Version = 1
  val ZstdLevel = 3
  /** Largest decoded record block: the largest JVM array. */
  val MaxBlockSize: Long = Int.MaxValue - 8L

  /** Size of the uncompressed record block for these records. */
  def blockSize(records: Seq[Array[Byte]]): Long = 4L * records.size + recordBytes(records)

  def encode(records: Seq[Array[Byte]], compression: Compression): Array[Byte] = {
    val size = blockSize(records)
    require(size <= MaxBlockSize, s"record block of $size bytes exceeds ${MaxBlockSize}")
    val block = ByteBuffer.allocate(size.toInt).order(ByteOrder.LITTLE_ENDIAN)
    records.foreach(r => block.putInt(r.length).put(r))
    val body = compression match {
      case Compression.None => block.array()
      case Compression.Zstd => compress(block.array())
    }
    val out = ByteBuffer.allocate(body.length + FooterSize).order(ByteOrder.LITTLE_ENDIAN)
    out.put(body).put(compression.id.toByte).putInt(records.size).putShort(Version.toShort)
    out.array()
  }

  /** One frame at level 3 with the content size and the frame's content checksum (§3, docs/adr/0006). */
  private def compress(block: Array[Byte]): Array[Byte] = {
    val ctx = new ZstdCompressCtx()
    try {
      ctx.setLevel(ZstdLevel).setContentSize(true).setChecksum(true)
      ctx.compress(block)
    } finally ctx.close()
  }

  /** The records of a batch, each its own array. */
  def decode(bytes: Array[Byte], key: String): IndexedSeq[Array[Byte]] = decodeBlock(bytes, key).copied

  /**
   * The records of a batch, checked as [[decode]] checks them, left in the decoded block: each is
   * copied out when it is read. A reader that turns each record into a row at once (the Spark
   * source) then holds one array per batch, not one per record until the batch is read.
   */
  def decodeBlock(bytes: Array[Byte], key: String): RecordBlock = decodeBlock(ByteBuffer.wrap(bytes), key)

  /**
   * [[decodeBlock]] over the bytes from `batch`'s position to its limit (e.g. a mapped file,
   * [[osqueue.store.ObjectStore.getBuffer]]): an uncompressed block is read in place, never copied whole.
   */
  def decodeBlock(batch: ByteBuffer, key: String): RecordBlock = {
    def corrupt(msg: String, cause: Throwable = null) = new CorruptBatchException(key, msg, cause)
    val bytes = batch.slice().order(ByteOrder.LITTLE_ENDIAN) // indexes from 0, the caller's buffer untouched
    val length = bytes.remaining()
    if (length < FooterSize) throw corrupt(s"$length bytes is shorter than the 7-byte footer")
    val compressionId = java.lang.Byte.toUnsignedInt(bytes.get(length - FooterSize))
    val count = Integer.toUnsignedLong(bytes.getInt(length - FooterSize + 1))
    val version = java.lang.Short.toUnsignedInt(bytes.getShort(length - FooterSize + 5))
    if (version != Version) throw new UnsupportedFormatVersionException(key, "data batch", version)
    val bodyLen = length - FooterSize
    // An uncompressed block is read in place (its first bodyLen bytes).
    val b: ByteBuffer = compressionId match {
      case 0 => bytes
      case 1 => ByteBuffer.wrap(decompress(bodyOf(bytes, bodyLen), bodyLen, corrupt(_, _))).order(ByteOrder.LITTLE_ENDIAN)
      case other => throw corrupt(f"unknown compression type 0x$other%02x")
    }
    val blockLen = if (compressionId == 0) bodyLen else b.capacity()
    if (count > blockLen / 4L) throw corrupt(s"record_count $count cannot fit in a $blockLen-byte block")
    val starts = new Array[Int](count.toInt + 1) // record i is block[starts(i), starts(i + 1) - 4)
    var pos = 0
    var i = 0
    while (i < count) {
      if (blockLen - pos < 4) throw corrupt(s"record $i of $count: length field runs past the block")
      val len = Integer.toUnsignedLong(b.getInt(pos))
      pos += 4
      if (len > blockLen - pos) throw corrupt(s"record $i of $count: $len bytes run past the block")
      starts(i) = pos
      pos += len.toInt
      i += 1
    }
    if (pos != blockLen) throw corrupt(s"${blockLen - pos} trailing bytes after $count records")
    starts(count.toInt) = pos + 4
    new RecordBlock(b, starts)
  }

  /** The first `len` bytes of `b` as an array: its own when it is one, else a copy. */
  private def bodyOf(b: ByteBuffer, len: Int): Array[Byte] =
    if (b.hasArray && b.arrayOffset() == 0) b.array()
    else { val out = new Array[Byte](len); b.get(0, out); out }

  /** The summed length of `records` (no boxing: this runs once per record read or written). */
  def recordBytes(records: Iterable[Array[Byte]]): Long = records match {
    case block: RecordBlock => block.byteLength
    case _ =>
      var n = 0L
      val it = records.iterator
      while (it.hasNext) n += it.next().length
      n
  }

  /** Streaming decode: accepts several frames and frames without a content size, bounded in size. */
  private def decompress(bytes: Array[Byte], len: Int, corrupt: (String, Throwable) => Exception): Array[Byte] = {
    val out = new ByteArrayOutputStream(math.min(len.toLong * 4, 64L << 20).toInt)
    val in = new ZstdInputStream(new ByteArrayInputStream(bytes, 0, len))
    try {
      val buf = new Array[Byte](64 * 1024)
      var total = 0L
      var n = in.read(buf)
      while (n >= 0) {
        total += n
        if (total > MaxBlockSize) throw corrupt(s"zstd block decompresses past $MaxBlockSize bytes", null)
        out.write(buf, 0, n)
        n = in.read(buf)
      }
      out.toByteArray
    } catch {
      case e: IOException => throw corrupt(s"zstd block does not decompress: ${e.getMessage}", e)
    } finally in.close()
  }
}

/**
 * A decoded batch's records as ranges of one array ([[BatchCodec.decodeBlock]]): `apply(i)` copies
 * record `i` out, so every read returns an array of its own and the block is never exposed.
 */
final class RecordBlock private[format] (block: ByteBuffer, starts: Array[Int]) extends IndexedSeq[Array[Byte]] {
  override def length: Int = starts.length - 1
  override def apply(i: Int): Array[Byte] = {
    if (i < 0 || i >= length) throw new IndexOutOfBoundsException(s"record $i of $length")
    val out = new Array[Byte](starts(i + 1) - 4 - starts(i))
    block.get(starts(i), out) // an absolute read: the block's position never moves, so reads may overlap
    out
  }
  /** The records' summed length. */
  val byteLength: Long = (starts(starts.length - 1) - 4L) - 4L * length
  /** Every record copied out once, as [[BatchCodec.decode]] returns them. */
  def copied: IndexedSeq[Array[Byte]] = {
    val out = new Array[Array[Byte]](length)
    var i = 0
    while (i < out.length) { out(i) = apply(i); i += 1 }
    out.toIndexedSeq
  }
}
