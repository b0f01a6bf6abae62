package osqueue.queue

import java.util.concurrent.{Callable, ConcurrentHashMap, ExecutorService, Executors, ThreadFactory}

import scala.collection.mutable
import scala.collection.mutable.ArrayBuffer
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import osqueue.{
  AmbiguousCommitException,
  Clock,
  CorruptManifestException,
  InvalidConfigException,
  QueueFullException,
  RandomSource,
  StoreException
}
import osqueue.format.{
  HeadSections,
  Incarnation,
  Intent,
  IntentCodec,
  IntentName,
  ManifestHead,
  NewEntry,
  Retention,
  WriterRecord,
  WriterSequence
}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.ObjectInfo

/**
 * Cooperative commit (docs/adr/0007 part 1, docs/format.md §5.4): producers in separate processes
 * announce their batches in intent objects, and whichever producer's CAS wins appends every fresh
 * announced batch, so a loser usually finds its batches already in. No batch is appended twice: every
 * entry carries its writer sequence `(writer_id, batch_no)` and the same CAS sets the head's writers
 * section, a run of a writer appended only from `last_batch + 1` on ([[osqueue.format.WriterSequence]]).
 * Python: `osqueue.queue.cooperative_commit`.
 */
object CooperativeCommit {
  val Solo = "solo"
  val Cooperative = "cooperative"
  val CommitModes: Seq[String] = Seq(Solo, Cooperative)
  /** After a conflict, a cooperative producer announces its batches at once for this long (step 0). */
  val SoloAfterConflictMs = 10000L
  val ParallelIntentGets = 8
  /** The longest jittered wait between a cooperative producer's rounds (the solo loop's grows to 1 s). */
  val RoundDelayCapMs = 50L
  /**
   * A waiting producer (not the round's committer) reads the head again when the next head change is due by the
   * recent gap between head changes (a quarter gap later if it is overdue), within these bounds.
   */
  val WaitPollMs: (Long, Long) = (10L, 250L)
  /**
   * A waiting producer LISTs and commits if its intent is the oldest once the head has not moved for this long, or
   * for 3 times the longest gap between head changes it saw lately if that is longer (a loaded store is slower,
   * not dead): the committer died, stalls or has nothing to write.
   */
  val TakeoverMs = 200L
  /**
   * ... and commits whatever the LIST says once the head has not moved for this many takeover intervals (the owner
   * of the oldest intent is dead or stalls too).
   */
  val DeadOldestTakeovers = 4
  /** ... and once its group has waited this long in all, whatever the head does (a backstop). */
  val MaxWaitMs = 10000L

  /**
   * `commitMode` is `solo` or `cooperative`; cooperative needs v3 heads (the writers section), which a
   * queue kept RFC v1 (K = 2147483647) never writes. InvalidConfigException naming it otherwise.
   */
  def checkCommitMode(value: String, segmentEntries: Int, spooled: Boolean = false): String = {
    if (!CommitModes.contains(value))
      throw new InvalidConfigException("commitMode", value, s"use one of ${CommitModes.mkString(", ")}")
    if (value == Cooperative && segmentEntries == Int.MaxValue)
      throw new InvalidConfigException("commitMode", value,
        "cooperative commit writes v3 heads; manifestSegmentEntries 2147483647 keeps the queue RFC v1")
    if (value == Cooperative && spooled)
      throw new InvalidConfigException("commitMode", value, "a spooled producer commits 'solo' (cooperative not built there)")
    value
  }

