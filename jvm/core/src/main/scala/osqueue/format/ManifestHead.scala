package osqueue.format

import java.io.ByteArrayOutputStream
import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.{CharacterCodingException, CodingErrorAction, StandardCharsets}
import java.security.MessageDigest
import java.util.Arrays

import osqueue.{CorruptManifestException, InvalidObjectKeyException}
import osqueue.format.ManifestCodec.{EntrySpan, FooterSize}
import osqueue.store.ObjectKeys

/**
 * A ref listed by a segmented head or an index object (docs/format.md §2.2), covering sequences
 * `firstSequence ..= lastSequence`: a segment object (level 0) or an index object listing refs of
 * level `level - 1` (its entry count and oldest batch time are its whole subtree's).
 */
final case class SegmentRef(
    firstSequence: Long,
    entryCount: Long,
    level: Int,
    byteLength: Long,
    /** Smallest ULID time of its locations; Long.MaxValue when none is a ULID batch name. */
    oldestBatchMs: Long,
    sha256: Array[Byte],
    key: String) {
  def lastSequence: Long = firstSequence + entryCount - 1
  def contains(sequence: Long): Boolean = sequence >= firstSequence && sequence <= lastSequence
  def isIndex: Boolean = level > 0

  override def equals(o: Any): Boolean = o match {
    case r: SegmentRef => firstSequence == r.firstSequence && entryCount == r.entryCount && level == r.level &&
      byteLength == r.byteLength && oldestBatchMs == r.oldestBatchMs && Arrays.equals(sha256, r.sha256) && key == r.key
    case _ => false
  }
  override def hashCode(): Int = (firstSequence, entryCount, key).hashCode()
}

object SegmentRef {
  /** The ref of segment bytes a writer is about to store under `key`. */
  def of(s: SealedTail, key: String): SegmentRef =
    SegmentRef(s.firstSequence, s.entryCount, 0, s.bytes.length.toLong, s.oldestBatchMs, ManifestHead.sha256(s.bytes), key)

  /** The ref of an index object a writer is about to store under `key`. */
  def ofIndex(f: FoldedIndex, key: String): SegmentRef =
    SegmentRef(f.firstSequence, f.entryCount, f.level, f.bytes.length.toLong, f.oldestBatchMs, ManifestHead.sha256(f.bytes), key)
}

/** The tail a producer seals: the bytes of the segment object (an RFC v1 manifest of the entries). */
final case class SealedTail(bytes: Array[Byte], firstSequence: Long, entryCount: Long, oldestBatchMs: Long)

/**
 * A manifest object as writers and lazy readers see it: an RFC v1 manifest, or a segmented head
 * (version 2, docs/format.md §2.2) listing refs to segment and index objects before its tail of
 * newest entries. Parsing checks every invariant but decodes no metadata; the edits copy the tail's
 * entries byte for byte, never read a segment, and read an index object only through the callback
 * a dequeue is given (reading what a head lists goes through `osqueue.queue.SegmentTree`).
 */
