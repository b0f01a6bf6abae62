package osqueue.format

/**
 * The manifest edits writers make, on raw bytes: append copies the entries region untouched
 * (O(1) decoding in the number of entries, as RFC 0001 requires), dequeue only walks entry
 * boundaries, and entries (with any extension bytes) are carried byte for byte. They work on
 * RFC v1 manifests and on segmented heads (docs/format.md §2.2) alike, through [[ManifestHead]];
 * these never seal nor fold (see [[ManifestHead.appended]]) and read no index object (a dequeue
 * that reaches one needs a store: `osqueue.queue.QueueConsumer`).
 */
object ManifestEdits {
  /** Appends `entries` with sequences from `next_sequence` on. Returns the bytes and the first sequence. */
  def append(raw: Array[Byte], entries: Seq[NewEntry], key: String): (Array[Byte], Long) =
    ManifestHead.parse(raw, key).appended(entries, Int.MaxValue, _ => throw new IllegalStateException("no sealing here"),
      _ => throw new IllegalStateException("no folding here"))

  /** Removes entries with sequence <= `through`. None when nothing would be removed (no write needed). */
  def dequeueThrough(raw: Array[Byte], through: Long, key: String): Option[Array[Byte]] =
    ManifestHead.parse(raw, key).dequeuedThrough(through, noIndex)

  /** Sets the epoch (and optionally dequeues through a sequence) in one edit. */
  def withEpoch(raw: Array[Byte], epoch: Long, dequeueThrough: Option[Long], key: String): Array[Byte] =
    ManifestHead.parse(raw, key).withEpoch(epoch, dequeueThrough, noIndex)

  private def noIndex(ref: SegmentRef): Nothing =
    throw new IllegalStateException(s"a dequeue reaching index object '${ref.key}' needs a store (QueueConsumer)")

  /** The tail's locations with their sequences (all of them in a v1 manifest), without decoding metadata. */
  def locations(raw: Array[Byte], key: String): IndexedSeq[(Long, String)] =
    ManifestHead.parse(raw, key).tailLocations
}
