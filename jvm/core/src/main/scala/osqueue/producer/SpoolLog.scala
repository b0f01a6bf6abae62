package osqueue.producer

import java.io.{ByteArrayOutputStream, DataOutputStream}
import java.nio.{ByteBuffer, BufferUnderflowException}
import java.nio.channels.FileChannel
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Path, StandardOpenOption}
import java.util.zip.CRC32

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import osqueue.CorruptSpoolException

/**
 * A producer spool's log records (docs/adr/0006 part 2, docs/format.md §9; Python:
 * `osqueue.producer.spool_log`). The directory, its lock and replay are [[Spool]]'s; shipping is
 * [[SpoolUploader]]'s.
 */
sealed trait SpoolRecord {
  def recordType: Int
  def body: Array[Byte]
}

/** One `produce()` call. */
final case class EntriesRecord(callNo: Long, ingestionTimeMs: Long, metadata: Array[Byte], entries: Seq[Array[Byte]])
    extends SpoolRecord {
  def recordType: Int = SpoolLog.Entries
  def body: Array[Byte] = SpoolLog.bytes { out =>
    out.writeLong(callNo); out.writeLong(ingestionTimeMs); out.writeInt(metadata.length); out.write(metadata)
    out.writeInt(entries.size)
    entries.foreach { e => out.writeInt(e.length); out.write(e) }
  }
  override def equals(o: Any): Boolean = o match {
    case r: EntriesRecord =>
      r.callNo == callNo && r.ingestionTimeMs == ingestionTimeMs && r.metadata.sameElements(metadata) &&
      r.entries.size == entries.size && r.entries.zip(entries).forall { case (a, b) => a.sameElements(b) }
    case _ => false
  }
  override def hashCode: Int = callNo.hashCode
}

/** A batch's name, written before its PUT. */
final case class BatchRecord(batchNo: Long, firstCall: Long, lastCall: Long, byteLength: Long, batchCrc32: Long,
    location: String) extends SpoolRecord {
  def recordType: Int = SpoolLog.Batch
  def body: Array[Byte] = SpoolLog.bytes { out =>
    out.writeLong(batchNo); out.writeLong(firstCall); out.writeLong(lastCall)
    out.writeInt(byteLength.toInt); out.writeInt(batchCrc32.toInt)
    val loc = location.getBytes(UTF_8); out.writeShort(loc.length); out.write(loc)
  }
}

/** A manifest CAS about to be sent: the sequence its first location would get, and its batches. */
final case class AttemptRecord(base: Long, batchNos: Seq[Long], locations: Seq[String]) extends SpoolRecord {
  def recordType: Int = SpoolLog.Attempt
  def body: Array[Byte] = SpoolLog.bytes { out =>
    out.writeLong(base); out.writeShort(batchNos.size); batchNos.foreach(out.writeLong)
    locations.foreach { l =>
      val b = l.getBytes(UTF_8); out.writeShort(b.length); out.write(b)
    }
  }
}

/** A CAS known to have landed: its batches are in the manifest from `firstSequence` on. */
final case class LandedRecord(firstSequence: Long, batchNos: Seq[Long]) extends SpoolRecord {
  def recordType: Int = SpoolLog.Landed
  def body: Array[Byte] = SpoolLog.bytes { out =>
    out.writeLong(firstSequence); out.writeShort(batchNos.size); batchNos.foreach(out.writeLong)
  }
}

/** Calls dropped by `drop_oldest` (none of them in a batch). */
final case class DroppedRecord(firstCall: Long, lastCall: Long) extends SpoolRecord {
  def recordType: Int = SpoolLog.Dropped
  def body: Array[Byte] = SpoolLog.bytes { out => out.writeLong(firstCall); out.writeLong(lastCall) }
}

object SpoolLog {
  /**
   * A test seam: called with a log file's path right before it is forced (the crash-injection tests of
   * SpoolTailSuite take a power-loss image there, or hold the force as a process about to die would).
   */
  @volatile private[producer] var beforeForce: Path => Unit = null
  private[producer] def aboutToForce(path: Path): Unit = { val h = beforeForce; if (h != null) h(path) }

