package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}
import java.security.MessageDigest

import osqueue.CorruptManifestException

/** An index object a producer is about to store (docs/format.md §2.2): its bytes and what its ref says of them. */
final case class FoldedIndex(bytes: Array[Byte], firstSequence: Long, entryCount: Long, level: Int, oldestBatchMs: Long)

/**
 * Codec of index objects, `<manifestPath>.segments/<ULID>.index` (docs/format.md §2.2): the refs of
 * level `level - 1` a producer folded, back to back as in a head, then `ref_count u32 | level u8 |
 * version u16`. Never rewritten; read only through the ref that lists it, and checked against it.
 */
object IndexObject {
  val Version = 2
  /** ref_count u32 | level u8 | version u16. */
  val FooterSize = 7

  def encode(refs: Seq[SegmentRef], level: Int): Array[Byte] = {
    require(refs.size >= 2 && level >= 1 && level <= ManifestHead.MaxLevel, s"an index of level $level over ${refs.size} refs")
    val body = ManifestHead.encodeRefs(refs)
    ByteBuffer.allocate(body.length + FooterSize).order(ByteOrder.LITTLE_ENDIAN)
      .put(body).putInt(refs.size).put(level.toByte).putShort(Version.toShort).array()
  }

  /** The index object of `refs` (contiguous, all of one level L): level L + 1, their count and oldest batch time. */
  def fold(refs: IndexedSeq[SegmentRef]): FoldedIndex = {
    val level = refs.head.level + 1
    require(refs.forall(_.level == level - 1), "an index lists refs of one level")
    FoldedIndex(encode(refs, level), refs.head.firstSequence, refs.last.lastSequence - refs.head.firstSequence + 1, level,
      refs.iterator.map(_.oldestBatchMs).min)
  }

  /**
   * The refs of an index object read for `ref`, checked to be the one it lists: length, SHA-256,
   * level, at least two refs, contiguous from the ref's first sequence, one level below it, their
   * counts summing to its count and their oldest batch time its (CorruptManifestException naming
   * the index object otherwise).
   */
  def decode(bytes: Array[Byte], ref: SegmentRef): IndexedSeq[SegmentRef] = {
    def corrupt(msg: String) = new CorruptManifestException(ref.key, s"index object: $msg")
    if (!ref.isIndex) throw corrupt("its ref has level 0: a segment, not an index object")
    if (bytes.length.toLong != ref.byteLength)
      throw corrupt(s"${bytes.length} bytes, but its ref lists ${ref.byteLength}")
    if (!MessageDigest.isEqual(ManifestHead.sha256(bytes), ref.sha256)) throw corrupt("its SHA-256 differs from its ref's")
    if (bytes.length < FooterSize) throw corrupt(s"${bytes.length} bytes is shorter than its $FooterSize-byte footer")
    val b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
    val footerAt = bytes.length - FooterSize
    val count = Integer.toUnsignedLong(b.getInt(footerAt))
    val level = java.lang.Byte.toUnsignedInt(b.get(footerAt + 4))
    val version = java.lang.Short.toUnsignedInt(b.getShort(footerAt + 5))
    if (version != Version) throw corrupt(s"version $version, not $Version")
    if (level != ref.level) throw corrupt(s"level $level, but its ref has level ${ref.level}")
    if (count < 2) throw corrupt(s"lists $count refs (an index lists at least 2)")
    val refs = ManifestHead.decodeRefs(bytes, 0, footerAt, count, "ref", ref.key)
    refs.find(_.level != level - 1).foreach { r =>
      throw corrupt(s"lists '${r.key}' of level ${r.level}, not ${level - 1}")
    }
    if (refs.head.firstSequence != ref.firstSequence)
      throw corrupt(s"starts at ${refs.head.firstSequence}, but its ref at ${ref.firstSequence}")
    // contiguous from ref.firstSequence (decodeRefs checked it), so the counts sum to last + 1 - first
    if (refs.last.lastSequence != ref.lastSequence)
      throw corrupt(s"its refs count ${refs.last.lastSequence - ref.firstSequence + 1} entries, but its ref ${ref.entryCount}")
    val oldest = refs.iterator.map(_.oldestBatchMs).min
    if (oldest != ref.oldestBatchMs) throw corrupt(s"its oldest batch time is $oldest, but its ref's ${ref.oldestBatchMs}")
    refs
  }
}
