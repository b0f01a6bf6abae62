package osqueue.queue

import scala.concurrent.duration.FiniteDuration

import org.slf4j.LoggerFactory

import osqueue.{
  Clock,
  IllegalQueueStateException,
  InvalidConfigException,
  QueueFullException,
  RandomSource,
  StoreException,
  SystemClock,
  SystemRandomSource
}
import osqueue.format.{DequeueReceipts, Incarnation, Intent, ManifestEntry, ManifestHead, Retention}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.ObjectStore

/**
 * How long a producer's append waits for room under `backpressure` before [[QueueFullException]]:
 * `timeoutMs` is `queueFullTimeout` (0: fail at once), `retryIntervalMs` is `queueFullRetryInterval`, how
 * often the head is read again meanwhile.
 */
final case class QueueFullWait(timeoutMs: Long = 30000L, retryIntervalMs: Long = 1000L) {
  if (timeoutMs < 0) throw new InvalidConfigException("queueFullTimeout", s"${timeoutMs}ms", "must be >= 0")
  if (retryIntervalMs <= 0)
    throw new InvalidConfigException("queueFullRetryInterval", s"${retryIntervalMs}ms", "must be > 0")

  /**
   * `attempt()`, run again every retry interval while it throws [[QueueFullException]] (backpressure: each
   * run reads the head again), until the timeout; then that exception.
   */
  def run[T](attempt: () => T, clock: Clock, metrics: MetricsRegistry): T = {
    val since = clock.nanoTime()
    var result: Option[T] = None
    while (result.isEmpty) {
      try result = Some(attempt())
      catch {
        case e: QueueFullException =>
          if ((clock.nanoTime() - since) / 1000000L >= timeoutMs) throw e
          metrics.counter(MetricNames.QueueFullWaits).increment()
          clock.sleepMillis(retryIntervalMs)
      }
    }
    result.get
  }
}

object QueueFullWait {
  /** From the producer's options (`queueFullTimeout`, `queueFullRetryInterval`). */
  def of(timeout: FiniteDuration, retryInterval: FiniteDuration): QueueFullWait =
    QueueFullWait(timeout.toMillis, if (retryInterval.toNanos > 0) math.max(1L, retryInterval.toMillis) else 0L)
}

/** What a `drop_oldest` append cut: the head's new bytes, and how many entries and bytes it removed. */
final case class Cut(raw: Array[Byte], entries: Long, byteCount: Long) {
  def count(metrics: MetricsRegistry): Unit = {
    metrics.counter(MetricNames.EntriesDropped).add(entries)
    metrics.counter(MetricNames.BytesDropped).add(byteCount)
  }
}

/**
 * Sets, clears and enforces a queue's retention policy and size caps (docs/format.md §2.3, ADR 0005
 * "Retention and size caps"), one CAS each. The policy lives in the head's retention section (type 3)
 * with `queued_bytes`, the running sum of the retained entries' `byte_length` (their integrity records,
 * §2.1 type 3), which every writer keeps: an append adds its entries' lengths, every cut subtracts the
 * removed ones. Setting the policy computes it once.
 *
 * Size caps, per policy (applied by [[ManifestAppender]]'s CAS step):
 *  - `backpressure` (0, the default): an append that would leave more than `maxEntries` entries or
 *    `maxBytes` queued writes nothing and throws [[QueueFullException]]; the producer retries every
 *    `queueFullRetryInterval` up to `queueFullTimeout` ([[QueueFullWait]]). Nothing is dropped.
 *  - `drop_oldest` (1): the appending CAS also moves `low_water` past the oldest entries until the caps
 *    hold (the new entries themselves are never cut). Readers whose `next` is below the new `low_water`
 *    report `[next, low_water)` as data loss on their next read (`DataLossException`).
 */