  val Magic: Array[Byte] = "OSQS".getBytes(UTF_8)
  val Overhead: Int = 4 + 4 + 1 + 4
  val DefaultRotateBytes: Long = 64L * 1024 * 1024

  /** Zeros written ahead of the log's end (docs/format.md §9 "Preallocation"): the file's size so far, within these. */
  val PreallocMinBytes: Long = 64L * 1024
  val PreallocMaxBytes: Long = 1024L * 1024
  val Entries = 1
  val Batch = 2
  val Attempt = 3
  val Landed = 4
  val Dropped = 5

  private[producer] def bytes(write: DataOutputStream => Unit): Array[Byte] = {
    val buf = new ByteArrayOutputStream()
    val out = new DataOutputStream(buf)
    write(out)
    out.flush()
    buf.toByteArray
  }

  private def crc(data: Array[Byte], from: Int, until: Int): Long = {
    val c = new CRC32(); c.update(data, from, until - from); c.getValue
  }

  /**
   * An ENTRIES record's bytes, CRC included: the bytes of `encodeRecord(EntriesRecord(...))`. Every
   * spooled `produce()` pays for it (issue 28): one array of the record's size filled in place and
   * one CRC over it, instead of a growing stream for the body, then header and body, then the CRC.
   */
  def encodeEntries(callNo: Long, timeMs: Long, metadata: Array[Byte], entries: Seq[Array[Byte]]): Array[Byte] = {
    var bodyLen = 24L + metadata.length
    entries.foreach(e => bodyLen += 4L + e.length)
    val out = new Array[Byte](Math.toIntExact(Overhead + bodyLen))
    val b = ByteBuffer.wrap(out)
    b.put(Magic).putInt(bodyLen.toInt).put(Entries.toByte).putLong(callNo).putLong(timeMs)
    b.putInt(metadata.length).put(metadata).putInt(entries.size)
    entries.foreach(e => b.putInt(e.length).put(e))
    b.putInt(crc(out, 0, b.position()).toInt)
    out
  }

  /** The record's bytes, CRC included. */
  def encodeRecord(record: SpoolRecord): Array[Byte] = record match {
    case e: EntriesRecord => encodeEntries(e.callNo, e.ingestionTimeMs, e.metadata, e.entries)
    case _ => encodeGeneric(record)
  }

  private def encodeGeneric(record: SpoolRecord): Array[Byte] = {
    val body = record.body
    val head = bytes { out =>
      out.write(Magic); out.writeInt(body.length); out.writeByte(record.recordType); out.write(body)
    }
    val c = crc(head, 0, head.length)
    head ++ bytes(_.writeInt(c.toInt))
  }

  private def decodeBody(kind: Int, body: Array[Byte]): SpoolRecord = {
    val b = ByteBuffer.wrap(body)
    def raw(n: Int): Array[Byte] = {
      if (n < 0 || n > b.remaining) throw new IllegalArgumentException("a length past the body")
      val a = new Array[Byte](n); b.get(a); a
    }
    def u16(): Int = b.getShort() & 0xFFFF
    def u32(): Long = b.getInt() & 0xFFFFFFFFL
    def str(n: Int): String = {
      val d = UTF_8.newDecoder() // malformed UTF-8 is an invalid record, as in Python
      d.decode(ByteBuffer.wrap(raw(n))).toString
    }
    val record = kind match {
      case Entries =>
        val (call, time) = (b.getLong(), b.getLong())
        val metadata = raw(b.getInt())
        val count = b.getInt()
        if (count < 0) throw new IllegalArgumentException("negative count")
        EntriesRecord(call, time, metadata, (0 until count).map(_ => raw(b.getInt())))
      case Batch =>
        val (no, first, last, len, c) = (b.getLong(), b.getLong(), b.getLong(), u32(), u32())
        BatchRecord(no, first, last, len, c, str(u16()))
      case Attempt =>
        val base = b.getLong(); val count = u16()
        val nos = (0 until count).map(_ => b.getLong())
        AttemptRecord(base, nos, (0 until count).map(_ => str(u16())))
      case Landed =>
        val first = b.getLong(); val count = u16()
        LandedRecord(first, (0 until count).map(_ => b.getLong()))
      case Dropped => DroppedRecord(b.getLong(), b.getLong())
      case other => throw new IllegalArgumentException(s"unknown record type $other")
    }
    if (b.hasRemaining) throw new IllegalArgumentException(s"${b.remaining} bytes after a type-$kind record's fields")
    record
  }