final class ManifestHead private (
    val raw: Array[Byte],
    val key: String,
    val version: Int,
    val footer: ManifestFooter,
    /** The head's own refs, in order: the first a segment, any other a segment or an index. */
    val refs: IndexedSeq[SegmentRef],
    /** The first queued sequence while refs are listed (sequences below it in the first segment are dequeued). */
    val lowWater: Long,
    /** The typed sections of a version 3 head (docs/format.md §2.3); empty for v1 and v2. */
    val sections: HeadSections,
    tailFrom: Int,
    tailUntil: Int,
    private[format] val tailSpans: IndexedSeq[EntrySpan]) {

  import ManifestHead._

  def nextSequence: Long = footer.nextSequence
  def epoch: Long = footer.epoch
  def isSegmented: Boolean = refs.nonEmpty
  def tailSize: Int = tailSpans.size
  def tailFirstSequence: Long = tailSpans.headOption.map(_.sequence).getOrElse(nextSequence)
  /** The first queued sequence, or `nextSequence` when the queue is empty. */
  def firstSequence: Long = if (isSegmented) lowWater else tailFirstSequence
  def subscription(name: String): Option[Subscription] = sections.subscription(name)

  /** This head with other sections: an append on it writes them (cooperative commit's writers section, §2.3). */
  def withSections(s: HeadSections): ManifestHead = {
    val h = new ManifestHead(raw, key, version, footer, refs, lowWater, s, tailFrom, tailUntil, tailSpans)
    h.sectionsReplaced = true
    h
  }
  /** The sections differ from the ones in `raw` (an append cannot copy raw's prefix). */
  private var sectionsReplaced = false
  /** How many entries are queued. */
  def depth: Long = nextSequence - firstSequence
  def isEmpty: Boolean = depth == 0

  def tailLocations: IndexedSeq[(Long, String)] = tailSpans.map(s => (s.sequence, s.location))
  def tailEntries: IndexedSeq[ManifestEntry] = ManifestCodec.readEntries(raw, key, tailSpans)
  def tailLocationAt(sequence: Long): Option[String] = {
    val i = sequence - tailFirstSequence
    if (i >= 0 && i < tailSpans.size) Some(tailSpans(i.toInt).location) else None
  }

  /** The oldest ULID time of any referenced batch: tail entries and refs, an index's being its subtree's (GC's rule 3, §6). */
  def oldestReferencedBatchMs: Option[Long] =
    (tailSpans.flatMap(s => BatchNames.ulidTimeMs(s.location)) ++
      refs.map(_.oldestBatchMs).filter(_ != Long.MaxValue)).reduceOption(_ min _)

  /**
   * Appends `entries` at `nextSequence`. When the tail would exceed `maxTail` (K) entries, the
   * current tail is sealed first, in chunks of exactly K entries aligned on `align` (default: the
   * tail's first sequence; `SegmentChunks`): `sealAll` (default: `seal` one by one) must store them
   * and return their refs (a reused object may start below the tail's first sequence when a dequeue
   * took part of it since), and the new entries become the whole tail. After each new ref the refs are
   * folded with fan-out `fanout(maxTail)`: while the last F refs have one level and the first ref is
   * not among them, `fold` must store them as an index object and return its ref, which replaces
   * them. With `readSegment` (the checked bytes of a ref), a segment ref of more than 2K entries is
   * replaced by its chunks too. Returns the bytes and the first new sequence.
   */
  def appended(entries: Seq[NewEntry], maxTail: Int, seal: SealedTail => SegmentRef,
      fold: FoldedIndex => SegmentRef): (Array[Byte], Long) = appended(entries, maxTail, seal, fold, None, None, None)

  /** [[appended]] with the chunks stored by `sealAll`, oversized segments split (`readSegment`) and `align`. */
  def appended(entries: Seq[NewEntry], maxTail: Int, seal: SealedTail => SegmentRef,
      fold: FoldedIndex => SegmentRef,
      sealAll: Option[IndexedSeq[SealedTail] => IndexedSeq[SegmentRef]],
      readSegment: Option[SegmentRef => Array[Byte]],
      align: Option[Long]): (Array[Byte], Long) = {
    if (tailSpans.size.toLong + entries.size > 0xFFFFFFFFL)
      throw new CorruptManifestException(key, "entry_count would overflow u32")
    if (footer.nextSequence > Long.MaxValue - entries.size)
      throw new CorruptManifestException(key, s"sequence space exhausted: next_sequence ${footer.nextSequence} + ${entries.size}")
    val base = footer.nextSequence
    val sections = withAddedBytes(this.sections, entries) // queued_bytes (§2.3): the new entries' byte_length
    val added = new ByteArrayOutputStream(entries.size * 128)
    entries.zipWithIndex.foreach { case (e, i) => ManifestCodec.encodeEntry(added, base + i, e.location, e.metadata, e.extension) }
    val next = footer.copy(nextSequence = base + entries.size)
    val putAll = sealAll.getOrElse((tails: IndexedSeq[SealedTail]) => tails.map(seal))
    val current = readSegment.fold(refs)(read => resplit(maxTail, putAll, fold, read))
    if (tailSpans.isEmpty || tailSpans.size.toLong + entries.size <= maxTail) {
      val out = new ByteArrayOutputStream(raw.length + added.size())
      if ((current eq refs) && (sections eq this.sections) && !sectionsReplaced) out.write(raw, 0, tailUntil)
      else {
        if (!sections.isEmpty) out.write(HeadSections.encode(sections))
        out.write(encodeRefs(current))
        out.write(raw, tailFrom, tailUntil - tailFrom)
      }
      added.writeTo(out)
      val newTail = tailSpans.size + entries.size
      out.write(tailEnd(sections, current, if (isSegmented) lowWater else tailFirstSequence, next.copy(entryCount = newTail)))
      (finish(out.toByteArray, sections), base)
    } else {
      val first = tailSpans.head.sequence
      val chunks = SegmentChunks.cutChunks(SegmentChunks.tailRun(raw, tailSpans), maxTail, align.filter(_ <= first).getOrElse(first))
      val sealedRefs = putAll(chunks.map(_.sealedTail))
      var folded = current
      chunks.zip(sealedRefs).foreach { case (c, ref) =>
        // Only the first chunk of a v1 tail may be a reused object that starts below it (low_water inside).
        if (ref.lastSequence != c.lastSequence ||
          !(ref.firstSequence == c.firstSequence || (folded.isEmpty && ref.firstSequence < c.firstSequence)))
          throw new CorruptManifestException(ref.key, s"sealed as ${c.firstSequence} to ${c.lastSequence}, not as listed")
        folded = foldRefs(folded :+ ref, fanout(maxTail), fold)
      }
      val out = new ByteArrayOutputStream(added.size() + folded.size * 128 + 64)
      if (!sections.isEmpty) out.write(HeadSections.encode(sections))
      out.write(encodeRefs(folded))
      added.writeTo(out)
      out.write(tailEnd(sections, folded, if (isSegmented) lowWater else first, next.copy(entryCount = entries.size)))
      (finish(out.toByteArray, sections), base)
    }
  }

  /**
   * The refs with every segment of more than 2K entries replaced by its chunks (those wholly below
   * `lowWater` left out), folded among themselves; `refs` itself when there is none.
   */
  private def resplit(k: Int, putAll: IndexedSeq[SealedTail] => IndexedSeq[SegmentRef], fold: FoldedIndex => SegmentRef,
      read: SegmentRef => Array[Byte]): IndexedSeq[SegmentRef] = {
    def oversized(r: SegmentRef) = r.level == 0 && r.entryCount > 2L * k
    if (!refs.exists(oversized)) refs
    else refs.flatMap { r =>
      if (!oversized(r)) IndexedSeq(r)
      else {
        val chunks = SegmentChunks.cutChunks(SegmentChunks.segmentRun(read(r), r.key), k, r.firstSequence, lowWater)
        putAll(chunks.map(_.sealedTail)).foldLeft(IndexedSeq.empty[SegmentRef])((part, ref) => foldRefs(part :+ ref, fanout(k), fold))
      }
    }
  }

  /**
   * Removes sequences `<= through`; None when nothing would be removed (no write needed).
   * `children` reads an index object the dequeue reaches (checked against its ref), to expand it.
   */
  def dequeuedThrough(through: Long, children: SegmentRef => IndexedSeq[SegmentRef]): Option[Array[Byte]] =
    if (through < firstSequence || isEmpty) None else Some(rebuild(footer.epoch, through, children, sections))

  /** Sets the epoch and, optionally, dequeues through a sequence, in one edit. */
  def withEpoch(epoch: Long, through: Option[Long], children: SegmentRef => IndexedSeq[SegmentRef]): Array[Byte] =
    rebuild(epoch, through.getOrElse(firstSequence - 1), children, sections)

  /**
   * The readers' edit of docs/format.md §2.3 (ADR 0005): writes `newSections` and `epoch`, and moves
   * the first retained sequence to `L = min(next of every reader record)` (never back; with no
   * reader record, where it is), removing the entries below it as a dequeue does. Sections left
   * empty write a v2 head (refs) or an RFC v1 manifest, byte for byte what those writers write.
   */
  def withReaders(epoch: Long, newSections: HeadSections, children: SegmentRef => IndexedSeq[SegmentRef],
      cut: Boolean = true, removedBytes: Option[(Long, Long) => Long] = None): Array[Byte] =
    rebuild(epoch, (if (cut) lowWaterFor(newSections) else firstSequence) - 1, children, newSections, removedBytes)

  /**
   * A retention cut (docs/format.md §2.3, `osqueue.queue.QueueRetention`): removes the sequences `<= through`
   * (never past `nextSequence`), keeping the epoch and the sections, whose `queued_bytes` loses what leaves
   * (`removedBytes(start, end)` sums it). Returns the bytes and how many entries it removed.
   */
  def cutThrough(through: Long, children: SegmentRef => IndexedSeq[SegmentRef],
      removedBytes: (Long, Long) => Long): (Array[Byte], Long) = {
    val removed = math.max(0L, math.min(through + 1, nextSequence) - firstSequence)
    (rebuild(footer.epoch, through, children, sections, Some(removedBytes)), removed)
  }

  /** `L` of ADR 0005 (without retention) under `s`: the slowest reader record's `next`, never below the first entry. */
  def lowWaterFor(s: HeadSections): Long = s.slowestNext.fold(firstSequence)(n => math.max(firstSequence, math.min(n, nextSequence)))

  /**
   * `removedBytes(start, end)`: Σ byte_length of the entries in `[start, end)` (their integrity records), which
   * a cut subtracts from a retention section's `queued_bytes` (§2.3); needed when that section is there.
   */
  private def rebuild(epoch: Long, through: Long, children: SegmentRef => IndexedSeq[SegmentRef],
      sectionsIn: HeadSections, removedBytes: Option[(Long, Long) => Long] = None): Array[Byte] = {
    val newFirst = math.min(math.max(firstSequence, through + 1), nextSequence)
    val newSections = sectionsIn.retention match {
      case Some(r) if newFirst > firstSequence =>
        val gone = removedBytes.getOrElse(throw new CorruptManifestException(key,
            "a cut of a head with retention needs the removed entries' bytes"))(firstSequence, newFirst)
        sectionsIn.copy(retention = Some(r.copy(queuedBytes = math.max(0L, r.queuedBytes - gone))))
      case _ => sectionsIn
    }
    var kept = refs.dropWhile(_.lastSequence < newFirst)
    // The first ref must be a segment: expand the index the dequeue reached, level by level (§2.2).
    while (kept.nonEmpty && kept.head.isIndex) kept = children(kept.head).dropWhile(_.lastSequence < newFirst) ++ kept.tail
    val keptTail = tailSpans.dropWhile(_.sequence < newFirst)
    val cut = keptTail.headOption.map(_.start).getOrElse(tailUntil)
    val out = new ByteArrayOutputStream(raw.length)
    if (!newSections.isEmpty) out.write(HeadSections.encode(newSections))
    if (kept.nonEmpty) out.write(encodeRefs(kept))
    out.write(raw, cut, tailUntil - cut)
    out.write(tailEnd(newSections, kept, newFirst, footer.copy(entryCount = keptTail.size, epoch = epoch)))
    finish(out.toByteArray, newSections)
  }
}

