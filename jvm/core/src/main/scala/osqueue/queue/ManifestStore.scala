package osqueue.queue

import java.util.concurrent.{CompletableFuture, CompletionException, Executors}

import osqueue.CorruptManifestException
import osqueue.format.{
  DequeueReceipts,
  FoldedIndex,
  IndexObject,
  Incarnation,
  Manifest,
  ManifestCodec,
  ManifestEntry,
  ManifestHead,
  SealedTail,
  SegmentNames,
  SegmentRef
}
import osqueue.store.{CasOutcome, ObjectStore, ObjectVersion}

/** A manifest's head with the version it was read at (None: there was no manifest). */
final case class VersionedManifest(head: ManifestHead, version: Option[ObjectVersion])

/**
 * The one manifest object of a queue and the objects it lists: a [[CasObject]] (a missing
 * manifest reads as the empty one) with the manifest's codec, segments, index objects and the
 * receipts and incarnation beside it.
 */
final class ManifestStore(val store: ObjectStore, val key: String) {
  /** The manifest as a CAS register: what [[CasLoop]]s run the manifest's edits on. */
  val casObject: CasObject = new CasObject(store, key, ManifestCodec.EmptyBytes)

  def read(): Snapshot = casObject.read()

  /** The manifest unless it is still at version `known` (None then: a conditional read, no bytes). */
  def readIfChanged(known: ObjectVersion): Option[Snapshot] = casObject.readIfChanged(known)

  /** A missing manifest is created only if still absent; an existing one only if unchanged. */
  def write(bytes: Array[Byte], basedOn: Snapshot): CasOutcome = casObject.write(bytes, basedOn)

  /**
   * Every queued entry, reading every segment the head reaches (a v1 manifest: just decoded). Memory
   * grows with the queue; the segments are fetched [[ManifestStore.ParallelReads]] at a time, so a
   * deep queue costs ~segments / 8 round trips rather than one per segment (and one per index object).
   */
  def decode(s: Snapshot): Manifest = {
    val head = ManifestHead.parse(s.raw, key)
    if (head.version == ManifestCodec.Version) ManifestCodec.decode(s.raw, key)
    else if (!head.isSegmented) Manifest(head.tailEntries, head.nextSequence, head.epoch) // a v3 head without refs
    else {
      val leaves = new SegmentTree(this).leaves(head, head.lowWater, head.tailFirstSequence)
      val sealedEntries = leaves.grouped(ManifestStore.ParallelReads).flatMap { refs =>
        refs.map(r => CompletableFuture.supplyAsync(() => readSegment(r), ManifestStore.readers)).map { f =>
          try f.join()
          catch { case e: CompletionException if e.getCause != null => throw e.getCause }
        }
      }.flatten.filter(_.sequence >= head.lowWater).toIndexedSeq
      Manifest(sealedEntries ++ head.tailEntries, head.nextSequence, head.epoch)
    }
  }

  def head(s: Snapshot): ManifestHead = ManifestHead.parse(s.raw, key)

  /** A listed segment's entries, checked against its ref; CorruptManifestException if it is missing or differs. */
  def readSegment(ref: SegmentRef): IndexedSeq[ManifestEntry] =
    ManifestHead.decodeSegment(readSegmentBytes(ref).getOrElse(throw new CorruptManifestException(ref.key,
          s"segment of '$describe' (sequences ${ref.firstSequence} to ${ref.lastSequence}) is listed but missing")), ref)

  /** The segment's bytes, None if it is gone (a reader racing the dequeue that dropped it, and GC). */
  def readSegmentBytes(ref: SegmentRef): Option[Array[Byte]] = store.getBytes(ref.key)

  /** An index object's bytes, None if it is gone (as [[readSegmentBytes]]). */
  def readIndexBytes(ref: SegmentRef): Option[Array[Byte]] = store.getBytes(ref.key)

  /** A listed index object's refs, checked against its ref; CorruptManifestException if it is missing or differs. */
  def readIndex(ref: SegmentRef): IndexedSeq[SegmentRef] =
    IndexObject.decode(readIndexBytes(ref).getOrElse(throw new CorruptManifestException(ref.key,
          s"index object of '$describe' (sequences ${ref.firstSequence} to ${ref.lastSequence}) is listed but missing")), ref)

  /** Stores folded refs under a fresh index object name (before any head lists it, docs/format.md §2.2). */
  def writeIndex(folded: FoldedIndex, nowMs: Long): SegmentRef = {
    val ref = SegmentRef.ofIndex(folded, SegmentNames.newIndexKey(key, nowMs))
    store.put(ref.key, folded.bytes)
    ref
  }

  /**
   * Stores sealed chunks as segments, [[osqueue.format.SegmentChunks.ParallelPuts]] at a time, each named
   * right before its PUT; `started(i)` is called as chunk `i`'s PUT starts. The refs, in order.
   */
  def writeSegments(tails: IndexedSeq[SealedTail], nowMs: () => Long, started: Int => Unit): IndexedSeq[SegmentRef] =
    if (tails.size <= 1) tails.indices.map { i => started(i); writeSegment(tails(i), nowMs()) }
    else tails.indices.map { i =>
      CompletableFuture.supplyAsync(() => { started(i); writeSegment(tails(i), nowMs()) }, ManifestStore.writers)
    }.map { f =>
      try f.join()
      catch { case e: CompletionException if e.getCause != null => throw e.getCause }
    }

  /** Stores a sealed tail under a fresh segment name (before any head lists it, docs/format.md §2.2). */
  def writeSegment(sealedTail: SealedTail, nowMs: Long): SegmentRef = {
    val ref = SegmentRef.of(sealedTail, SegmentNames.newKey(key, nowMs))
    store.put(ref.key, sealedTail.bytes)
    ref
  }

  /** `<manifest>.dequeued`: the dequeue receipts (docs/format.md §5.1). */
  val receiptsKey: String = key + DequeueReceipts.Suffix

  /** The receipts; None when absent or not receipts v1. Throws StoreException. */
  def readReceipts(): Option[DequeueReceipts] = store.get(receiptsKey).flatMap(o => DequeueReceipts.decode(o.bytes))

  def writeReceipts(r: DequeueReceipts): Unit = store.put(receiptsKey, r.encode)

  /** `<manifest>.incarnation`: the incarnation the last consumer initialized (docs/format.md §5.2). */
  val incarnationKey: String = key + Incarnation.Suffix

  /** The recorded incarnation; None when absent or not a decimal number. Throws StoreException. */
  def readRecordedIncarnation(): Option[Long] = store.get(incarnationKey).flatMap { o =>
    val text = new String(o.bytes, java.nio.charset.StandardCharsets.US_ASCII).trim
    if (text.nonEmpty && text.length <= 19 && text.forall(_.isDigit)) Some(text.toLong) else None
  }

  def recordIncarnation(incarnation: Long): Unit =
    store.put(incarnationKey, incarnation.toString.getBytes(java.nio.charset.StandardCharsets.US_ASCII))

  /** Where the manifest lives, for messages. */
  def describe: String = casObject.describe
}

object ManifestStore {
  /** Segment GETs in flight at once when a whole segmented manifest is read. */
  val ParallelReads = 8
  private lazy val readers = Executors.newFixedThreadPool(ParallelReads,
    { r =>
      val t = new Thread(r, "osqueue-segment-reader"); t.setDaemon(true); t
    })
  private lazy val writers = Executors.newFixedThreadPool(osqueue.format.SegmentChunks.ParallelPuts,
    { r =>
      val t = new Thread(r, "osqueue-segment-writer"); t.setDaemon(true); t
    })
}