  /** The record at `at` and its end, or None if the bytes there are not a whole, valid record. */
  private def recordAt(data: Array[Byte], at: Int): Option[(SpoolRecord, Int)] = {
    if (at + Overhead > data.length) return None
    val b = ByteBuffer.wrap(data, at, data.length - at)
    val magic = new Array[Byte](4); b.get(magic)
    val bodyLen = b.getInt() & 0xFFFFFFFFL
    val kind = b.get() & 0xFF
    val end = at + 9L + bodyLen + 4
    if (!magic.sameElements(Magic) || end > data.length) return None
    val e = end.toInt
    if (crc(data, at, e - 4) != (ByteBuffer.wrap(data, e - 4, 4).getInt() & 0xFFFFFFFFL)) return None
    try Some((decodeBody(kind, java.util.Arrays.copyOfRange(data, at + 9, e - 4)), e))
    catch {
      case _: BufferUnderflowException | _: IllegalArgumentException | _: java.nio.charset.CharacterCodingException =>
        None
    }
  }

  /**
   * The records of one log file's bytes and where the valid ones end (a torn tail starts there).
   * Throws [[CorruptSpoolException]] when a record that does not check is followed by a valid one.
   */
  def decodeRecords(data: Array[Byte], name: String): (Seq[SpoolRecord], Int) = {
    val records = mutable.ArrayBuffer.empty[SpoolRecord]
    var at = 0
    while (at < data.length) {
      recordAt(data, at) match {
        case Some((r, end)) => records += r; at = end
        case None =>
          var later = indexOf(data, at + 1)
          while (later != -1) {
            if (recordAt(data, later).isDefined)
              throw new CorruptSpoolException(name, at, s"a damaged record is followed by a valid one at $later")
            later = indexOf(data, later + 1)
          }
          return (records.toSeq, at)
      }
    }
    (records.toSeq, at)
  }

  private def indexOf(data: Array[Byte], from: Int): Int = {
    var i = from
    while (i + Magic.length <= data.length) {
      if (data(i) == Magic(0) && data(i + 1) == Magic(1) && data(i + 2) == Magic(2) && data(i + 3) == Magic(3))
        return i
      i += 1
    }
    -1
  }

  def logFileName(firstRecordNo: Long): String = f"$firstRecordNo%020d.log"
}

/**
 * The log files of one spool directory: read once at open (a torn tail or a preallocated file's
 * zero tail cut off its file), then appended to. `append` writes records whole, with a chunk of
 * zeros after them when they would pass the zeros already written (so most forces write data, not
 * the file's size: docs/format.md §9 "Preallocation"); `sync(ticket)` returns once they are on disk,
 * one force covering every record written while the previous one ran (group fsync). `close` cuts
 * the zeros off.
 */
final class SpoolLog(directory: Path, rotateBytes: Long = SpoolLog.DefaultRotateBytes) {
  private val lock = new Object
  private var written = 0L
  private var synced = 0L
  private var syncing = false
  private var channel: FileChannel = _
  private var fileSize = 0L // where the next record goes (the records' end)
  private var zeroed = 0L // the file's size: zeros from fileSize to here
  private val files = mutable.ArrayBuffer.empty[(Long, Path)]
  private var nextRecordNo = 0L

  /** Every record of every file, oldest first, with its file. */
  def readAll(): Seq[(Path, SpoolRecord)] = lock.synchronized {
    val names = Files.list(directory).iterator.asScala.map(_.getFileName.toString)
      .filter(n => n.endsWith(".log") && n.dropRight(4).nonEmpty && n.dropRight(4).forall(_.isDigit)).toSeq.sorted
    names.flatMap { n =>
      val path = directory.resolve(n)
      val data = Files.readAllBytes(path)
      val (records, end) = SpoolLog.decodeRecords(data, path.toString)
      if (end < data.length) {
        val ch = FileChannel.open(path, StandardOpenOption.WRITE)
        try { ch.truncate(end.toLong); ch.force(true) }
        finally ch.close()
      }
      files += ((n.dropRight(4).toLong, path))
      nextRecordNo = n.dropRight(4).toLong + records.size
      records.map(r => (path, r))
    }
  }

