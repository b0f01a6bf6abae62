package osqueue.queue

import scala.collection.mutable
import scala.collection.mutable.ArrayBuffer

import osqueue.{AmbiguousCommitException, Clock, CorruptManifestException, RandomSource, StoreException, SystemRandomSource}
import osqueue.format.{
  BatchNames,
  HeadSections,
  Incarnation,
  ManifestCodec,
  ManifestEntry,
  ManifestHead,
  NewEntry,
  SealedTail,
  SegmentRef,
  WriterSequence
}
import osqueue.metrics.{MetricNames, MetricsRegistry}

/**
 * Appends a group of locations to the manifest as consecutive entries in ONE compare-and-swap
 * write, in the caller's thread. Ambiguous outcomes are resolved by re-reading the manifest and
 * looking for our own locations (docs/format.md §5), so an entry is never appended twice; stale
 * uploads are re-uploaded before a write (§6), so GC cannot have deleted anything this appends.
 * `beforeWrite` runs before every write attempt and may throw to stop the append (the Spark
 * sink checks there that its writer generation is still current).
 *
 * When the tail would grow past `segmentEntries` (K) entries, the write first seals it into a
 * segment object and folds the refs into index objects, so the head it rewrites stays bounded at
 * any depth (docs/format.md §2.2).
 *
 * A queue's size caps (docs/format.md §2.3, [[QueueRetention]]) are applied in the same CAS step: under
 * `backpressure` an append past a cap writes nothing and throws QueueFullException, tried again every
 * `queueFullWait.retryIntervalMs` up to its timeout; under `drop_oldest` the write also cuts the oldest
 * entries (never the new ones) until the caps hold.
 */