object ManifestHead {
  val Version = 2
  /** segments_len u32 | segment_count u32 | low_water u64, before the footer of a segmented head. */
  val TrailerSize = 16
  /** The deepest level a ref may have (an index of level 32 covers more than 2^64 entries at the least fan-out). */
  val MaxLevel = 32
  /**
   * K: a producer seals its tail when an append would push it past this many entries. A queue
   * that never holds more stays RFC v1; `Int.MaxValue` keeps every queue v1 (for RFC v1 readers).
   */
  val DefaultSegmentEntries: Int = 2048
  /** first u64 | entry_count u64 | level u8 | byte_length u32 | oldest_batch_ms i64 | sha256 | key_len u16. */
  val RefFixedSize: Int = 8 + 8 + 1 + 4 + 8 + 32 + 2

  /**
   * F, the refs a writer with segment size `k` folds into one index object: `max(2, k / 32)`, so
   * the refs a head holds weigh a few percent of its tail. A writer's choice: readers accept any tree.
   */
  def fanout(k: Int): Int = math.max(2, k / 32)

  /** An entry's `byte_length` per its integrity record (§2.1 type 3); 0 without one. */
  def entryByteLength(extension: Array[Byte]): Long = BatchIntegrity.of(extension).fold(0L)(_.byteLength)