  private def openCurrent(): Unit = if (channel == null) {
    if (files.nonEmpty) {
      channel = FileChannel.open(files.last._2, StandardOpenOption.WRITE) // readAll cut it at its records' end
      fileSize = channel.size()
      zeroed = fileSize
    } else startFile()
  }

  private def startFile(): Unit = {
    val path = directory.resolve(SpoolLog.logFileName(nextRecordNo))
    channel = FileChannel.open(path, StandardOpenOption.WRITE, StandardOpenOption.CREATE)
    fileSize = 0
    zeroed = 0
    files += ((nextRecordNo, path))
    forceDirectory()
  }

  private def forceDirectory(): Unit =
    try {
      val d = FileChannel.open(directory, StandardOpenOption.READ);
      try d.force(true)
      finally d.close()
    } catch { case _: java.io.IOException => () } // not every platform opens directories

  /** Writes the records (one write); their ticket and file. */
  def append(records: Seq[SpoolRecord]): (Long, Path) =
    appendEncoded(records.map(SpoolLog.encodeRecord).reduce(_ ++ _), records.size)

  /** `append` for `count` records already encoded into `encoded` (whole records, in order). */
  def appendEncoded(encoded: Array[Byte], count: Int): (Long, Path) = lock.synchronized {
    openCurrent()
    if (fileSize > 0 && fileSize + encoded.length > rotateBytes) rotateNow()
    val end = fileSize + encoded.length
    val data =
      if (end <= zeroed) encoded
      else { // the records and a chunk of zeros after them, in one write
        zeroed = end + math.min(math.max(fileSize, SpoolLog.PreallocMinBytes), SpoolLog.PreallocMaxBytes)
        java.util.Arrays.copyOf(encoded, (zeroed - fileSize).toInt)
      }
    val buf = ByteBuffer.wrap(data)
    var at = fileSize
    while (buf.hasRemaining) at += channel.write(buf, at)
    fileSize = end
    nextRecordNo += count
    written += 1
    (written, files.last._2)
  }

  private def rotateNow(): Unit = {
    while (syncing) lock.wait()
    SpoolLog.aboutToForce(files.last._2)
    channel.force(false); channel.close() // its zero tail stays: a clean end, cut if the file is ever read
    synced = written
    startFile()
  }

  /** Starts a new file (so the settled ones can be deleted). */
  def rotate(): Unit = lock.synchronized { if (channel != null && fileSize > 0) rotateNow() }

  /** Returns once the record with this ticket is on disk (one force covers every record written before it). */
  def sync(ticket: Long): Unit = {
    val job = lock.synchronized {
      while (synced < ticket && syncing) lock.wait()
      if (synced >= ticket) None
      else { syncing = true; Some((written, channel, files.lastOption.map(_._2))) }
    }
    job.foreach { case (upto, ch, path) =>
      try if (ch != null) {
          path.foreach(SpoolLog.aboutToForce); ch.force(false)
        } // outside the monitor: appends go on meanwhile (group fsync)
      finally lock.synchronized { syncing = false; synced = math.max(synced, upto); lock.notifyAll() }
    }
  }

  /** Appends and forces; the records' file. */
  def write(records: Seq[SpoolRecord]): Path = { val (t, p) = append(records); sync(t); p }

  /** Unlinks settled files (never the current one) and forces the directory. */
  def delete(paths: Seq[Path]): Unit = lock.synchronized {
    val current = if (channel != null && files.nonEmpty) Some(files.last._2) else None
    val doomed = paths.filterNot(p => current.contains(p))
    doomed.foreach(Files.deleteIfExists)
    files --= files.filter(f => doomed.contains(f._2))
    if (doomed.nonEmpty) forceDirectory()
  }

  def logFiles: Seq[Path] = lock.synchronized(files.map(_._2).toSeq)

  def close(): Unit = lock.synchronized {
    if (channel != null) {
      if (zeroed > fileSize) channel.truncate(fileSize)
      channel.force(true); channel.close(); channel = null
    }
  }
}