final class QueueRetention(manifest: ManifestStore, policy: RetryPolicy = RetryPolicy(), clock: Clock = SystemClock,
    metrics: MetricsRegistry = new MetricsRegistry, random: RandomSource = SystemRandomSource) {
  // An administrative write: counted under the role `consumer`, as Python's admin_loop does.
  private val loop = new CasLoop(manifest.casObject, policy, clock, CasCounters.manifest(metrics, "consumer"), random)
  private val tree = new SegmentTree(manifest)

  /** The queue's retention section (None: no policy, or no queue). */
  def get(): Option[Retention] = {
    val s = manifest.read()
    if (s.version.isEmpty) None else manifest.head(s).sections.retention
  }

  /**
   * Writes the retention section (replacing one there), with `queued_bytes` computed from the retained
   * entries (reading their segments). 0 means no limit. Nothing is cut by this write: the next append
   * applies the caps. InvalidConfigException for a negative limit or an unknown policy;
   * IllegalQueueStateException without a queue.
   */
  def set(maxAgeMs: Long = 0L, maxBytes: Long = 0L, maxEntries: Long = 0L, policy: String = "backpressure"): Retention = {
    Seq("max_age" -> maxAgeMs, "max_bytes" -> maxBytes, "max_entries" -> maxEntries).foreach { case (option, value) =>
      if (value < 0) throw new InvalidConfigException(option, value.toString, "use a number >= 0 (0: no limit)")
    }
    val code = QueueRetention.policyOf(policy)
    loop.run[Retention] { (snapshot, _) =>
      if (snapshot.version.isEmpty)
        throw new IllegalQueueStateException(s"no queue at '${manifest.key}': produce to it first")
      val head = manifest.head(snapshot)
      val queued = tree.bytesBetween(head, head.firstSequence, head.nextSequence)
      val r = Retention(maxAgeMs, maxBytes, maxEntries, code, queued)
      if (head.sections.retention.contains(r)) CasStep.Done(r)
      else CasStep.Write(head.withReaders(head.epoch, head.sections.copy(retention = Some(r)), tree.children, cut = false),
        () => r)
    }
  }

  /**
   * Applies `max_age` now (e.g. from cron): one CAS that removes the entries whose batch is older than
   * `max_age` by the store's clock, measured against the head's last-modified as listed before the CAS (so
   * never early: the head only gets newer). Readers that had not read them report the range as data loss.
   * Returns how many entries it removed.
   */
  def enforce(): Long = {
    val store = manifest.store
    val headModified = store.list(manifest.key).find(_.key == manifest.key).map(_.lastModifiedMs)
    headModified.fold(0L) { modified =>
      loop.run[Long] { (snapshot, _) =>
        if (snapshot.version.isEmpty) CasStep.Done(0L)
        else {
          val head = manifest.head(snapshot)
          val cut = QueueRetention.ageCut(store, manifest, tree, head, modified)
          if (cut <= head.firstSequence) CasStep.Done(0L)
          else {
            QueueRetention.writeCutReceipts(manifest, tree, head, cut - 1)
            val (bytes, removed) = head.cutThrough(cut - 1, tree.children, tree.bytesBetween(head, _, _))
            CasStep.Write(bytes, () => removed)
          }
        }
      }
    }
  }

  /** Removes the retention section (the head goes back to v2/v1 when it was the last section); whether there was one. */
  def clear(): Boolean = loop.run[Boolean] { (snapshot, previous) =>
    val head = if (snapshot.version.isEmpty) None else Some(manifest.head(snapshot))
    head.filter(_.sections.retention.isDefined) match {
      case None => CasStep.Done(previous.isDefined)
      case Some(h) =>
        CasStep.Write(h.withReaders(h.epoch, h.sections.copy(retention = None), tree.children, cut = false), () => true)
    }
  }
}

object QueueRetention {
  private val log = LoggerFactory.getLogger(classOf[QueueRetention])

  /** A retention policy's name -> its byte in the retention section. */
  val Policies: Map[String, Int] = Map("backpressure" -> Retention.Backpressure, "drop_oldest" -> Retention.DropOldest)
  val PolicyNames: Map[Int, String] = Policies.map(_.swap)

  /** The policy byte of `name`; InvalidConfigException for neither `backpressure` nor `drop_oldest`. */
  def policyOf(name: String): Int =
    Policies.getOrElse(name, throw new InvalidConfigException("policy", name, "use backpressure or drop_oldest"))

  /** Which size cap `entries` / `queuedBytes` exceed (a sentence), or None. */
  def overCap(r: Retention, entries: Long, queuedBytes: Long): Option[String] =
    if (r.maxEntries > 0 && entries > r.maxEntries) Some(s"$entries entries would exceed max_entries ${r.maxEntries}")
    else if (r.maxBytes > 0 && queuedBytes > r.maxBytes) Some(s"$queuedBytes bytes would exceed max_bytes ${r.maxBytes}")
    else None

  /** Refuses an append that would break a `backpressure` cap of `head`: QueueFullException naming the queue, the cap and the size. */
  def checkRoom(head: ManifestHead, addedEntries: Long, addedBytes: Long): Unit =
    head.sections.retention.filter(_.policy == Retention.Backpressure).foreach { r =>
      overCap(r, head.depth + addedEntries, r.queuedBytes + addedBytes).foreach { why =>
        throw new QueueFullException(s"queue '${head.key}' is full (retention policy backpressure): $why")
      }
    }