  /** `s` with the new entries' `byte_length` added to `queued_bytes` (with a retention section; else `s` itself). */
  def withAddedBytes(s: HeadSections, entries: Seq[NewEntry]): HeadSections = s.retention match {
    case Some(r) => s.copy(retention = Some(r.copy(queuedBytes = r.queuedBytes + entries.map(e => entryByteLength(e.extension)).sum)))
    case None => s
  }

  /** Folds the last `f` refs into an index while they share a level and the first ref is not among them. */
  private def foldRefs(refs: IndexedSeq[SegmentRef], f: Int, fold: FoldedIndex => SegmentRef): IndexedSeq[SegmentRef] = {
    var out = refs
    var level = refs.last.level
    while (out.size > f && level < MaxLevel && out.takeRight(f).forall(_.level == level)) {
      out = out.dropRight(f) :+ fold(IndexObject.fold(out.takeRight(f)))
      level += 1
    }
    out
  }

  /** Parses a manifest object (v1 or a v2 head) and checks every invariant of §2 and §2.2. */
  def parse(raw: Array[Byte], key: String): ManifestHead = {
    val (footer, version) = ManifestCodec.decodeAnyFooter(raw, key)
    def corrupt(msg: String) = new CorruptManifestException(key, msg)
    if (version == ManifestCodec.Version) {
      val spans = ManifestCodec.scanSpans(raw, key, footer)
      return new ManifestHead(raw, key, version, footer, IndexedSeq.empty, 0L, HeadSections.Empty, 0, raw.length - FooterSize,
        spans)
    }
    if (version == HeadSections.Version) return parseV3(raw, key, footer)
    if (raw.length < FooterSize + TrailerSize)
      throw corrupt(s"${raw.length} bytes is shorter than a segmented head's trailer and footer")
    val b = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN)
    val trailerAt = raw.length - FooterSize - TrailerSize
    val segmentsLen = Integer.toUnsignedLong(b.getInt(trailerAt))
    val count = Integer.toUnsignedLong(b.getInt(trailerAt + 4))
    val lowWater = b.getLong(trailerAt + 8)
    if (segmentsLen > trailerAt) throw corrupt(s"segments_len $segmentsLen runs past the head")
    if (count == 0) throw corrupt("a version 2 head lists no segment (a head without segments is version 1)")
    val refs = decodeRefs(raw, 0, segmentsLen.toInt, count, "segment ref", key)
    val spans = ManifestCodec.scanSpans(raw, key, footer, segmentsLen.toInt, trailerAt)
    checkRefsAndTail(refs, lowWater, spans, footer, key)
    new ManifestHead(raw, key, version, footer, refs, lowWater, HeadSections.Empty, segmentsLen.toInt, trailerAt, spans)
  }

  /** The refs and the tail of a segmented head agree (§2.2): the first ref is a segment holding `lowWater`, and the tail starts where the last ref ends. */
  private def checkRefsAndTail(refs: IndexedSeq[SegmentRef], lowWater: Long, spans: IndexedSeq[EntrySpan],
      footer: ManifestFooter, key: String): Unit = {
    def corrupt(msg: String) = new CorruptManifestException(key, msg)
    if (refs.head.isIndex)
      throw corrupt(s"its first ref is an index object of level ${refs.head.level} ('${refs.head.key}'), not a segment")
    if (!refs.head.contains(lowWater))
      throw corrupt(s"low_water $lowWater is not in the first segment (${refs.head.firstSequence} to ${refs.head.lastSequence})")
    val segmentsEnd = refs.last.lastSequence + 1
    spans.headOption match {
      case Some(s) if s.sequence != segmentsEnd =>
        throw corrupt(s"the tail starts at ${s.sequence}, not where the last segment ends ($segmentsEnd)")
      case None if segmentsEnd != footer.nextSequence =>
        throw corrupt(s"the segments end at ${segmentsEnd - 1} but next_sequence is ${footer.nextSequence}")
      case _ =>
    }
  }

  /** A version 3 head (docs/format.md §2.3): sections, refs (0 allowed), tail, 28-byte trailer with the CRC, footer. */
  private def parseV3(raw: Array[Byte], key: String, footer: ManifestFooter): ManifestHead = {
    def corrupt(msg: String) = new CorruptManifestException(key, msg)
    if (raw.length < FooterSize + HeadSections.TrailerSize)
      throw corrupt(s"${raw.length} bytes is shorter than a version 3 head's trailer and footer")
    val b = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN)
    val trailerAt = raw.length - FooterSize - HeadSections.TrailerSize
    val crcAt = trailerAt + 24
    val crc = Integer.toUnsignedLong(b.getInt(crcAt))
    val actual = HeadSections.headCrc32(raw, crcAt)
    if (crc != actual) throw corrupt(f"head_crc32 is 0x$crc%08x but the head's bytes give 0x$actual%08x")
    val sectionsLen = Integer.toUnsignedLong(b.getInt(trailerAt))
    val sectionCount = Integer.toUnsignedLong(b.getInt(trailerAt + 4))
    val segmentsLen = Integer.toUnsignedLong(b.getInt(trailerAt + 8))
    val count = Integer.toUnsignedLong(b.getInt(trailerAt + 12))
    val lowWater = b.getLong(trailerAt + 16)
    if (sectionsLen > trailerAt) throw corrupt(s"sections_len $sectionsLen runs past the head")
    if (segmentsLen > trailerAt - sectionsLen) throw corrupt(s"segments_len $segmentsLen runs past the head")
    val sections = HeadSections.decode(raw, 0, sectionsLen.toInt, sectionCount, key)
    if (sections.isEmpty && count == 0)
      throw corrupt("a version 3 head with neither a section nor a segment (it is written as version 1)")
    val refsFrom = sectionsLen.toInt
    val refs = if (count == 0) {
      if (segmentsLen != 0) throw corrupt(s"segment_count is 0 but segments_len is $segmentsLen")
      IndexedSeq.empty[SegmentRef]
    } else decodeRefs(raw, refsFrom, segmentsLen.toInt, count, "segment ref", key)
    val tailFrom = refsFrom + segmentsLen.toInt
    val spans = ManifestCodec.scanSpans(raw, key, footer, tailFrom, trailerAt)
    if (refs.nonEmpty) checkRefsAndTail(refs, lowWater, spans, footer, key)
    else {
      val first = spans.headOption.map(_.sequence).getOrElse(footer.nextSequence)
      if (lowWater != first) throw corrupt(s"low_water $lowWater is not the tail's first sequence $first (no segments)")
    }
    (sections.subscriptions.map(s => (s"subscription '${s.name}'", s.next)) ++
      sections.unnamedReader.map(u => ("the unnamed reader", u.next))).foreach { case (who, next) =>
      if (next < 0 || next > footer.nextSequence)
        throw corrupt(s"$who has next $next, past next_sequence ${footer.nextSequence}")
    }
    new ManifestHead(raw, key, HeadSections.Version, footer, refs, lowWater, sections, tailFrom, trailerAt, spans)
  }

  /**
   * `count` refs filling `raw[from, from + len)` exactly, contiguous, each with a valid key, at
   * least one entry and a level of at most [[MaxLevel]] (a head's refs, or an index object's);
   * CorruptManifestException naming `key` otherwise. `what` names a ref in messages.
   */
  def decodeRefs(raw: Array[Byte], from: Int, len: Int, count: Long, what: String, key: String): IndexedSeq[SegmentRef] = {
    def corrupt(msg: String) = new CorruptManifestException(key, msg)
    if (count > len / RefFixedSize) throw corrupt(s"$count refs cannot fit in $len bytes of refs")
    val b = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN)
    val refs = IndexedSeq.newBuilder[SegmentRef]
    val end = from + len
    var pos = from
    var expectedFirst = -1L
    for (i <- 0L until count) {
      if (end - pos < RefFixedSize) throw corrupt(s"$what $i runs past the refs region")
      val first = b.getLong(pos)
      val n = b.getLong(pos + 8)
      val level = java.lang.Byte.toUnsignedInt(b.get(pos + 16))
      val byteLength = Integer.toUnsignedLong(b.getInt(pos + 17))
      val oldest = b.getLong(pos + 21)
      val sha = Arrays.copyOfRange(raw, pos + 29, pos + 61)
      val keyLen = java.lang.Short.toUnsignedInt(b.getShort(pos + 61))
      pos += RefFixedSize
      if (keyLen > end - pos) throw corrupt(s"$what $i: its key runs past the refs region")
      val refKey = utf8(raw, pos, keyLen).getOrElse(throw corrupt(s"$what $i: key is not valid UTF-8"))
      try ObjectKeys.validate(refKey)
      catch { case e: InvalidObjectKeyException => throw corrupt(s"$what $i: ${e.getMessage}") }
      pos += keyLen
      if (n == 0) throw corrupt(s"$what $i ('$refKey') has no entries")
      if (n < 0 || first < 0 || first > Long.MaxValue - n) throw corrupt(s"$what $i ('$refKey'): sequences out of range")
      if (level > MaxLevel) throw corrupt(s"$what $i ('$refKey') has level $level, above the most $MaxLevel")
      if (expectedFirst >= 0 && first != expectedFirst)
        throw corrupt(s"$what $i starts at $first, not at $expectedFirst (refs must be contiguous)")
      expectedFirst = first + n
      refs += SegmentRef(first, n, level, byteLength, oldest, sha, refKey)
    }
    if (pos != end) throw corrupt(s"${end - pos} unexpected bytes after the last $what")
    refs.result()
  }

  /**
   * Decodes a segment object read for `ref`, checking it is the one the head listed: its length,
   * SHA-256 and sequences (CorruptManifestException naming the segment otherwise).
   */
  def decodeSegment(bytes: Array[Byte], ref: SegmentRef): IndexedSeq[ManifestEntry] = {
    def corrupt(msg: String) = new CorruptManifestException(ref.key, s"segment: $msg")
    if (ref.isIndex) throw corrupt(s"its ref has level ${ref.level}: an index object, not a segment")
    if (bytes.length.toLong != ref.byteLength)
      throw corrupt(s"${bytes.length} bytes, but the head lists ${ref.byteLength}")
    if (!MessageDigest.isEqual(sha256(bytes), ref.sha256)) throw corrupt("its SHA-256 differs from the head's ref")
    val m = ManifestCodec.decode(bytes, ref.key)
    if (m.entries.size.toLong != ref.entryCount || m.firstSequence != ref.firstSequence)
      throw corrupt(
        s"holds ${m.entries.size} entries from ${m.firstSequence}, but the head lists ${ref.entryCount} from ${ref.firstSequence}")
    m.entries
  }

  def sha256(bytes: Array[Byte]): Array[Byte] = MessageDigest.getInstance("SHA-256").digest(bytes)

  def encodeRefs(refs: Seq[SegmentRef]): Array[Byte] = {
    val out = new ByteArrayOutputStream(refs.size * 128)
    refs.foreach { r =>
      val k = r.key.getBytes(StandardCharsets.UTF_8)
      require(r.sha256.length == 32 && k.length <= 0xFFFF && r.byteLength <= 0xFFFFFFFFL && r.level >= 0 &&
        r.level <= MaxLevel)
      val b = ByteBuffer.allocate(RefFixedSize + k.length).order(ByteOrder.LITTLE_ENDIAN)
      b.putLong(r.firstSequence).putLong(r.entryCount).put(r.level.toByte).putInt(r.byteLength.toInt)
        .putLong(r.oldestBatchMs).put(r.sha256).putShort(k.length.toShort).put(k)
      out.write(b.array())
    }
    out.toByteArray
  }

  /**
   * What follows the tail: the v1 footer (no refs, no sections), or the version 3 trailer and
   * footer, its CRC left 0 for [[finish]] to fill in. A segmented head without sections is version
   * 3 too (docs/adr/0006 item 3: every segmented head carries head_crc32); version 2 is read only.
   */
  private def tailEnd(sections: HeadSections, refs: Seq[SegmentRef], lowWater: Long, footer: ManifestFooter): Array[Byte] = {
    val refsLen = refs.iterator.map(r => RefFixedSize + r.key.getBytes(StandardCharsets.UTF_8).length).sum
    if (!sections.isEmpty || refs.nonEmpty) {
      val sectionsLen = if (sections.isEmpty) 0 else HeadSections.encode(sections).length
      ByteBuffer.allocate(HeadSections.TrailerSize + FooterSize).order(ByteOrder.LITTLE_ENDIAN)
        .putInt(sectionsLen).putInt(HeadSections.sectionCount(sections)).putInt(refsLen).putInt(refs.size)
        .putLong(lowWater).putInt(0).put(ManifestCodec.encodeFooter(footer, HeadSections.Version)).array()
    } else ManifestCodec.encodeFooter(footer)
  }

  /** A version 3 head's bytes with head_crc32 filled in; a v1 manifest as it is. */
  private def finish(bytes: Array[Byte], sections: HeadSections): Array[Byte] = {
    val version = (bytes(bytes.length - 2) & 0xFF) | ((bytes(bytes.length - 1) & 0xFF) << 8)
    if (version == HeadSections.Version) {
      val crcAt = bytes.length - FooterSize - 4
      ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).putInt(crcAt, HeadSections.headCrc32(bytes, crcAt).toInt)
    }
    bytes
  }

  private def utf8(bytes: Array[Byte], offset: Int, len: Int): Option[String] =
    try Some(StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT).onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(bytes, offset, len)).toString)
    catch { case _: CharacterCodingException => None }
}
