package osqueue.format

import java.util.Arrays

/** One metadata range of a manifest entry (RFC 0001): records from `startIndex` on share it. */
final case class MetadataItem(startIndex: Int, ingestionTimeMs: Long, payload: Array[Byte]) {
  override def equals(o: Any): Boolean = o match {
    case m: MetadataItem =>
      startIndex == m.startIndex && ingestionTimeMs == m.ingestionTimeMs && Arrays.equals(payload, m.payload)
    case _ => false
  }
  override def hashCode(): Int = (startIndex, ingestionTimeMs, Arrays.hashCode(payload)).hashCode()
}

/** A queue entry: the location of one batch plus its metadata ranges. `extension` is kept verbatim. */
final case class ManifestEntry(
    sequence: Long,
    location: String,
    metadata: IndexedSeq[MetadataItem],
    extension: Array[Byte] = Array.emptyByteArray) {

  /** The metadata item covering record `index`: the last one with `startIndex <= index`. */
  def metadataFor(index: Int): Option[MetadataItem] = metadata.takeWhile(_.startIndex <= index).lastOption

  override def equals(o: Any): Boolean = o match {
    case e: ManifestEntry =>
      sequence == e.sequence && location == e.location && metadata == e.metadata && Arrays.equals(extension, e.extension)
    case _ => false
  }
  override def hashCode(): Int = (sequence, location, metadata).hashCode()
}

/** A fully decoded manifest. Writers mostly work on raw bytes instead (see [[ManifestEdits]]). */
final case class Manifest(entries: IndexedSeq[ManifestEntry], nextSequence: Long, epoch: Long) {
  /** Sequence of the first entry, or `nextSequence` when the queue is empty. */
  def firstSequence: Long = entries.headOption.map(_.sequence).getOrElse(nextSequence)
  def isEmpty: Boolean = entries.isEmpty
}

object Manifest {
  val Empty: Manifest = Manifest(IndexedSeq.empty, 0L, 0L)
}

/** An entry to append: sequence is assigned by the manifest; `extension` rides after the metadata. */
final case class NewEntry(location: String, metadata: IndexedSeq[MetadataItem], extension: Array[Byte] = Array.emptyByteArray)