  /**
   * The appended head `appended` cut to its `drop_oldest` caps (never past `base`, the first new entry);
   * None when nothing is cut (no such policy, or the caps hold). Reads the segments it cuts into for their
   * entries' `byte_length`.
   */
  def dropOldest(appended: Array[Byte], manifest: ManifestStore, base: Long, tree: SegmentTree): Option[Cut] = {
    val head = ManifestHead.parse(appended, manifest.key)
    head.sections.retention.filter(r => r.policy == Retention.DropOldest && overCap(r, head.depth, r.queuedBytes).isDefined)
      .flatMap { r =>
        val first = head.firstSequence
        var newFirst = if (r.maxEntries > 0) math.max(first, head.nextSequence - r.maxEntries) else first
        newFirst = math.min(newFirst, base)
        var bytesLeft = r.queuedBytes - (if (newFirst > first) tree.bytesBetween(head, first, newFirst) else 0L)
        if (r.maxBytes > 0 && bytesLeft > r.maxBytes) {
          val it = entries(manifest, tree, head, newFirst)
          var going = true
          while (going && it.hasNext) {
            val e = it.next()
            if (bytesLeft <= r.maxBytes || e.sequence >= base) going = false
            else {
              bytesLeft -= ManifestHead.entryByteLength(e.extension)
              newFirst = e.sequence + 1
            }
          }
        }
        if (newFirst <= first) None
        else {
          writeCutReceipts(manifest, tree, head, newFirst - 1)
          val (raw, removed) = head.cutThrough(newFirst - 1, tree.children, tree.bytesBetween(head, _, _))
          Some(Cut(raw, removed, r.queuedBytes - bytesLeft))
        }
      }
  }

  /**
   * Before a retention cut through `through`: the receipts of what it removes (docs/format.md §5.1, the last
   * `MaxReceipts`), so a producer whose write had an unknown outcome can still tell whether it landed. Best
   * effort, as a dequeue's: without them such a producer reports AmbiguousCommitException, never a duplicate.
   */
  def writeCutReceipts(manifest: ManifestStore, tree: SegmentTree, head: ManifestHead, through: Long): Unit = {
    val start = math.max(head.firstSequence, through - DequeueReceipts.MaxReceipts + 1)
    val removed = entries(manifest, tree, head, start).takeWhile(_.sequence <= through).map(e => (e.sequence, e.location))
      .toIndexedSeq
    if (removed.nonEmpty)
      try {
        val receipts = manifest.readReceipts().getOrElse(DequeueReceipts())
        manifest.writeReceipts(receipts.extended(removed, Some(Incarnation.of(head.epoch))))
      } catch {
        case e: StoreException =>
          log.warn(s"could not write the dequeue receipts of a retention cut of '${head.key}': ${e.getMessage}")
      }
  }

  /**
   * The first sequence `max_age` keeps: entries are expired from the first on while their batch object's
   * last-modified is more than `maxAgeMs` before the head's (`headModifiedMs`), both by the STORE's clock
   * (docs/format.md §6: never a writer's clock). One listing per batch prefix.
   */
  def ageCut(store: ObjectStore, manifest: ManifestStore, tree: SegmentTree, head: ManifestHead,
      headModifiedMs: Long): Long = {
    val first = head.firstSequence
    head.sections.retention.filter(_.maxAgeMs > 0).fold(first) { r =>
      val listed = scala.collection.mutable.Map.empty[String, Map[String, Long]]
      var cut = first
      val it = entries(manifest, tree, head, first)
      var going = true
      while (going && it.hasNext) {
        val e = it.next()
        val slash = e.location.lastIndexOf('/')
        val prefix = if (slash >= 0) e.location.substring(0, slash) else ""
        val modified = listed.getOrElseUpdate(prefix,
          store.list(if (prefix.isEmpty) "" else prefix + "/").map(i => i.key -> i.lastModifiedMs).toMap).get(e.location)
        if (modified.forall(m => headModifiedMs - m <= r.maxAgeMs)) going = false
        else cut = e.sequence + 1
      }
      cut
    }
  }

  /** The queued entries of `head` from `from` on: the segments holding them (one GET each, as needed), then the tail. */
  private def entries(manifest: ManifestStore, tree: SegmentTree, head: ManifestHead, from: Long): Iterator[ManifestEntry] =
    (tree.leaves(head, from, head.tailFirstSequence).flatMap(leaf => manifest.readSegment(leaf).iterator) ++
      head.tailEntries.iterator).filter(_.sequence >= from)

  /**
   * Under `backpressure` (§2.3): throws QueueFullException unless the own group fits, then keeps the other
   * writers' runs, in order, while all of them fit (a prefix: each writer's run stays contiguous); the runs
   * left out stay announced for their writers ([[checkRoom]] decides, as on the solo path).
   */
  def withRoom(head: ManifestHead, own: IndexedSeq[PendingLocation], others: Seq[Intent]): Seq[Intent] = {
    var added = own.size.toLong
    var addedBytes = own.map(p => ManifestHead.entryByteLength(p.extension)).sum
    checkRoom(head, added, addedBytes)
    if (head.sections.retention.isEmpty) others
    else
      others.takeWhile { i =>
        added += i.entries.size
        addedBytes += i.entries.map(e => ManifestHead.entryByteLength(e.extension)).sum
        try { checkRoom(head, added, addedBytes); true }
        catch { case _: QueueFullException => false }
      }
  }
}
