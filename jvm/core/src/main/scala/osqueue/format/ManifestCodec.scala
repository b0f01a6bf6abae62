package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.{CharacterCodingException, CodingErrorAction, StandardCharsets}

import osqueue.{CorruptManifestException, UnsupportedFormatVersionException}

/** The footer every manifest ends with. */
final case class ManifestFooter(entryCount: Long, nextSequence: Long, epoch: Long)

/**
 * Byte codec of the queue manifest (docs/format.md §2). Decoding is strict and never allocates
 * by a count before checking that the bytes for it exist.
 */
object ManifestCodec {
  val FooterSize = 22
  val Version = 1
  private val EntryFixedSize = 8 + 2 + 4
  private val MetadataFixedSize = 4 + 8 + 4

  val EmptyBytes: Array[Byte] = encodeFooter(ManifestFooter(0, 0, 0))

  def encodeFooter(f: ManifestFooter): Array[Byte] = {
    val b = le(FooterSize)
    b.putInt(f.entryCount.toInt).putLong(f.nextSequence).putLong(f.epoch).putShort(Version.toShort)
    b.array()
  }

  /** Reads and checks only the footer: O(1), used by appends that never decode entries. */
  def decodeFooter(bytes: Array[Byte], key: String, reads: Seq[Int] = Seq(Version)): ManifestFooter = {
    if (bytes.isEmpty) throw new CorruptManifestException(key, "empty object (0 bytes)")
    if (bytes.length < FooterSize)
      throw new CorruptManifestException(key, s"${bytes.length} bytes is shorter than the 22-byte footer")
    val b = le(bytes).position(bytes.length - FooterSize)
    val count = Integer.toUnsignedLong(b.getInt())
    val next = b.getLong()
    val epoch = b.getLong()
    val version = java.lang.Short.toUnsignedInt(b.getShort())
    if (version != Version) throw new UnsupportedFormatVersionException(key, "queue manifest", version, reads)
    if (next < 0) throw new CorruptManifestException(key, s"next_sequence ${java.lang.Long.toUnsignedString(next)} is out of range")
    ManifestFooter(count, next, epoch)
  }

  def encodeEntry(out: java.io.ByteArrayOutputStream, sequence: Long, location: String,
      metadata: IndexedSeq[MetadataItem], extension: Array[Byte] = Array.emptyByteArray,
      sealIntegrity: Boolean = true): Unit = {
    val loc = location.getBytes(StandardCharsets.UTF_8)
    require(loc.length <= 0xFFFF, s"location longer than 65535 bytes: $location")
    val len = EntryFixedSize + loc.length + metadata.map(MetadataFixedSize + _.payload.length).sum + extension.length
    val b = le(4 + len)
    b.putInt(len).putLong(sequence).putShort(loc.length.toShort).put(loc).putInt(metadata.size)
    metadata.foreach { m =>
      b.putInt(m.startIndex).putLong(m.ingestionTimeMs).putInt(m.payload.length).put(m.payload)
    }
    b.put(extension)
    // An entry-integrity record (§2.1) covers the sequence: its entry_crc32 is computed here.
    if (sealIntegrity && extension.length > 0) BatchIntegrity.seal(b.array(), 4 + len - extension.length)
    out.write(b.array())
  }

  def encode(m: Manifest): Array[Byte] = {
    val out = new java.io.ByteArrayOutputStream()
    // Decoded entries are carried byte for byte: their integrity records are not computed again.
    m.entries.foreach(e => encodeEntry(out, e.sequence, e.location, e.metadata, e.extension, sealIntegrity = false))
    out.write(encodeFooter(ManifestFooter(m.entries.size, m.nextSequence, m.epoch)))
    out.toByteArray
  }

  def decode(bytes: Array[Byte], key: String): Manifest = {
    val footer = decodeFooter(bytes, key)
    val entries = new EntryReader(bytes, key).readAll(footer)
    Manifest(entries, footer.nextSequence, footer.epoch)
  }

  /** Walks entries without decoding metadata payloads: (sequence, location, start, end) spans. */
  private[format] def scanSpans(bytes: Array[Byte], key: String, footer: ManifestFooter): IndexedSeq[EntrySpan] =
    new EntryReader(bytes, key).scan(footer)

  /** The same over the entries region `[from, until)` of a segmented head (§2.2). */
  private[format] def scanSpans(bytes: Array[Byte], key: String, footer: ManifestFooter, from: Int, until: Int)
      : IndexedSeq[EntrySpan] = new EntryReader(bytes, key, from, until).scan(footer)

  private[format] def readEntries(bytes: Array[Byte], key: String, spans: IndexedSeq[EntrySpan]): IndexedSeq[ManifestEntry] = {
    val r = new EntryReader(bytes, key)
    spans.zipWithIndex.map { case (s, i) => r.readEntry(s, i) }
  }

  /** The footer of a manifest or segmented head: version 1 or 2 (§2.2), with the version. */
  private[format] def decodeAnyFooter(bytes: Array[Byte], key: String): (ManifestFooter, Int) = {
    if (bytes.length >= FooterSize) {
      val version = java.lang.Short.toUnsignedInt(le(bytes).getShort(bytes.length - 2))
      if (version == ManifestHead.Version || version == HeadSections.Version) {
        val b = le(bytes).position(bytes.length - FooterSize)
        val count = Integer.toUnsignedLong(b.getInt())
        val next = b.getLong()
        val epoch = b.getLong()
        if (next < 0) throw new CorruptManifestException(key, s"next_sequence ${java.lang.Long.toUnsignedString(next)} is out of range")
        return (ManifestFooter(count, next, epoch), version)
      }
    }
    (decodeFooter(bytes, key, Seq(Version, ManifestHead.Version, HeadSections.Version)), Version)
  }