  /** One group of this writer's batches being committed: its batch numbers and every name it had. */
  private[queue] final class Group(val firstBatch: Long, val pending: IndexedSeq[PendingLocation]) {
    /** next_sequence of the first head seen: the group lands at or after it. */
    var startNext: Option[Long] = None
    /** The locations of its last intent. */
    var announced: Option[IndexedSeq[String]] = None
    val intentKeys: ArrayBuffer[String] = ArrayBuffer.empty
    val names: IndexedSeq[mutable.Set[String]] = pending.map(p => mutable.LinkedHashSet(p.location))
    var sentUnknown = false
    /** Its last step found the queue full (backpressure). */
    var full = false
    /** When the group first waited for another committer (nanoTime). */
    var waitStarted: Option[Long] = None
    /** The head version it last waited on, and since when (nanoTime) it has not moved. */
    var waitedVersion: Option[Any] = None
    var waitedSince = 0L
    /** Head changes seen while waiting that did not carry the group. */
    var moves = 0
    /** (head version, designated, LIST) of its last LIST. */
    var listed: Option[(Option[Any], Boolean, Seq[ObjectInfo])] = None
    /** The group landed in this writer's own CAS (it then deletes the round's intents). */
    var ownWrite = false
    /** Its last step found the head its own recent write (it committed without waiting). */
    var sticky = false
    /** The head it last read has this writer's record (a next group may then be announced). */
    var seenMine = false
    def lastBatch: Long = firstBatch + pending.size - 1
  }

  private[queue] def daemons(name: String): ThreadFactory = { r =>
    val t = new Thread(r, name); t.setDaemon(true); t
  }
}

