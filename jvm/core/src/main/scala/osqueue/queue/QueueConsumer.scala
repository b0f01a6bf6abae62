package osqueue.queue

import org.slf4j.LoggerFactory

import osqueue.{
  Clock,
  FencedException,
  IllegalQueueStateException,
  RandomSource,
  ResumePointException,
  StoreException,
  SystemRandomSource
}
import osqueue.format.{
  DequeueReceipts,
  HeadSections,
  Incarnation,
  Manifest,
  ManifestCodec,
  ManifestEdits,
  ManifestEntry,
  ManifestHead,
  SegmentRef,
  Subscription,
  UnnamedReader
}
import osqueue.metrics.{MetricNames, MetricsRegistry}

/**
 * The consumer side of the queue protocol: `initialize` bumps the manifest epoch (fencing any
 * earlier consumer) and every later read or dequeue checks it. Writes are CAS against the
 * version read, so a fenced consumer's write can never land.
 */
final class QueueConsumer(manifest: ManifestStore, policy: RetryPolicy, clock: Clock, metrics: MetricsRegistry,
    random: RandomSource = SystemRandomSource,
    /** A named subscription (ADR 0005): its record's epoch fences, its `next` moves; None: the RFC's unnamed consumer. */
    val subscription: Option[String] = None,
    /** Create the subscription (at the queue's first entry) when `initialize` finds none. */
    createSubscription: Boolean = false) {
  subscription.foreach(Subscriptions.validate)
  private val log = LoggerFactory.getLogger(classOf[QueueConsumer])
  private val loop = new CasLoop(manifest.casObject, policy, clock, CasCounters.manifest(metrics, "consumer"), random)
  @volatile private var epoch: Option[Long] = None
  /** The fence once seen: a fenced consumer stays fenced (a newer consumer owns the queue for good). */
  @volatile private var fencedBy: Option[FencedException] = None
  private var receipts: Option[DequeueReceipts] = None
  private val receiptWriteFailures = metrics.counter(MetricNames.ReceiptWriteFailures)

  /** The walk of a segmented head's index objects: this consumer's reads and its dequeues' expansions share its copies. */
  val segmentTree: SegmentTree = new SegmentTree(manifest)

  def ownEpoch: Option[Long] = epoch
  @volatile private var readerNextSeen: Option[Long] = None

  /**
   * Where this reader's record said to read from after `initialize` (a subscription's `next`, or
   * the unnamed reader's on a version 3 head); None on a v1/v2 queue (read from its first entry).
   */
  def readerNext: Option[Long] = readerNextSeen
  def fenced: Option[FencedException] = fencedBy
  def manifestKey: String = manifest.key

  /** The incarnation of the manifest this consumer owns (docs/format.md §5.2); None before `initialize`. */
  def ownIncarnation: Option[Long] = epoch.map(Incarnation.of)

  /**
   * Takes over the queue: epoch + 1, and entries `<= lastAcked` dequeued in the same write.
   * A resume point the queue cannot honour raises [[ResumePointException]] (docs/format.md §5):
   * also one of another incarnation of the manifest (`incarnation` given, or else the one the last
   * consumer recorded in `<manifest>.incarnation`; no record: not checked), i.e. the queue was reset.
   */
  def initialize(lastAcked: Option[Long], incarnation: Option[Long] = None): Long = {
    if (incarnation.isDefined && lastAcked.isEmpty)
      throw new IllegalArgumentException("an incarnation is only meaningful with a resume point")
    if (subscription.isDefined) return initializeSubscription(subscription.get, lastAcked, incarnation)
    val recorded = manifest.readRecordedIncarnation()
    val newEpoch = loop.run[Long] { (snapshot, _) =>
      // After an unknown outcome we bump again rather than guess: fencing our own earlier try is harmless.
      // A missing manifest is created as a new incarnation.
      val raw = if (snapshot.version.isEmpty) Incarnation.newEmptyManifest() else snapshot.raw
      val head = ManifestHead.parse(raw, manifest.key)
      lastAcked.foreach { l =>
        checkIncarnation(l, incarnation, recorded, Incarnation.of(head.epoch), snapshot.version.isEmpty)
        checkResumePoint(l, head.firstSequence, head.nextSequence)
      }
      val next = QueueConsumer.nextEpoch(head.epoch)
      if (!head.sections.isEmpty) {
        // The unnamed reader's record on a head with sections (ADR 0005): created by its first takeover.
        val own = head.sections.unnamedReader.map(_.next).getOrElse(head.firstSequence)
        val reader = UnnamedReader(math.max(own, lastAcked.fold(own)(_ + 1)), clock.nowMillis())
        val sections = head.sections.copy(unnamedReader = Some(reader))
        val l = head.lowWaterFor(sections)
        if (l > head.firstSequence) recordReceipts(head, l - 1)
        CasStep.Write(head.withReaders(next, sections, segmentTree.children, removedBytes = Some(segmentTree.bytesBetween(head, _, _))),
          () => { readerNextSeen = Some(reader.next); next })
      } else {
        lastAcked.foreach(recordReceipts(head, _))
        CasStep.Write(head.withEpoch(next, lastAcked, segmentTree.children), () => { readerNextSeen = None; next })
      }
    }
    epoch = Some(newEpoch)
    fencedBy = None
    if (!recorded.contains(Incarnation.of(newEpoch)))
      try manifest.recordIncarnation(Incarnation.of(newEpoch))
      catch { // only weakens the check of resume points given without an incarnation
        case e: StoreException =>
          log.warn(s"could not record the incarnation of '${manifest.describe}': ${e.getMessage}")
      }
    newEpoch
  }

  private def checkIncarnation(lastAcked: Long, given: Option[Long], recorded: Option[Long], current: Long,
      missing: Boolean): Unit = {
    given.filter(_ != current).foreach { g =>
      throw new ResumePointException(
        s"resume point $lastAcked belongs to incarnation $g of '${manifest.describe}', but the manifest is incarnation " +
          s"$current${if (missing) " (missing, so it would be created anew)" else ""}: the queue was reset or recreated " +
          "since, and its entries are not the ones this resume point acknowledged")
    }
    if (given.isEmpty) recorded.filter(_ != current).foreach { r =>
      throw new ResumePointException(
        s"resume point $lastAcked was given without an incarnation, and '${manifest.describe}' was reset or recreated " +
          s"since the last consumer ran (recorded incarnation $r, manifest incarnation $current" +
          s"${if (missing) ", missing" else ""}); pass the incarnation the resume point belongs to, or start without " +
          "a resume point to read the new queue from its first entry")
    }
  }

  /**
   * Every queued entry, after checking this consumer still owns the queue. A segmented head's
   * segments are all read: memory grows with the queue (use [[readHead]], [[segmentTree]] and [[readSegment]]).
   */
  def read(): Manifest = {
    val snapshot = manifest.read()
    checkHead(manifest.head(snapshot))
    manifest.decode(snapshot)
  }

  /**
   * [[read]], unless the manifest is still at the version of `known` (read by this consumer): then
   * `known` itself, after one conditional read that transfers no bytes (and reads no segment).
   */
  def readUnlessAt(known: Option[VersionedManifest]): VersionedManifest = {
    val snapshot = known.flatMap(_.version) match {
      case Some(v) => manifest.readIfChanged(v) match {
          case None => return known.get // the same bytes: the epoch checked when they were read still holds
          case Some(s) => s
        }
      case None => manifest.read()
    }
    val head = manifest.head(snapshot)
    checkHead(head)
    VersionedManifest(head, snapshot.version)
  }

  /** The manifest head (tail entries and its refs, no segment or index object read), after the epoch check. */
  def readHead(): ManifestHead = {
    val head = manifest.head(manifest.read())
    checkHead(head)
    head
  }

  /** A listed segment's entries (the last two read are kept: a consumer reads one, then dequeues it). */
  def readSegment(ref: SegmentRef): IndexedSeq[ManifestEntry] = segmentCache.synchronized {
    Option(segmentCache.get(ref.key)).getOrElse {
      val entries = manifest.readSegment(ref)
      segmentCache.put(ref.key, entries)
      entries
    }
  }

  private val segmentCache = new java.util.LinkedHashMap[String, IndexedSeq[ManifestEntry]](4, 0.75f, true) {
    override def removeEldestEntry(e: java.util.Map.Entry[String, IndexedSeq[ManifestEntry]]): Boolean = size() > 2
  }

  /**
   * Removes entries `<= through` in one write; returns false (and writes nothing) if none are left.
   * The receipts are written once, before the CAS loop reads the manifest it edits: written inside
   * each attempt they put a PUT between the read and the conditional write, and a producer
   * appending every few tens of milliseconds won that window nearly every round. Re-applied on
   * whatever newer manifest a conflict brings (a dequeue only moves the start forward), the edit
   * then wins within a round or two.
   */
  def dequeueThrough(through: Long): Boolean = {
    // A failed first read is left to the loop's retries; the receipts are then written in its first attempt.
    val before =
      try Some(manifest.head(manifest.read()))
      catch { case _: StoreException => None }
    before.foreach { h => checkHead(h); checkAssigned(through, h) }
    if (before.exists(h => through < h.firstSequence || h.isEmpty)) return false // nothing to remove
    var receiptsWritten = false
    // On a head with sections what leaves is decided by every reader's record: its receipts are written in the attempt.
    before.filter(_.sections.isEmpty).foreach { h => recordReceipts(h, through); receiptsWritten = true }
    loop.run[Boolean] { (snapshot, _) =>
      val head = manifest.head(snapshot)
      checkHead(head)
      checkAssigned(through, head)
      readerEdit(head, through) match {
        case None => CasStep.Done(false)
        case Some((bytes, removedThrough)) =>
          if (!receiptsWritten && removedThrough >= head.firstSequence) { recordReceipts(head, removedThrough); receiptsWritten = true }
          CasStep.Write(bytes, () => true)
      }
    }
  }

  /**
   * The dequeue through `through` on `head`: on a head without sections (v1, v2, or a v3 of refs
   * only: docs/adr/0006 item 3) it removes entries as the RFC does; on a head with sections it moves this reader's record (the subscription's, or the unnamed reader's)
   * and removes what every reader has passed (ADR 0005). None: nothing to write; else the bytes and
   * the last sequence they remove.
   */
  private def readerEdit(head: ManifestHead, through: Long): Option[(Array[Byte], Long)] = {
    val now = clock.nowMillis()
    def moved(sections: HeadSections) =
      (head.withReaders(head.epoch, sections, segmentTree.children, removedBytes = Some(segmentTree.bytesBetween(head, _, _))),
        head.lowWaterFor(sections) - 1)
    subscription match {
      case Some(name) =>
        val r = head.subscription(name).get // checkHead found it
        if (r.next > through) None
        else Some(moved(head.sections.withSubscription(r.copy(next = through + 1, lastAckMs = now))))
      case None if !head.sections.isEmpty =>
        val own = head.sections.unnamedReader.map(_.next).getOrElse(head.firstSequence)
        if (own > through) None
        else Some(moved(head.sections.copy(unnamedReader = Some(UnnamedReader(through + 1, now)))))
      case None => head.dequeuedThrough(through, segmentTree.children).map(b => (b, through))
    }
  }

  /** [[initialize]] for a named subscription: its record's epoch + 1, its `next` moved past the resume point. */
  private def initializeSubscription(name: String, lastAcked: Option[Long], incarnation: Option[Long]): Long = {
    val newIncarnation = 1L + random.nextInt(Int.MaxValue - 1)
    val newEpoch = loop.run[Long] { (snapshot, _) =>
      // After an unknown outcome we bump again rather than guess: fencing our own earlier try is harmless.
      val raw = if (snapshot.version.isEmpty) {
        if (!createSubscription) throw noSubscription(name)
        Incarnation.newEmptyManifest()
      } else snapshot.raw
      val head = ManifestHead.parse(raw, manifest.key)
      val now = clock.nowMillis()
      val record = head.subscription(name).getOrElse {
        if (!createSubscription) throw noSubscription(name)
        Subscription(name, newIncarnation << 32, head.firstSequence, now, now)
      }
      lastAcked.foreach { l =>
        incarnation.filter(_ != record.incarnation).foreach { g =>
          throw new ResumePointException(
            s"resume point $l belongs to incarnation $g of subscription '$name' of '${manifest.describe}', but the " +
              s"subscription is incarnation ${record.incarnation}: it was dropped and recreated since")
        }
        if (l >= head.nextSequence)
          throw new ResumePointException(
            s"resume point $l is ahead of the queue '${manifest.describe}' (next sequence is ${head.nextSequence}): " +
              "it belongs to another queue, or this queue was recreated")
      }
      val next = math.max(record.next, lastAcked.fold(record.next)(_ + 1))
      val updated = record.copy(epoch = Subscriptions.nextEpoch(record.epoch), next = next)
      val sections = Subscriptions.turningV3(head).withSubscription(updated)
      val l = head.lowWaterFor(sections)
      if (l > head.firstSequence) recordReceipts(head, l - 1)
      CasStep.Write(head.withReaders(head.epoch, sections, segmentTree.children, removedBytes = Some(segmentTree.bytesBetween(head, _, _))),
        () => {
          readerNextSeen = Some(updated.next); updated.epoch
        })
    }
    epoch = Some(newEpoch)
    fencedBy = None
    newEpoch
  }

  private def noSubscription(name: String) = new IllegalQueueStateException(
    s"no subscription '$name' on '${manifest.describe}': create it first, or set createSubscription")

  private def checkAssigned(through: Long, head: ManifestHead): Unit =
    if (through >= head.nextSequence)
      throw new IllegalQueueStateException(
        s"cannot dequeue through $through: the queue '${manifest.describe}' has only assigned up to ${head.nextSequence - 1}")

  /** The last receipts' worth of (sequence, location) a dequeue through `through` removes, from segments and tail. */
  private def removedLocations(head: ManifestHead, through: Long): IndexedSeq[(Long, String)] = {
    val last = math.min(through, head.nextSequence - 1)
    val from = math.max(head.firstSequence, last - DequeueReceipts.MaxReceipts + 1)
    if (last < from) IndexedSeq.empty
    else {
      val sealedPart = segmentTree.leaves(head, from, last + 1).flatMap { r =>
        readSegment(r).iterator.filter(e => e.sequence >= from && e.sequence <= last).map(e => (e.sequence, e.location))
      }.toIndexedSeq
      sealedPart ++ head.tailLocations.filter { case (seq, _) => seq >= from && seq <= last }
    }
  }

  /**
   * Before a dequeue: which location held each sequence it removes (docs/format.md §5.1), so a
   * producer whose write had an unknown outcome can still tell whether it landed. Best effort:
   * without receipts such a producer reports AmbiguousCommitException.
   */
  private def recordReceipts(head: ManifestHead, through: Long): Unit = synchronized {
    lazy val removed = removedLocations(head, through)
    if (through >= head.firstSequence && removed.nonEmpty)
      try {
        val updated = receipts.orElse(manifest.readReceipts()).getOrElse(DequeueReceipts())
          .extended(removed, Some(Incarnation.of(head.epoch)))
        manifest.writeReceipts(updated)
        receipts = Some(updated)
      } catch {
        case e: StoreException =>
          receiptWriteFailures.increment()
          log.warn(s"could not write the dequeue receipts of '${manifest.describe}': ${e.getMessage}")
      }
  }

  /** This consumer still owns its reader: the footer's epoch, or its subscription's record (gone: fenced). */
  private def checkHead(head: ManifestHead): Unit = subscription match {
    case None => checkEpoch(head.epoch)
    case Some(name) => head.subscription(name) match {
        case Some(r) => checkEpoch(r.epoch)
        case None if epoch.isEmpty => checkEpoch(0L)
        case None =>
          val e = new FencedException(epoch.get, -1L, s"subscription '$name' was dropped")
          fencedBy = Some(e)
          throw e
      }
  }

  private def checkEpoch(current: Long): Unit = epoch match {
    case None => throw new IllegalQueueStateException("consumer is not initialized: call initialize() first")
    case Some(own) if own != current =>
      val e = new FencedException(own, current)
      fencedBy = Some(e)
      throw e
    case _ =>
  }

  private def checkResumePoint(lastAcked: Long, first: Long, next: Long): Unit = {
    if (lastAcked >= next)
      throw new ResumePointException(
        s"resume point $lastAcked is ahead of the queue '${manifest.describe}' (next sequence is $next): " +
          "it belongs to another queue, or this queue was recreated")
    if (lastAcked + 1 < first)
      throw new ResumePointException(
        s"resume point $lastAcked is behind the queue '${manifest.describe}': entries ${lastAcked + 1} to ${first - 1} " +
          "were removed by another consumer before being delivered here (data loss)")
  }
}

object QueueConsumer {
  /** epoch + 1, wrapping past 2^64 - 2 to 0 and never taking 2^64 - 1 (an uninitialized marker). */
  def nextEpoch(epoch: Long): Long = {
    val n = epoch + 1
    if (n == -1L) 0L else n
  }
}
