package osqueue.queue

import scala.annotation.tailrec

import osqueue.CorruptManifestException
import osqueue.format.{Incarnation, IndexObject, ManifestEntry, ManifestHead, SegmentRef}

/**
 * The one walk of a segmented head's tree (docs/format.md §2.2): the segments covering a range,
 * the segment holding a sequence, and (for GC) every object reachable from a head. It reads index
 * objects, lazily and at most one per level at a time, and never a segment. Index objects are
 * immutable, so decoded ones are kept by key (the [[SegmentTree.CachedIndexes]] used last): a
 * consumer's dequeue expands from the copy its reads walked. A cached copy is used only for a ref
 * with the same SHA-256, so a ref is always checked against the bytes it names, cached or not.
 */
final class SegmentTree(manifest: ManifestStore, cachedIndexes: Int = SegmentTree.CachedIndexes) {
  /** key -> (the SHA-256 its refs were decoded from and checked against, the refs). */
  private val cache = new java.util.LinkedHashMap[String, (Array[Byte], IndexedSeq[SegmentRef])](16, 0.75f, true) {
    override def removeEldestEntry(e: java.util.Map.Entry[String, (Array[Byte], IndexedSeq[SegmentRef])]): Boolean =
      size() > cachedIndexes
  }

  /** The refs an index object lists, checked against `ref`; CorruptManifestException if it is missing or differs. */
  def children(ref: SegmentRef): IndexedSeq[SegmentRef] =
    childrenIfPresent(ref).getOrElse(throw new CorruptManifestException(ref.key,
        s"index object of '${manifest.describe}' (sequences ${ref.firstSequence} to ${ref.lastSequence}) is listed but missing"))

  private def childrenIfPresent(ref: SegmentRef): Option[IndexedSeq[SegmentRef]] = {
    val cached = cache.synchronized(Option(cache.get(ref.key)))
      .collect { case (sha, refs) if java.util.Arrays.equals(sha, ref.sha256) => refs }
    cached.orElse {
      manifest.readIndexBytes(ref).map { bytes =>
        val refs = IndexObject.decode(bytes, ref)
        cache.synchronized(cache.put(ref.key, (ref.sha256.clone(), refs)))
        refs
      }
    }
  }

  /** The segments (level 0 refs) covering sequences [from, until), in order; index objects are read as reached. */
  def leaves(head: ManifestHead, from: Long, until: Long): Iterator[SegmentRef] = {
    def under(refs: Iterator[SegmentRef]): Iterator[SegmentRef] =
      refs.dropWhile(_.lastSequence < from).takeWhile(_.firstSequence < until).flatMap { r =>
        if (r.isIndex) under(children(r).iterator) else Iterator.single(r)
      }
    if (from >= until) Iterator.empty else under(head.refs.iterator)
  }

  /** The segment holding `sequence` (dequeued ones below `lowWater` included); None if no ref covers it. */
  def leafFor(head: ManifestHead, sequence: Long): Option[SegmentRef] = find(head.refs, sequence, r => Some(children(r)))

  /**
   * [[leafFor]], but None also when an index object on the way is gone (dropped by a dequeue since
   * the head was read, and collected): a producer resolving a write then asks the receipts.
   */
  def leafIfPresent(head: ManifestHead, sequence: Long): Option[SegmentRef] =
    find(head.refs, sequence, childrenIfPresent)

  @tailrec private def find(refs: IndexedSeq[SegmentRef], sequence: Long,
      load: SegmentRef => Option[IndexedSeq[SegmentRef]]): Option[SegmentRef] =
    refs.find(_.contains(sequence)) match {
      case Some(r) if r.isIndex =>
        load(r) match {
          case Some(below) => find(below, sequence, load)
          case None => None
        }
      case found => found
    }

  /**
   * The keys of every segment and index object reachable from `head` (its refs, and the refs of
   * every index object reachable from it), reading index objects only; Left(key) of an index object
   * that is missing (GC then deletes no segment or index object, docs/format.md §2.2).
   */
  def reachableKeys(head: ManifestHead): Either[String, Set[String]] = {
    val keys = Set.newBuilder[String]
    var pending = head.refs.toList
    while (pending.nonEmpty) {
      val r = pending.head
      pending = pending.tail
      keys += r.key
      if (r.isIndex) childrenIfPresent(r) match {
        case Some(below) => pending = below.toList ++ pending
        case None => return Left(r.key)
      }
    }
    Right(keys.result())
  }

  /**
   * [[leaves]] for a reader that does not own the queue while a consumer dequeues: an index object on
   * the way that is gone throws [[SegmentTree.Gone]] (judged by [[afterMissing]]) instead of
   * CorruptManifestException.
   */
  def leavesOrGone(head: ManifestHead, from: Long, until: Long): Iterator[SegmentRef] = {
    def under(refs: Iterator[SegmentRef]): Iterator[SegmentRef] =
      refs.dropWhile(_.lastSequence < from).takeWhile(_.firstSequence < until).flatMap { r =>
        if (r.isIndex) under(childrenIfPresent(r).getOrElse(throw new SegmentTree.Gone(r)).iterator)
        else Iterator.single(r)
      }
    if (from >= until) Iterator.empty else under(head.refs.iterator)
  }

