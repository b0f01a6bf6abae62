package osqueue.format

import java.io.ByteArrayOutputStream

import osqueue.CorruptManifestException

/**
 * The manifest edits writers make, on raw bytes: append copies the entries region untouched
 * (O(1) decoding in the number of entries, as RFC 0001 requires), dequeue only walks entry
 * boundaries, and entries (with any extension bytes) are carried byte for byte.
 */
object RawManifest {
  import ManifestCodec.{FooterSize, decodeFooter, encodeEntry, encodeFooter}

  /** Appends `entries` with sequences from `next_sequence` on. Returns the bytes and the first sequence. */
  def append(raw: Array[Byte], entries: Seq[NewEntry], key: String): (Array[Byte], Long) = {
    val footer = decodeFooter(raw, key)
    if (footer.entryCount + entries.size > 0xFFFFFFFFL)
      throw new CorruptManifestException(key, "entry_count would overflow u32")
    if (footer.nextSequence > Long.MaxValue - entries.size)
      throw new CorruptManifestException(key, s"sequence space exhausted: next_sequence ${footer.nextSequence} + ${entries.size}")
    val out = new ByteArrayOutputStream(raw.length + entries.size * 128)
    out.write(raw, 0, raw.length - FooterSize)
    entries.zipWithIndex.foreach { case (e, i) => encodeEntry(out, footer.nextSequence + i, e.location, e.metadata, e.extension) }
    out.write(encodeFooter(footer.copy(
      entryCount = footer.entryCount + entries.size, nextSequence = footer.nextSequence + entries.size)))
    (out.toByteArray, footer.nextSequence)
  }

  /** Removes entries with sequence <= `through`. None when nothing would be removed (no write needed). */
  def dequeueThrough(raw: Array[Byte], through: Long, key: String): Option[Array[Byte]] = {
    val footer = decodeFooter(raw, key)
    val spans = ManifestCodec.scanSpans(raw, key, footer)
    val removed = spans.takeWhile(_.sequence <= through)
    if (removed.isEmpty) None
    else Some(rebuild(raw, removed.last.end, footer.copy(entryCount = footer.entryCount - removed.size)))
  }

  /** Sets the epoch (and optionally dequeues through a sequence) in one edit. */
  def withEpoch(raw: Array[Byte], epoch: Long, dequeueThrough: Option[Long], key: String): Array[Byte] = {
    val footer = decodeFooter(raw, key)
    val spans = ManifestCodec.scanSpans(raw, key, footer)
    val removed = dequeueThrough.map(t => spans.takeWhile(_.sequence <= t)).getOrElse(IndexedSeq.empty)
    val cut = removed.lastOption.map(_.end).getOrElse(0)
    rebuild(raw, cut, footer.copy(entryCount = footer.entryCount - removed.size, epoch = epoch))
  }

  /** Locations with their sequences, without decoding metadata (for ambiguity checks). */
  def locations(raw: Array[Byte], key: String): IndexedSeq[(Long, String)] = {
    val footer = decodeFooter(raw, key)
    ManifestCodec.scanSpans(raw, key, footer).map(s => (s.sequence, s.location))
  }

  private def rebuild(raw: Array[Byte], cut: Int, footer: ManifestFooter): Array[Byte] = {
    val out = new ByteArrayOutputStream(raw.length - cut)
    out.write(raw, cut, raw.length - FooterSize - cut)
    out.write(encodeFooter(footer))
    out.toByteArray
  }
}
