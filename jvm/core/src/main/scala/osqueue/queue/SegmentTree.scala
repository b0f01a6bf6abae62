package osqueue.queue

import scala.annotation.tailrec

import osqueue.CorruptManifestException
import osqueue.format.{IndexObject, ManifestHead, SegmentRef}

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
}

object SegmentTree {
  /** Decoded index objects kept: more than the deepest path (33 levels), each < 64 refs at the default K. */
  val CachedIndexes = 64
}