  def encodeFooter(f: ManifestFooter, version: Int): Array[Byte] = {
    val b = le(FooterSize)
    b.putInt(f.entryCount.toInt).putLong(f.nextSequence).putLong(f.epoch).putShort(version.toShort)
    b.array()
  }

  private[format] final case class EntrySpan(sequence: Long, location: String, start: Int, end: Int)

  private final class EntryReader(bytes: Array[Byte], key: String, from: Int, limit: Int) {
    def this(bytes: Array[Byte], key: String) = this(bytes, key, 0, bytes.length - FooterSize)
    private val b = le(bytes)

    private def corrupt(msg: String) = new CorruptManifestException(key, msg)

    /** Scans entry boundaries and checks sequences; decode reuses it. */
    def scan(footer: ManifestFooter): IndexedSeq[EntrySpan] = {
      // Each entry takes at least 4 + 14 bytes: reject impossible counts before allocating.
      if (footer.entryCount > (limit - from) / (4 + EntryFixedSize))
        throw corrupt(s"entry_count ${footer.entryCount} cannot fit in ${limit - from} bytes of entries")
      val spans = IndexedSeq.newBuilder[EntrySpan]
      var pos = from
      var i = 0L
      var prevSeq = -1L
      while (i < footer.entryCount) {
        if (limit - pos < 4) throw corrupt(s"entry $i: length field runs past the entries region")
        val entryLen = Integer.toUnsignedLong(b.getInt(pos))
        val start = pos + 4
        if (entryLen > limit - start) throw corrupt(s"entry $i: entry_len $entryLen runs past the entries region")
        val end = start + entryLen.toInt
        if (entryLen < EntryFixedSize) throw corrupt(s"entry $i: entry_len $entryLen is below the 14-byte minimum")
        val seq = b.getLong(start)
        val locLen = java.lang.Short.toUnsignedInt(b.getShort(start + 8))
        if (entryLen < EntryFixedSize + locLen)
          throw corrupt(s"entry $i: entry_len $entryLen is too small for a $locLen-byte location")
        if (seq < 0) throw corrupt(s"entry $i: sequence ${java.lang.Long.toUnsignedString(seq)} is out of range")
        if (prevSeq >= 0 && seq != prevSeq + 1)
          throw corrupt(s"entry $i: sequence $seq does not follow ${prevSeq} (sequences must be contiguous)")
        val location = utf8(start + 10, locLen, i)
        spans += EntrySpan(seq, location, pos, end)
        prevSeq = seq
        pos = end
        i += 1
      }
      if (pos != limit) throw corrupt(s"${limit - pos} unexpected bytes between the last entry and the footer")
      // Appends take next_sequence and dequeues remove a prefix: the last entry is always next - 1.
      if (prevSeq >= 0 && prevSeq != footer.nextSequence - 1)
        throw corrupt(s"last sequence $prevSeq is not next_sequence - 1 (next_sequence is ${footer.nextSequence})")
      spans.result()
    }

    def readAll(footer: ManifestFooter): IndexedSeq[ManifestEntry] =
      scan(footer).zipWithIndex.map { case (s, i) => readEntry(s, i) }

    def readEntry(s: EntrySpan, i: Int): ManifestEntry = {
      val locLen = java.lang.Short.toUnsignedInt(b.getShort(s.start + 4 + 8))
      var pos = s.start + 4 + 10 + locLen
      val count = Integer.toUnsignedLong(b.getInt(pos)); pos += 4
      if (count > (s.end - pos) / MetadataFixedSize)
        throw corrupt(s"entry $i: metadata_count $count cannot fit in the entry")
      val items = (0 until count.toInt).map { j =>
        if (s.end - pos < MetadataFixedSize) throw corrupt(s"entry $i: metadata item $j runs past the entry's end")
        val startIndex = b.getInt(pos)
        val time = b.getLong(pos + 4)
        val payloadLen = Integer.toUnsignedLong(b.getInt(pos + 12))
        pos += MetadataFixedSize
        if (payloadLen > s.end - pos) throw corrupt(s"entry $i: metadata item $j payload runs past the entry's end")
        if (startIndex < 0) throw corrupt(s"entry $i: metadata item $j start_index is out of range")
        val payload = java.util.Arrays.copyOfRange(bytes, pos, pos + payloadLen.toInt)
        pos += payloadLen.toInt
        MetadataItem(startIndex, time, payload)
      }
      val extension = java.util.Arrays.copyOfRange(bytes, pos, s.end)
      ManifestEntry(s.sequence, s.location, items, extension)
    }

    private def utf8(offset: Int, len: Int, i: Long): String =
      try {
        StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT).onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(bytes, offset, len)).toString
      } catch { case _: CharacterCodingException => throw corrupt(s"entry $i: location is not valid UTF-8") }
  }

  private def le(size: Int): ByteBuffer = ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN)
  private def le(bytes: Array[Byte]): ByteBuffer = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
}