  /**
   * Σ `byte_length` of the entries in `[start, end)` per their integrity records (0 for one without): what a cut
   * removes from `queued_bytes` (docs/format.md §2.3). Reads the segments holding such entries (one GET each).
   */
  def bytesBetween(head: ManifestHead, start: Long, end: Long): Long = {
    val inSegments = leaves(head, start, math.min(end, head.tailFirstSequence)).map { leaf =>
      manifest.readSegment(leaf).iterator.filter(e => e.sequence >= start && e.sequence < end)
        .map(e => ManifestHead.entryByteLength(e.extension)).sum
    }.sum
    val inTail = if (end <= head.tailFirstSequence) 0L
    else head.tailEntries.iterator.filter(e => e.sequence >= start && e.sequence < end)
      .map(e => ManifestHead.entryByteLength(e.extension)).sum
    inSegments + inTail
  }

  /** A segment's entries, checked against its ref; [[SegmentTree.Gone]] if it is missing (see [[leavesOrGone]]). */
  def readSegmentOrGone(ref: SegmentRef): IndexedSeq[ManifestEntry] =
    ManifestHead.decodeSegment(manifest.readSegmentBytes(ref).getOrElse(throw new SegmentTree.Gone(ref)), ref)

  /**
   * The queued entries from `from` on, segment by segment and then the tail, for a reader that does not
   * own the queue: a segment or index object `head` listed that is gone is judged by [[afterMissing]],
   * and the walk goes on from the head it returns at the next sequence not yet returned (it ends where
   * that returns None). CorruptManifestException if the head read again still lists it.
   */
  def entriesFollowing(head: ManifestHead, from: Long, reread: Long => Option[ManifestHead]): Iterator[ManifestEntry] =
    new Iterator[ManifestEntry] {
      private var current = head
      private var position = math.max(from, head.firstSequence)
      private var sealedPart: Iterator[ManifestEntry] = walk(head)
      private var inTail = false
      private var ended = false

      private def walk(h: ManifestHead): Iterator[ManifestEntry] = leavesOrGone(h, position, h.tailFirstSequence)
        .flatMap(r => readSegmentOrGone(r).iterator.filter(_.sequence >= position))

      override def hasNext: Boolean = {
        while (!ended && !ready()) {}
        !ended && sealedPart.hasNext
      }

      /** True once `sealedPart` is settled (an entry, or the tail); on a gone object, moves to the head read again. */
      private def ready(): Boolean =
        try {
          if (!inTail && !sealedPart.hasNext) {
            inTail = true
            sealedPart = current.tailEntries.iterator.filter(_.sequence >= position)
          }
          true
        } catch {
          case gone: SegmentTree.Gone =>
            afterMissing(current, gone.ref, position, reread) match {
              case Some(again) =>
                current = again
                position = math.max(position, again.firstSequence)
                sealedPart = walk(again)
              case None => ended = true
            }
            false
        }

      override def next(): ManifestEntry = {
        if (!hasNext) throw new NoSuchElementException("no more entries")
        val e = sealedPart.next()
        position = e.sequence + 1
        e
      }
    }

  /**
   * The one rule for a segment or index object that `head` listed and a reader found missing. The head
   * is read again (`reread(position)`: it throws the fence error for a reader that took the queue over
   * and sees another epoch, or returns None to stop). If that head still reaches the object for the
   * sequences from `position` on, the queue is corrupt (CorruptManifestException). Otherwise a
   * consumer's dequeue dropped it (or expanded the index object) since `head` was read and GC collected
   * it: the benign race, and the reader goes on from the returned head. None also when the queue was
   * reset (another incarnation): nothing more of the queue `head` belonged to can be read.
   */
  def afterMissing(head: ManifestHead, gone: SegmentRef, position: Long,
      reread: Long => Option[ManifestHead]): Option[ManifestHead] =
    reread(position).filter(again => Incarnation.of(again.epoch) == Incarnation.of(head.epoch)).map { again =>
      if (reaches(again, gone.key, math.max(position, again.firstSequence), gone.lastSequence + 1)) {
        val what = if (gone.isIndex) "index object" else "segment"
        throw new CorruptManifestException(gone.key,
          s"$what of '${manifest.describe}' (sequences ${gone.firstSequence} to ${gone.lastSequence}) is listed but missing")
      }
      again
    }

  /** Whether `head`'s walk over [from, until) passes through `key` (index objects gone too are skipped). */
  private def reaches(head: ManifestHead, key: String, from: Long, until: Long): Boolean = {
    def inRange(r: SegmentRef) = r.lastSequence >= from && r.firstSequence < until
    var pending = head.refs.filter(inRange).toList
    while (pending.nonEmpty) {
      val r = pending.head
      pending = pending.tail
      if (r.key == key) return true
      if (r.isIndex) pending = childrenIfPresent(r).fold(pending)(_.filter(inRange).toList ++ pending)
    }
    false
  }
}

object SegmentTree {
  /** A segment or index object a head listed is gone: internal to the walks that judge it ([[SegmentTree.afterMissing]]). */
  final class Gone(val ref: SegmentRef) extends RuntimeException(ref.key, null, false, false)
  /** Decoded index objects kept: more than the deepest path (33 levels), each < 64 refs at the default K. */
  val CachedIndexes = 64
}