final class ManifestAppender(
    manifest: ManifestStore,
    policy: RetryPolicy,
    clock: Clock,
    metrics: MetricsRegistry,
    gcGracePeriodMs: Long,
    role: String = "producer",
    beforeWrite: () => Unit = () => (),
    random: RandomSource = SystemRandomSource,
    segmentEntries: Int = ManifestHead.DefaultSegmentEntries,
    private[queue] val queueFullWait: QueueFullWait = QueueFullWait(),
    commitMode: String = CooperativeCommit.Solo,
    writerId: Option[String] = None) {

  // A lone producer appends against its own last write: one request per flush (CasLoop).
  private val loop = new CasLoop(manifest.casObject, policy, clock, CasCounters.manifest(metrics, role), random,
    reuseOwnWrite = true)
  private val reuploaded = metrics.counter(MetricNames.BatchesReuploaded)
  private val resolvedByReceipts = metrics.counter(MetricNames.AmbiguitiesResolvedByReceipts)
  private val segmentsSealed = metrics.counter(MetricNames.SegmentsSealed)
  private val segmentsResplit = metrics.counter(MetricNames.SegmentsResplit)
  private[queue] val tree = new SegmentTree(manifest)

  /** Cooperative commit (docs/adr/0007 part 1): the writer id is 16 random bytes drawn at start. */
  private[queue] val cooperative: Option[CooperativeCommitter] =
    if (commitMode != CooperativeCommit.Cooperative) None
    else Some(new CooperativeCommitter(this, manifest, policy, clock, metrics, random, role,
        writerId.getOrElse {
          val id = new Array[Byte](WriterSequence.WriterIdLen); random.nextBytes(id); WriterSequence.hex(id)
        }))

  import ManifestAppender.{Attempt, SealState}

  /** Data prefixes proven to be this queue's, with the queue's grace period (Long.MaxValue: no record yet). */
  private val claimed = new java.util.concurrent.ConcurrentHashMap[String, java.lang.Long]()

  private def prefixOf(location: String): Option[String] = {
    val slash = location.lastIndexOf('/')
    if (slash > 0) Some(location.substring(0, slash)) else None
  }

  /**
   * Refuses to enqueue into a data prefix another queue owns, and learns the queue's grace period.
   * Only checked: producers and GC create the record (docs/format.md §6).
   */
  private[queue] def checkPrefixes(group: IndexedSeq[PendingLocation]): Unit = group.flatMap(p => prefixOf(p.location)).foreach { prefix =>
    if (!claimed.containsKey(prefix)) {
      val owner = DataPrefixOwner.claim(manifest.store, manifest.key, prefix, clock, None, policy)
      claimed.put(prefix, owner.fold(Long.MaxValue)(_.gcGracePeriodMs))
    }
  }

  /** Half the grace period: ours, or the queue's if shorter (what GC uses). */
  private def maxAgeMs(location: String): Long =
    math.min(gcGracePeriodMs, prefixOf(location).flatMap(p => Option(claimed.get(p))).fold(Long.MaxValue)(_.longValue)) / 2

  /** The same for a segment or index object: the shortest grace period known (GC of them uses the queue's, §2.2). */
  private[queue] def segmentMaxAgeMs: Long = {
    var min = gcGracePeriodMs
    claimed.values().forEach(g => min = math.min(min, g.longValue))
    min / 2
  }

  /**
   * The head with `group` appended, sealing the tail and folding refs as needed (docs/format.md
   * §2.2). The segment and index objects are written right before the head CAS that lists them; if
   * the first of their PUTs started half a grace period ago (slow PUTs, by this clock's monotonic
   * time) GC could delete it before it is listed, so the edit is made again under fresh names, as
   * stale batches are (§6); the objects left behind are orphans for GC. The batches are checked
   * again too: slow PUTs age them as well. Cooperative commit passes the head's new `sections`, the
   * group's entries with their writer sequences (`tagged`) and other writers' announced entries
   * (`extra`), appended after the group.
   */
  private[queue] def appendedFresh(headIn: ManifestHead, group: IndexedSeq[PendingLocation],
      state: SealState = new SealState, sections: Option[HeadSections] = None,
      tagged: Option[() => IndexedSeq[NewEntry]] = None, extra: Seq[NewEntry] = Seq.empty): (Array[Byte], Long) = {
    val head = sections.fold(headIn)(headIn.withSections)
    var tries = 0
    val maxAge = segmentMaxAgeMs
    while (true) {
      refreshStaleUploads(group)
      val entries = tagged.fold(group.map(p => NewEntry(p.location, p.metadata, p.extension)))(_()) ++ extra
      val putStarts = new java.util.concurrent.ConcurrentLinkedQueue[java.lang.Long]()
      def putStarted(): Unit = putStarts.add(clock.nanoTime())
      // A retry of a v1 seal keeps its chunk boundaries (ADR 0007), so it can reuse its chunks.
      val align = state.align.filter { case (a, end) => !head.isSegmented && a <= head.firstSequence && head.firstSequence < end }
        .map(_._1)
      val result = head.appended(entries, segmentEntries,
        { t =>
          segmentsSealed.increment()
          putStarted(); manifest.writeSegment(t, clock.nowMillis())
        },
        { f =>
          putStarted(); manifest.writeIndex(f, clock.nowMillis())
        },
        Some((tails: IndexedSeq[SealedTail]) => sealAll(tails, state, maxAge, putStarts)),
        Some((ref: SegmentRef) => readOversized(ref, state)), align)
      if (!head.isSegmented && head.tailSize > 0 && head.tailSize.toLong + entries.size > segmentEntries)
        state.align = Some((align.getOrElse(head.firstSequence), head.nextSequence))
      var oldest = Long.MaxValue
      putStarts.forEach(t => oldest = math.min(oldest, t.longValue))
      if ((putStarts.isEmpty || elapsedMs(oldest) < maxAge) && !group.exists(isStale)) return result
      state.stored.clear()
      tries += 1
      if (tries > ManifestAppender.MaxReuploads)
        throw new StoreException(
          s"'${manifest.describe}': ${tries} seals or folds in a row took longer than half the GC grace period " +
            s"($maxAge ms); increase the GC grace period or make writes faster")
    }
    throw new IllegalStateException("unreachable")
  }

  /**
   * Stores chunks as segments, 8 at a time. A chunk this append already stored (an attempt before a
   * conflict) is reused while fresh: entries never change once appended, so its bytes are still right; a
   * first chunk a dequeue took part of since is reused too (low_water then falls inside it).
   */
  private def sealAll(tails: IndexedSeq[SealedTail], state: SealState, maxAge: Long,
      putStarts: java.util.Queue[java.lang.Long]): IndexedSeq[SegmentRef] = {
    def suffix(a: Array[Byte], b: Array[Byte]): Boolean = {
      val n = b.length - ManifestCodec.FooterSize
      val off = a.length - ManifestCodec.FooterSize - n
      off >= 0 && java.util.Arrays.equals(a, off, off + n, b, 0, n)
    }
    val reused: IndexedSeq[Option[SegmentRef]] = tails.zipWithIndex.map { case (t, i) =>
      state.stored.get(t.firstSequence + t.entryCount - 1).collect {
        case (old, ref, started)
            if elapsedMs(started) < maxAge && (java.util.Arrays.equals(old.bytes, t.bytes) ||
              (i == 0 && old.firstSequence < t.firstSequence && suffix(old.bytes, t.bytes))) =>
          putStarts.add(started); ref
      }
    }
    val todo = tails.indices.filter(reused(_).isEmpty)
    val starts = new Array[Long](tails.size)
    val written = manifest.writeSegments(todo.map(tails), () => clock.nowMillis(),
      { j =>
        val now = clock.nanoTime(); starts(todo(j)) = now; putStarts.add(now); segmentsSealed.increment()
      })
    todo.zip(written).foreach { case (i, ref) => state.stored(ref.lastSequence) = (tails(i), ref, starts(i)) }
    val byIndex = todo.zip(written).toMap
    tails.indices.map(i => reused(i).getOrElse(byIndex(i)))
  }

  /** An oversized segment's bytes, checked against its ref (once per append), to be split into chunks. */
  private def readOversized(ref: SegmentRef, state: SealState): Array[Byte] = state.read.getOrElseUpdate(ref.key, {
      val bytes = manifest.readSegmentBytes(ref).getOrElse(throw new CorruptManifestException(ref.key,
          s"segment of '${manifest.describe}' is listed but missing"))
      if (bytes.length.toLong != ref.byteLength || !java.util.Arrays.equals(ManifestHead.sha256(bytes), ref.sha256))
        throw new CorruptManifestException(ref.key, "segment: its length or SHA-256 differs from the head's ref")
      segmentsResplit.increment()
      bytes
    })

  /**
   * A CAS that only seals (`osqueue seal`): a tail of more than K entries into segments of K, and
   * segments of more than 2K entries into their chunks (docs/format.md §2.2). Returns how many entries
   * it moved (0: nothing to seal, nothing written). Sealing never changes what is queued, so a write of
   * unknown outcome is simply tried again on what the head then holds.
   */
  def seal(): Long = {
    val state = new SealState
    val k = segmentEntries.toLong
    loop.run[Long]({ (snapshot, _) =>
        if (snapshot.version.isEmpty) CasStep.Done(0L)
        else {
          val head = ManifestHead.parse(snapshot.raw, manifest.key)
          val moved = head.refs.filter(r => r.level == 0 && r.entryCount > 2 * k).map(_.entryCount).sum +
            (if (head.tailSize > k) head.tailSize.toLong else 0L)
          if (moved == 0) CasStep.Done(0L)
          else CasStep.Write(appendedFresh(head, IndexedSeq.empty, state)._1, () => moved)
        }
      }, None)
  }

  /**
   * Appends the group now, in one write in the calling thread (a producer spool's uploader). `prior`:
   * (base, locations) of earlier writes of this group whose outcome is unknown (a spool's ATTEMPT
   * records, possibly of a process that died; each carried the whole group), resolved as §5 does before
   * anything is written again, so a write that landed is found, never appended twice. `onAttempt` is
   * told (base, locations) right before each CAS is sent (the spool records it). Returns the entries'
   * sequences; each `p.location` is the location that landed.
   */
  def commitMany(group: IndexedSeq[PendingLocation], prior: Seq[(Long, IndexedSeq[String])],
      onAttempt: (Long, IndexedSeq[String]) => Unit): IndexedSeq[Long] = append(group, prior, onAttempt)

  def append(group: IndexedSeq[PendingLocation]): IndexedSeq[Long] = cooperative match {
    case Some(c) => c.commit(group)
    case None => append(group, Seq.empty, (_, _) => ())
  }

  private def append(group: IndexedSeq[PendingLocation], prior: Seq[(Long, IndexedSeq[String])],
      onAttempt: (Long, IndexedSeq[String]) => Unit): IndexedSeq[Long] = {
    checkPrefixes(group)
    val sealState = new SealState
    val attempts = ArrayBuffer.empty[Attempt]
    prior.foreach { case (base, locations) => attempts += new Attempt(base, locations, true, None) }
    var lastSent: Option[(Long, IndexedSeq[String], Option[Long])] = None
    /** Records how the last sent write ended, once (the loop may report it to more than one callback). */
    def register(previous: Option[PreviousAttempt]): Unit = (previous, lastSent) match {
      case (Some(p), Some((base, locs, incarnation))) =>
        attempts += new Attempt(base, locs, p.isInstanceOf[PreviousAttempt.Unknown], incarnation)
        lastSent = None
      case _ =>
    }
    /** An earlier write landed: the group's locations are the ones it carried (a re-upload since is an orphan). */
    def landedIn(snapshot: Snapshot): Option[IndexedSeq[Long]] = resolve(snapshot, attempts.toSeq).map {
      case (a, sequences) =>
        group.zip(a.locations).foreach { case (p, l) => p.location = l }
        sequences
    }
    val settle = new Settle[IndexedSeq[Long]] {
      def landed(snapshot: Snapshot, previous: Option[PreviousAttempt]): Option[IndexedSeq[Long]] = {
        register(previous); landedIn(snapshot)
      }
      def stillUnknown(previous: Option[PreviousAttempt]): Option[String] = {
        register(previous)
        attempts.find(a => a.unknownOutcome && !a.resolvedNotLanded)
          .map(a => s"a write of ${a.locations.size} entries at sequence ${a.base}")
      }
    }
    def attempt(): IndexedSeq[Long] = loop.run[IndexedSeq[Long]]({ (snapshot, previous) =>
        register(previous)
        landedIn(snapshot) match {
          case Some(sequences) => CasStep.Done(sequences)
          case None =>
            beforeWrite()
            // Creating the manifest starts a new incarnation (docs/format.md §5.2).
            val raw = if (snapshot.version.isEmpty) Incarnation.newEmptyManifest() else snapshot.raw
            val parsed = ManifestHead.parse(raw, manifest.key)
            // Size caps (§2.3): only a head with a retention section pays for them (a parse of the new head).
            val retention = parsed.sections.retention
            if (retention.isDefined)
              QueueRetention.checkRoom(parsed, group.size.toLong, group.map(p => ManifestHead.entryByteLength(p.extension)).sum)
            val (appended, base) = appendedFresh(parsed, group, sealState)
            val cut =
              if (retention.exists(_.policy == osqueue.format.Retention.DropOldest))
                QueueRetention.dropOldest(appended, manifest, base, tree)
              else None
            val bytes = cut.fold(appended)(_.raw)
            // A create is judged against whichever incarnation it finds: it made that one if it landed.
            val incarnation = if (snapshot.version.isEmpty) None else Some(Incarnation.of(ManifestHead.parse(raw, manifest.key).epoch))
            lastSent = Some((base, group.map(_.location), incarnation))
            onAttempt(base, group.map(_.location))
            CasStep.Write(bytes, () => { cut.foreach(_.count(metrics)); base until base + group.size })
        }
      }, Some(settle))
    queueFullWait.run(() => attempt(), clock, metrics)
  }

  /**
   * Did one of our earlier writes land? Some((that write, its sequences)) if so; None if none is
   * known to have (safe to write again: a conditional write on the current version cannot
   * duplicate one still in flight, which could only land on the version it was sent against);
   * AmbiguousCommit if a write with an unknown outcome can no longer be checked.
   *
   * A write lands as one block at the base it was sent with (a retry is an attempt of its own), so
   * it landed iff its location sits at the first of its sequences still queued: in the tail, or in
   * the segment it was sealed into since (one segment read, and the index objects above it if it
   * was folded since, docs/format.md §2.2).
   */
  private def resolve(snapshot: Snapshot, attempts: Seq[Attempt]): Option[(Attempt, IndexedSeq[Long])] = {
    if (attempts.isEmpty) return None
    val head = ManifestHead.parse(snapshot.raw, manifest.key)
    val segments = mutable.Map.empty[String, Option[IndexedSeq[ManifestEntry]]]
    /** The location at a queued sequence; None if its segment (or an index above it) is gone (dropped by a dequeue since: ask the receipts). */
    def locationAt(sequence: Long): Option[String] = head.tailLocationAt(sequence).orElse(
      tree.leafIfPresent(head, sequence).flatMap { ref =>
        segments.getOrElseUpdate(ref.key, manifest.readSegmentBytes(ref).map(ManifestHead.decodeSegment(_, ref)))
          .map(entries => entries((sequence - ref.firstSequence).toInt).location)
      })
    /** (the first of the write's sequences still queued, whether our location is there); None if none is queued or readable. */
    def probe(a: Attempt): Option[(Long, Boolean)] = {
      val s = math.max(a.base, head.firstSequence)
      if (s >= a.base + a.locations.size || s >= head.nextSequence) None
      else locationAt(s).map(l => (s, l == a.locations((s - a.base).toInt)))
    }
    def landed(a: Attempt) = a -> a.locations.indices.map(a.base + _)
    attempts.iterator.find(a => probe(a).exists(_._2)).map(landed).orElse {
      // Read after the manifest: a consumer writes receipts before it dequeues (§5.1).
      lazy val receipts =
        try manifest.readReceipts()
        catch { case _: osqueue.StoreException => None }
      val current = if (snapshot.version.isEmpty) None else Some(Incarnation.of(head.epoch))
      attempts.filter(a => a.unknownOutcome && !a.resolvedNotLanded).iterator.flatMap { a =>
        // Positions count only in the incarnation the write was sent to (a reset restarts sequences, §5.1).
        val sentTo = a.incarnation.orElse(current)
        val sameIncarnation = current.isEmpty || current == sentTo
        // Nothing appended since its base: not landed, but it still may (pending; writing again is safe).
        if (sameIncarnation && head.nextSequence == a.base) None
        // Someone else's entry sits where ours would: it can never land.
        else if (sameIncarnation && probe(a).isDefined) { a.resolvedNotLanded = true; None }
        else receipts.flatMap(_.locationAt(a.base)) match {
          case Some(location) if location == a.locations.head =>
            resolvedByReceipts.increment()
            Some(landed(a))
          case Some(_) if receipts.exists(r => r.incarnation.isDefined && r.incarnation == sentTo) =>
            resolvedByReceipts.increment()
            a.resolvedNotLanded = true
            None
          case _ =>
            throw new AmbiguousCommitException(
              s"manifest '${manifest.describe}': a write of ${a.locations.size} entries at sequence ${a.base} " +
                s"had an unknown outcome and the entries from ${a.base} on were already dequeued or the queue was " +
                "reset (with no receipt of its incarnation for that sequence); not appending again to avoid duplicates")
        }
      }.nextOption()
    }
  }

  /** Milliseconds since `startedNanos` by this clock's monotonic time: its rate counts, never its offset. */
  private def elapsedMs(startedNanos: Long): Long = (clock.nanoTime() - startedNanos) / 1000000L

  /**
   * Its PUT started half the GC grace period ago or more (docs/format.md §6). Measured on this
   * clock when the PUT's start is known; else (uploaded elsewhere) by its ULID name time, which
   * trusts the uploader's clock to agree with ours.
   */
  private def isStale(p: PendingLocation): Boolean = isStale(p, Long.MaxValue)

  private def isStale(p: PendingLocation, cap: Long): Boolean = {
    val maxAge = math.min(cap, maxAgeMs(p.location))
    p.uploadStartedNanos match {
      case Some(started) => elapsedMs(started) >= maxAge
      case None => BatchNames.ulidTimeMs(p.location).exists(clock.nowMillis() - _ >= maxAge)
    }
  }

  /**
   * A location whose PUT started half the GC grace period ago is uploaded again under a fresh name (§6).
   * The fresh copy is named before its upload, so a slow re-upload is stale too: check again,
   * up to [[ManifestAppender.MaxReuploads]] times. `cap`: a shorter age limit (a cooperative
   * producer refreshes to a quarter grace period before it announces, docs/adr/0007).
   */
  private[queue] def refreshStaleUploads(group: IndexedSeq[PendingLocation], cap: Long = Long.MaxValue): Unit = group.foreach { p =>
    val maxAge = math.min(cap, maxAgeMs(p.location))
    var reuploads = 0
    while (isStale(p, cap)) {
      if (reuploads == ManifestAppender.MaxReuploads)
        throw new StoreException(
          s"batch '${p.location}': ${reuploads + 1} uploads in a row took longer than half the GC grace period " +
            s"($maxAge ms), so GC could delete it before it is enqueued; " +
            "increase the GC grace period or make uploads faster")
      val started = clock.nanoTime()
      p.location = p.reupload()
      p.uploadStartedNanos = Some(started)
      reuploaded.increment()
      reuploads += 1
    }
  }
}

private[queue] object ManifestAppender {
  /**
   * Within one append (or seal): the chunks stored so far by last sequence (with when their PUT started), the
   * alignment of its seal of a v1 tail (first sequence, next_sequence then), the oversized segments read.
   */
  final class SealState {
    val stored = mutable.Map.empty[Long, (SealedTail, SegmentRef, Long)]
    var align: Option[(Long, Long)] = None
    val read = mutable.Map.empty[String, Array[Byte]]
  }

  /** Re-uploads of one stale batch before giving up. */
  val MaxReuploads = 3

  /**
   * One sent write: its locations, the sequence it would have started at, and the incarnation of the
   * manifest it was sent to (the only one it can land in, docs/format.md §5.2; None for a create,
   * which would have made the incarnation it finds).
   */
  final class Attempt(val base: Long, val locations: IndexedSeq[String], val unknownOutcome: Boolean,
      val incarnation: Option[Long]) {
    var resolvedNotLanded = false
  }
}