/** The cooperative side of one [[ManifestAppender]] (`commitMode = "cooperative"`). */
final class CooperativeCommitter private[queue] (
    a: ManifestAppender,
    manifest: ManifestStore,
    policy: RetryPolicy,
    clock: Clock,
    metrics: MetricsRegistry,
    random: RandomSource,
    role: String,
    val writerId: String) {
  import CooperativeCommit._

  private val key = manifest.key
  @volatile private var nextBatch = 0L
  @volatile private var lastConflictNanos: Option[Long] = None
  /** Immutable objects: read once (None: rejected). */
  private val intents = new ConcurrentHashMap[String, Option[Intent]]()
  /** How many other writers' intents it holds decoded (tests: bounded by one round's candidates). */
  private[queue] def cachedIntents: Int = intents.size
  /** The longest gap (ns) between head changes seen while waiting, decaying. */
  @volatile private var headGapNanos = 0L
  /** The recent gap (ns) between head changes (a moving average): when a waiter reads again. */
  @volatile private var gapNanos = 100000000L
  /**
   * The head this writer's last landed CAS wrote, and when: while it is the head (and recent), this writer is the
   * round's committer (the "sticky" committer, ADR 0007 session 15).
   */
  @volatile private var ownHead: Option[Array[Byte]] = None
  @volatile private var ownHeadAtNanos = 0L
  /** Other writers' intents its landing CAS appended (it deletes them). */
  @volatile private var appendedKeys: Seq[String] = Seq.empty
  /** Its next groups, announced while an older one waits (oldest first; the committer thread's only). */
  private val ahead = mutable.Queue.empty[Group]
  /** The newest head it read or wrote: confirms its groups ahead. */
  @volatile private var lastRaw: Option[Array[Byte]] = None
  /** The batches submitted since the committer took its last group (set by [[QueueProducer]]). */
  @volatile private[queue] var takeQueued: () => IndexedSeq[PendingLocation] = () => IndexedSeq.empty
  /** Its oldest group ahead, to commit next (the committer thread). */
  private[queue] def nextAhead(): Option[Group] = if (ahead.isEmpty) None else Some(ahead.dequeue())
  private val rounds = metrics.counter(MetricNames.CommitRounds)
  private val announcedCount = metrics.counter(MetricNames.IntentsAnnounced)
  private val appendedForOthers = metrics.counter(MetricNames.IntentsAppendedForOthers)
  private val rejected = metrics.counter(MetricNames.IntentsRejected)
  // Its rounds: a loser's next GET usually finds its group in, so the wait between rounds stays near one
  // round (capped at RoundDelayCapMs) instead of growing to the solo loop's 1 s; the budget is the same.
  private val loop = new CasLoop(manifest.casObject,
    policy.copy(baseDelayMs = math.min(policy.baseDelayMs, RoundDelayCapMs),
      maxDelayMs = math.min(policy.maxDelayMs, RoundDelayCapMs)),
    clock, CasCounters.manifest(metrics, role), random,
    reuseOwnWrite = false) // under contention the own last write is stale: a sure conflict
  // Landed intents are deleted off the commit's path (one request less before the handles complete).
  private lazy val deleter: ExecutorService = Executors.newSingleThreadExecutor(daemons("osqueue-intent-delete"))
  private lazy val getters: ExecutorService = Executors.newFixedThreadPool(ParallelIntentGets, daemons("osqueue-intents"))

  /** Appends the group (cooperatively); its sequences, -1 for one dequeued before its owner looked. */
  def commit(group: IndexedSeq[PendingLocation]): IndexedSeq[Long] = {
    a.checkPrefixes(group)
    val g = new Group(nextBatch, group)
    nextBatch += group.size
    commitGroup(g)
  }

  /** A group announced while an older one waited: the head that confirmed that one may carry it too. */
  private[queue] def commitAhead(g: Group): IndexedSeq[Long] = {
    val early = lastRaw.flatMap { raw =>
      landed(raw, g, WriterSequence.writersOf(ManifestHead.parse(raw, key).sections, key).get(writerId))
    }
    early match {
      case Some(r) => submitDelete(g.intentKeys.toList.dropRight(1)); r
      case None => commitGroup(g)
    }
  }

  private def commitGroup(g: Group): IndexedSeq[Long] = {
    val sealState = new ManifestAppender.SealState
    // The queue's size caps (§2.3) as the solo path applies them: under backpressure the group waits for
    // room per queueFullTimeout (each try reads the head again), then fails with QueueFullException.
    val result =
      try a.queueFullWait.run(() => run(g, sealState), clock, metrics)
      catch {
        case full: QueueFullException if g.announced.isDefined =>
          try withdraw(g, full)
          catch { case e: QueueFullException => deleteIntents(g); throw e }
      }
    // Landed intents go in one request, off the commit's path: the committer deletes the intents its CAS
    // appended, its own included; a group another writer appended leaves its last intent to that committer
    // (an intent that outlives a dead committer is skipped by name and deleted by GC, §6).
    val keys =
      if (g.ownWrite) { val k = g.intentKeys.toList ++ appendedKeys; appendedKeys = Seq.empty; k }
      else g.intentKeys.toList.dropRight(1)
    submitDelete(keys)
    result
  }

  private def deleteIntents(g: Group): Unit = submitDelete(g.intentKeys.toList)

  private def submitDelete(keys: Seq[String]): Unit = if (keys.nonEmpty)
    deleter.submit(new Runnable { def run(): Unit = delete(keys) })

  /** Rounds until the group is in: a round whose committer is another producer (None) waits and reads again. */
  private def run(g: Group, sealState: ManifestAppender.SealState): IndexedSeq[Long] = {
    var r = round(g, sealState)
    while (r.isEmpty) {
      takeAhead(g)
      clock.sleepMillis(pollDelayMs(g))
      r = round(g, sealState)
    }
    r.get
  }

  /**
   * While its group waits, a producer announces what was queued since as its next group (ADR 0007 session 15),
   * once the head has its record (its runs land from `last_batch + 1` on: in order, contiguous).
   */
  private def takeAhead(g: Group): Unit = if (g.seenMine && g.announced.isDefined) {
    val more = takeQueued()
    if (more.nonEmpty) {
      val claimed =
        try { a.checkPrefixes(more); true }
        catch { case NonFatal(e) => more.foreach(_.promise.completeExceptionally(e)); false }
      if (claimed) {
        val n = new Group(nextBatch, more)
        n.startNext = g.startNext
        nextBatch += more.size
        ahead.enqueue(n)
        try announce(n)
        catch { case NonFatal(_) => n.sentUnknown = true } // its intent may be out: its own rounds settle it
      }
    }
  }

  private def round(g: Group, sealState: ManifestAppender.SealState): Option[IndexedSeq[Long]] =
    loop.run[Option[IndexedSeq[Long]]]({ (snapshot, previous) =>
        g.full = false
        previous match {
          case Some(PreviousAttempt.Unknown(_)) => g.sentUnknown = true
          case Some(PreviousAttempt.Conflict) => lastConflictNanos = Some(clock.nanoTime())
          case None =>
        }
        val raw = if (snapshot.version.isEmpty) Incarnation.newEmptyManifest() else snapshot.raw
        val head = ManifestHead.parse(raw, key)
        if (g.startNext.isEmpty) g.startNext = Some(head.nextSequence)
        if (snapshot.version.isDefined) lastRaw = Some(snapshot.raw)
        val mine = WriterSequence.writersOf(head.sections, key).get(writerId)
        g.seenMine = mine.isDefined
        landed(raw, g, mine) match {
          case Some(r) => CasStep.Done(Some(r))
          case None =>
            rounds.increment()
            val solo = previous.isEmpty &&
              lastConflictNanos.forall(t => (clock.nanoTime() - t) / 1000000L >= SoloAfterConflictMs)
            val exists = snapshot.version.isDefined
            var others: Seq[(String, Intent)] = Seq.empty
            var wait = false
            if (!solo) {
              // The writer of the head commits the next round while its write is recent (an idle one's role may
              // have been taken over: it then waits like the others).
              val sticky = exists && ownHead.exists(java.util.Arrays.equals(_, snapshot.raw)) &&
                (clock.nanoTime() - ownHeadAtNanos) / 1000000L < takeoverMs
              g.sticky = sticky
              // The sticky committer's first try needs no intent: it writes its group itself.
              if (!(sticky && previous.isEmpty && g.announced.isEmpty)) announce(g)
              var listing: Option[Seq[ObjectInfo]] = None
              if (!sticky) {
                val (designated, l) = shouldCommit(g, snapshot.version, head.sections, exists)
                listing = l
                wait = !designated
              }
              // The head and .intents/ (and segments) in one request.
              if (!wait) others = pendingOthers(head.sections, exists, listing.getOrElse(manifest.store.list(key)))
            }
            if (wait) CasStep.Done(None)
            else
              try write(head, g, others, sealState)
              catch { case e: QueueFullException => g.full = true; throw e } // nothing sent: withdrawn after the wait
        }
      },
      Some(new Settle[Option[IndexedSeq[Long]]] {
        def landed(snapshot: Snapshot, previous: Option[PreviousAttempt]): Option[Option[IndexedSeq[Long]]] =
          if (snapshot.version.isEmpty) None
          else {
            val head = ManifestHead.parse(snapshot.raw, key)
            CooperativeCommitter.this.landed(snapshot.raw, g, WriterSequence.writersOf(head.sections, key).get(writerId))
              .map(Some(_))
          }
        def stillUnknown(previous: Option[PreviousAttempt]): Option[String] =
          // An announced group may still be appended by another committer while its intent is fresh (a
          // group refused by a full queue is withdrawn by the committer: `withdraw`).
          if (previous.exists(_.isInstanceOf[PreviousAttempt.Unknown]) || g.sentUnknown || (g.announced.isDefined && !g.full))
            Some(s"batches ${g.firstBatch}..${g.lastBatch} of writer $writerId")
          else None
      }))

  /**
   * A group refused by a full queue whose intent is out: another committer could still append it, so one
   * CAS sets this writer's record past the group (its batches then never land, §5.4: a run is appended only
   * from `last_batch + 1`) unless the group landed meanwhile (its sequences then). Throws `full`.
   */
  private def withdraw(g: Group, full: QueueFullException): IndexedSeq[Long] = {
    var unknown = false // a withdrawing write of unknown outcome was sent: it may be what set the record
    val found = loop.run[Option[IndexedSeq[Long]]] { (snapshot, previous) =>
      if (previous.exists(_.isInstanceOf[PreviousAttempt.Unknown])) unknown = true
      if (snapshot.version.isEmpty) CasStep.Done(None)
      else {
        val head = ManifestHead.parse(snapshot.raw, key)
        val writers = WriterSequence.writersOf(head.sections, key)
        writers.get(writerId) match {
          case Some(m) if m.lastBatch >= g.firstBatch =>
            if (unknown) { // our record, or someone appended the group: only its entries tell
              val at = locate(snapshot.raw, g)
              if (at.forall(_ >= 0)) CasStep.Done(Some(at))
              else if (at.exists(_ >= 0))
                throw new AmbiguousCommitException(
                  s"manifest '${manifest.describe}': batches ${g.firstBatch}..${g.lastBatch} of writer $writerId were " +
                    "refused (queue full) and withdrawn by a write of unknown outcome; some of them are in")
              else CasStep.Done(None)
            } else CasStep.Done(landed(snapshot.raw, g, Some(m)))
          case _ =>
            val now = clock.nowMillis()
            val sections =
              WriterSequence.withWriters(head.sections, writers + (writerId -> WriterRecord(writerId, g.lastBatch, now)), now)
            CasStep.Write(head.withReaders(head.epoch, sections, a.tree.children, cut = false), () => None)
        }
      }
    }
    found.getOrElse(throw full)
  }

  /** Marks a conflict now, as if one was just seen (tests: the next group announces before its first CAS). */
  private[osqueue] def sawConflict(): Unit = lastConflictNanos = Some(clock.nanoTime())

  /** As if another writer wrote the head since (tests: its next group is announced). */
  private[osqueue] def forgetOwnHead(): Unit = ownHead = None

  /** Waits for the deletes of landed intents submitted so far (tests). */
  private[osqueue] def drainDeletes(): Unit = deleter.submit(new Runnable { def run(): Unit = () }).get()

  /** This group's sequences if the head's writers section says it landed (exact, ADR 0006). */
  private def landed(raw: Array[Byte], g: Group, mine: Option[WriterRecord]): Option[IndexedSeq[Long]] = mine match {
    case Some(m) if m.lastBatch >= g.firstBatch =>
      if (m.lastBatch < g.lastBatch)
        throw new AmbiguousCommitException(
          s"manifest '${manifest.describe}': writer $writerId has batches up to ${m.lastBatch} in, inside the group " +
            s"${g.firstBatch}..${g.lastBatch}: a group lands whole")
      Some(locate(raw, g))
    case _ => None
  }

  /**
   * Where a group someone else appended landed: its names in the queue or the receipts (sequence -1:
   * landed and dequeued before its owner looked, so no record of where). Sets each pending's location
   * to the name that landed.
   */
  private def locate(raw: Array[Byte], g: Group): IndexedSeq[Long] = {
    val from = g.startNext.getOrElse(0L)
    val byName = mutable.Map.empty[String, Long]
    queuedLocationsFrom(raw, from).foreach { case (q, loc) => byName(loc) = q }
    if (!g.names.forall(_.exists(byName.contains))) { // some already dequeued: ask the receipts
      val receipts =
        try manifest.readReceipts()
        catch { case _: StoreException => None }
      receipts.foreach { r =>
        (math.max(from, r.first) until r.first + r.locations.size).foreach { q =>
          byName.getOrElseUpdate(r.locations((q - r.first).toInt), q)
        }
      }
    }
    g.names.zip(g.pending).map { case (names, p) =>
      names.find(byName.contains) match {
        case Some(n) => p.location = n; byName(n)
        case None => -1L
      }
    }
  }

  /**
   * `sequence -> location` of the queued entries from `minSequence` on: the tail, and the segments
   * holding such sequences (one GET each, usually none or one). A listed segment gone since the head
   * was read was dropped by a dequeue: its sequences count as dequeued (the receipts are asked).
   */
  private def queuedLocationsFrom(raw: Array[Byte], minSequence: Long): Seq[(Long, String)] = {
    val head = ManifestHead.parse(raw, key)
    val start = math.max(minSequence, head.firstSequence)
    val out = ArrayBuffer.empty[(Long, String)]
    var sequence = start
    while (sequence < head.tailFirstSequence) {
      a.tree.leafIfPresent(head, sequence) match {
        case None => // an index object on the way is gone: skip its whole head ref
          sequence = head.refs.find(r => r.firstSequence <= sequence && sequence <= r.lastSequence)
            .fold(head.tailFirstSequence)(_.lastSequence + 1)
        case Some(leaf) =>
          manifest.readSegmentBytes(leaf).foreach { bytes =>
            out ++= ManifestHead.decodeSegment(bytes, leaf).filter(_.sequence >= start).map(e => (e.sequence, e.location))
          }
          sequence = leaf.lastSequence + 1
      }
    }
    out ++= head.tailLocations.filter(_._1 >= start)
    out.toSeq
  }

  /**
   * PUTs the group's intent, after refreshing its batches so that each PUT started less than a
   * quarter grace period ago: a committer then needs only the intent's store time (§5.4).
   */
  private def announce(g: Group): Unit = {
    a.refreshStaleUploads(g.pending, a.segmentMaxAgeMs / 2)
    val locations = g.pending.map(_.location)
    g.names.zip(locations).foreach { case (n, l) => n += l }
    if (g.announced.contains(locations)) return
    val ulid = IntentCodec.newIntentUlid(clock.nowMillis(), random)
    val es = entries(g)
    // The in-key form when the group fits its name (other committers then read no body, §2.4); the body is
    // the same either way.
    val limit = if (manifest.store.uri.startsWith("file:")) IntentCodec.MaxFileNameBytes else IntentCodec.MaxKeyBytes
    val k = IntentCodec.inKeyIntentKey(key, ulid, writerId, g.firstBatch, es, limit)
      .getOrElse(IntentCodec.intentKey(key, ulid, writerId, g.firstBatch, g.pending.size))
    manifest.store.put(k, IntentCodec.encodeIntent(writerId, g.firstBatch, es))
    g.announced = Some(locations)
    g.intentKeys += k
    announcedCount.increment()
  }

  private def entries(g: Group): IndexedSeq[NewEntry] = {
    val wid = WriterSequence.unhex(writerId)
    g.pending.zipWithIndex.map { case (p, i) =>
      NewEntry(p.location, p.metadata, p.extension ++ WriterSequence.sequenceRecord(wid, g.firstBatch + i))
    }
  }

  /**
   * Other writers' fresh announced batches, a contiguous run per writer from its `last_batch + 1`
   * (any first batch for a writer without a record); writers in the order of their oldest intent.
   */
  private def pendingOthers(
      sections: HeadSections, exists: Boolean, listing: Seq[ObjectInfo]): Seq[(String, Intent)] = {
    val writers = WriterSequence.writersOf(sections, key)
    val names = freshNames(sections, exists, listing)
    // Forget what this round does not need: an intent appended, stale or deleted never becomes a candidate again
    // (last_batch only grows, store time only ages, names are never reused), so the cache stays this round's size.
    intents.keySet.retainAll(names.map(_._1).toSet.asJava)
    names.foreach { case (k, n) =>
      if (n.payload.isDefined && !intents.containsKey(k)) { // in-key (§2.4): its name is the announcement, no GET
        try intents.put(k, Some(IntentCodec.decodeInKeyIntent(n, k)))
        catch {
          case _: CorruptManifestException =>
            intents.put(k, None)
            rejected.increment()
        }
      }
    }
    fetch(names.filter { case (k, _) => !intents.containsKey(k) })
    val byWriter = mutable.LinkedHashMap.empty[String, ArrayBuffer[(String, Intent)]]
    names.sortBy(_._2.ulid).foreach { case (k, n) =>
      Option(intents.get(k)).flatten.foreach(i => byWriter.getOrElseUpdate(n.writerId, ArrayBuffer.empty) += (k -> i))
    }
    byWriter.toSeq.flatMap { case (wid, found) =>
      val taken = mutable.Map.empty[Long, (String, Intent)]
      found.foreach(f => taken(f._2.firstBatch) = f) // oldest first: a newer intent for the same batches replaces it
      var start = writers.get(wid).fold(taken.keys.min)(_.lastBatch + 1)
      val run = ArrayBuffer.empty[(String, Intent)]
      while (taken.contains(start)) {
        run += taken(start)
        start = taken(start)._2.lastBatch + 1
      }
      run
    }
  }

  /**
   * Whether this producer is the round's committer: its group's intent is older than the oldest intent of
   * every other writer's appendable run (judged by names alone, no GET), ties by writer id. Only one waiting
   * producer then reads the intents and sends a CAS; the others read the head until their group is in.
   */
  private def isDesignated(g: Group, sections: HeadSections, listing: Seq[ObjectInfo], exists: Boolean): Boolean =
    g.intentKeys.lastOption.flatMap(IntentCodec.parseIntentName(key, _)) match {
      case None => true
      case Some(mine) =>
        val writers = WriterSequence.writersOf(sections, key)
        val byWriter = mutable.LinkedHashMap.empty[String, mutable.Map[Long, IntentName]]
        freshNames(sections, exists, listing).sortBy(_._2.ulid).foreach { case (_, n) =>
          byWriter.getOrElseUpdate(n.writerId, mutable.Map.empty)(n.firstBatch) = n // the newer replaces the older
        }
        !byWriter.exists { case (wid, taken) =>
          var start = writers.get(wid).fold(taken.keys.min)(_.lastBatch + 1)
          var oldest: Option[String] = None
          while (taken.contains(start)) {
            val n = taken(start)
            if (oldest.forall(n.ulid < _)) oldest = Some(n.ulid)
            start = n.firstBatch + n.count
          }
          oldest.exists(u => u < mine.ulid || (u == mine.ulid && wid < writerId))
        }
    }

  /** The takeover interval's floor (tests raise it: no waiter takes over). */
  @volatile private[queue] var takeoverFloorMs: Long = TakeoverMs
  private def takeoverMs: Long = math.max(takeoverFloorMs, 3 * headGapNanos / 1000000L)

  /**
   * Whether a waiting producer commits this round (and the LIST it made to decide, if any). While the head keeps
   * moving without its group for fewer than 2 changes, a committer is at work and the intent was out before its
   * next LIST: wait, no LIST. After 2 such changes (no committer takes its intent: e.g. only solo writers), or when
   * the head has not moved for TakeoverMs or 3 times the longest recent gap between head changes (the committer
   * died, stalls, or has nothing to write), it LISTs once per head version and commits if its intent is the oldest
   * appendable one; once the head has not moved for 4 times that, or its group has waited MaxWaitMs in all, it
   * commits whatever the LIST says (a dead owner of the oldest intent).
   */
  private def shouldCommit(g: Group, version: Option[Any], sections: HeadSections,
      exists: Boolean): (Boolean, Option[Seq[ObjectInfo]]) = {
    val now = clock.nanoTime()
    if (g.waitStarted.isEmpty) g.waitStarted = Some(now)
    if (g.waitedVersion != Some(version)) {
      if (g.waitedVersion.isDefined) {
        val gap = now - g.waitedSince
        headGapNanos = math.max(gap, (headGapNanos * 0.8).toLong)
        gapNanos = (0.7 * gapNanos + 0.3 * gap).toLong
        g.moves += 1
      }
      g.waitedVersion = Some(version); g.waitedSince = now
    }
    val takeover = takeoverMs
    val stillMs = (now - g.waitedSince) / 1000000L
    if (stillMs >= DeadOldestTakeovers * takeover || (now - g.waitStarted.get) / 1000000L >= MaxWaitMs) (true, None)
    else if (g.moves < 2 && stillMs < takeover) (false, None)
    else {
      if (!g.listed.exists(_._1 == version)) {
        val l = manifest.store.list(key)
        g.listed = Some((version, isDesignated(g, sections, l, exists), l))
        if (!g.listed.get._2) g.moves = 0 // an older intent has its owner: two more changes (or a still head) to LIST again
      }
      (g.listed.get._2, Some(g.listed.get._3))
    }
  }

  /**
   * When a waiting producer reads the head again: when the next change is due by the recent gap between head
   * changes, or a quarter gap later when it is overdue (one read per round, not one per fixed tick).
   */
  private def pollDelayMs(g: Group): Long = {
    val dueMs = (g.waitedSince + gapNanos - clock.nanoTime()) / 1e6
    val delay = if (dueMs > WaitPollMs._1) dueMs else gapNanos / 4e6
    math.min(math.max((delay * (0.9 + 0.2 * random.nextDouble())).toLong, WaitPollMs._1), WaitPollMs._2)
  }

  /** Other writers' fresh intents in `listing` (a LIST of the manifest's key) not appended yet, by name. */
  private def freshNames(sections: HeadSections, exists: Boolean, listing: Seq[ObjectInfo]): Seq[(String, IntentName)] = {
    val headMs = listing.find(_.key == key).map(_.lastModifiedMs)
    if (exists && headMs.isEmpty) return Seq.empty // the head is not listed (a store that lags): judge nothing fresh
    val quarter = a.segmentMaxAgeMs / 2
    val writers = WriterSequence.writersOf(sections, key)
    val prefix = IntentCodec.intentsPrefix(key)
    val names: Seq[(String, IntentName)] = listing.flatMap { o =>
      (if (o.key.startsWith(prefix)) IntentCodec.parseIntentName(key, o.key) else None)
        .filter(n => n.writerId != writerId)
        .filter(n => writers.get(n.writerId).forall(r => n.firstBatch + n.count - 1 > r.lastBatch)) // not appended yet
        // Store time only (§6): its batches' PUTs started < grace/4 before it; it is < grace/4 older
        // than the head this CAS is conditioned on (listed after that head was read: no older).
        .filter(_ => headMs.forall(h => h - o.lastModifiedMs < quarter))
        .map(o.key -> _)
    }
    names
  }

  private def fetch(keys: Seq[(String, IntentName)]): Unit = {
    def get(k: String, n: IntentName): Unit = {
      val obj =
        try manifest.store.getBytes(k)
        catch { case _: StoreException => return } // tried again next round
      obj.foreach { bytes => // None: deleted, its batches landed
        try intents.put(k, Some(IntentCodec.decodeIntent(bytes, k, Some(n))))
        catch {
          case _: CorruptManifestException =>
            intents.put(k, None)
            rejected.increment()
        }
      }
    }
    if (keys.size <= 1) keys.foreach { case (k, n) => get(k, n) }
    else getters.invokeAll(keys.map { case (k, n) => (() => get(k, n)): Callable[Unit] }.asJava).asScala.foreach(_.get())
  }

  /** ONE append: this group, then the other writers' runs, with the writers section updated. */
  private def write(head: ManifestHead, g: Group, found: Seq[(String, Intent)],
      sealState: ManifestAppender.SealState): CasStep[Option[IndexedSeq[Long]]] = {
    // Its groups ahead first, in order (fresh batches: a re-upload re-announces one): its record then covers them.
    val own = ArrayBuffer.empty[(String, Intent)]
    val it = ahead.iterator
    var ok = true
    while (ok && it.hasNext) {
      val n = it.next()
      ok =
        try { announce(n); true }
        catch { case NonFatal(_) => false }
      if (ok) own += n.intentKeys.last -> Intent(writerId, n.firstBatch, entries(n))
    }
    val allFound = own.toSeq ++ found
    val others = allFound.map(_._2)
    val now = clock.nowMillis()
    var writers = WriterSequence.writersOf(head.sections, key)
    writers += writerId -> WriterRecord(writerId, g.lastBatch, now)
    val kept = QueueRetention.withRoom(head, g.pending, others)
    val keptKeys = allFound.take(kept.size).map(_._1) // a prefix is kept
    kept.foreach(i => writers += i.writerId -> WriterRecord(i.writerId, i.lastBatch, now))
    val extra = kept.flatMap(_.entries)
    val sections = WriterSequence.withWriters(head.sections, writers, now)
    val (appended, base) = a.appendedFresh(head, g.pending, sealState, Some(sections), Some(() => entries(g)), extra)
    // drop_oldest (§2.3): the same CAS cuts the oldest entries, never the ones it appends (from `base` on).
    val cut =
      if (head.sections.retention.exists(_.policy == Retention.DropOldest)) QueueRetention.dropOldest(appended, manifest, base, a.tree)
      else None
    val bytes = cut.fold(appended)(_.raw)
    val locations = g.pending.map(_.location)
    g.names.zip(locations).foreach { case (n, l) => n += l }
    CasStep.Write(bytes,
      { () =>
        cut.foreach(_.count(metrics))
        if (kept.size > own.size) appendedForOthers.add(kept.size - own.size)
        g.ownWrite = true
        val now = clock.nanoTime()
        if (g.sticky) // the cadence of its rounds in a row is the head's (it wrote the head)
          headGapNanos = math.max(math.min(now - ownHeadAtNanos, MaxWaitMs * 1000000L), (headGapNanos * 0.8).toLong)
        ownHead = Some(bytes); ownHeadAtNanos = now
        lastRaw = Some(bytes)
        appendedKeys = keptKeys
        Some(locations.indices.map(base + _))
      })
  }

  /**
   * Deletes landed intents in one request where the store has one (S3's DeleteObjects), best effort: GC deletes
   * what is left (§6), and a landed intent is skipped by its name until then.
   */
  private def delete(keys: Seq[String]): Unit =
    try manifest.store.deleteMany(keys)
    catch { case _: StoreException => }
}
