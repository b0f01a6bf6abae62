package osqueue.format

import osqueue.CorruptManifestException

/** One chunk: the bytes of its segment object (an RFC v1 manifest of its entries, epoch 0). */
final case class Chunk(bytes: Array[Byte], firstSequence: Long, entryCount: Long, oldestBatchMs: Long) {
  def lastSequence: Long = firstSequence + entryCount - 1
  def sealedTail: SealedTail = SealedTail(bytes, firstSequence, entryCount, oldestBatchMs)
}

/**
 * Consecutive encoded entries inside `bytes`: entry `i` (sequence `firstSequence + i`) is
 * `bytes[starts(i), starts(i + 1))`, the last one ending at `end`.
 */
final case class EntryRun(bytes: Array[Byte], starts: IndexedSeq[Int], end: Int, locations: IndexedSeq[String],
    firstSequence: Long)

/**
 * Cutting a deep tail, or an oversized segment, into segments of K entries (docs/format.md §2.2).
 *
 * A v1 manifest written by the RFC reference (or with segmentation off) can hold a million entries;
 * sealed as one segment, every reader's first read would decode all of it. Instead the entries are cut
 * into chunks of exactly K entries aligned on a sequence `align` (chunk `i` covers
 * `align + iK ..= align + (i+1)K - 1`, the first and last possibly shorter), each chunk an RFC v1
 * manifest of its entries byte for byte: the same segments K-at-a-time sealing would have written.
 */
object SegmentChunks {
  /** How many segment objects a seal writes at once (docs/format.md §2.2). */
  val ParallelPuts = 8

  /** `(firstSequence, entryCount)` of the chunks covering `first ..= first + count - 1`, cut at `align + iK`. */
  def chunkBounds(first: Long, count: Long, k: Int, align: Long): IndexedSeq[(Long, Long)] = {
    require(k >= 1 && align <= first, s"chunks of $k aligned on $align cannot start at $first")
    val out = IndexedSeq.newBuilder[(Long, Long)]
    var s = first
    val end = first + count
    while (s < end) {
      val boundary = align + ((s - align) / k + 1) * k
      val n = math.min(boundary, end) - s
      out += ((s, n))
      s += n
    }
    out.result()
  }

  /** The run's entries cut into chunks of K aligned on `align`; chunks wholly below `keepFrom` (dequeued) left out. */
  def cutChunks(run: EntryRun, k: Int, align: Long, keepFrom: Long = Long.MinValue): IndexedSeq[Chunk] =
    chunkBounds(run.firstSequence, run.starts.size.toLong, k, align).filter { case (f, n) => f + n - 1 >= keepFrom }.map {
      case (first, n) =>
        val i = (first - run.firstSequence).toInt
        val start = run.starts(i)
        val end = if (i + n < run.starts.size) run.starts(i + n.toInt) else run.end
        val oldest = (i until i + n.toInt).flatMap(j => BatchNames.ulidTimeMs(run.locations(j))).reduceOption(_ min _)
          .getOrElse(Long.MaxValue)
        val out = new Array[Byte](end - start + ManifestCodec.FooterSize)
        System.arraycopy(run.bytes, start, out, 0, end - start)
        val footer = ManifestCodec.encodeFooter(ManifestFooter(n, first + n, 0L))
        System.arraycopy(footer, 0, out, end - start, footer.length)
        Chunk(out, first, n, oldest)
    }

  /**
   * The entries of a segment object (an RFC v1 manifest whose length and SHA-256 were already checked
   * against its ref): their headers walked and checked, nothing else decoded.
   */
  def segmentRun(bytes: Array[Byte], key: String): EntryRun = {
    val footer = ManifestCodec.decodeFooter(bytes, key)
    val spans = ManifestCodec.scanSpans(bytes, key, footer)
    if (spans.isEmpty) throw new CorruptManifestException(key, "segment: holds no entries")
    EntryRun(bytes, spans.map(_.start), spans.last.end, spans.map(_.location), spans.head.sequence)
  }

  /** The run of a parsed head's tail. */
  private[format] def tailRun(bytes: Array[Byte], spans: IndexedSeq[ManifestCodec.EntrySpan]): EntryRun =
    EntryRun(bytes, spans.map(_.start), spans.last.end, spans.map(_.location), spans.head.sequence)
}
