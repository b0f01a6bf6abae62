package osqueue.gc

import scala.concurrent.duration.FiniteDuration
import scala.util.control.NonFatal

import org.slf4j.LoggerFactory

import osqueue.{Clock, IllegalQueueStateException}
import osqueue.format.{BatchNames, IntentCodec, ManifestHead, SegmentNames}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{DataPrefixOwner, ManifestStore, SegmentTree}
import osqueue.store.{ObjectInfo, ObjectStore}

/** What one GC cycle found and did (counts by reason a file was kept). */
final case class GcResult(
    deleted: Seq[String],
    failed: Seq[String],
    keptReferenced: Int,
    keptInGrace: Int,
    keptNewerThanOldest: Int,
    skippedNotBatch: Int,
    /** The grace period the cycle used: the queue's (docs/format.md §6), or the collector's if longer. */
    gracePeriodMs: Long = 0L,
    /**
     * An index object the head's tree lists that was missing (a newer head expanded it and it was
     * collected): the cycle then deleted no segment or index object (docs/format.md §2.2).
     */
    missingIndex: Option[String] = None)

/**
 * Deletes batch files no manifest entry references (docs/format.md §6). It only reads the
 * manifest, so a fenced consumer's GC has no write power over it. A cycle lists first, then reads
 * the head; ages come from the store's clock only: a file goes once its last-modified time is a
 * grace period before t0, the manifest's last-modified time in the listing (a lower bound of the
 * head's). Producers re-upload anything whose PUT started half a grace period ago (by their own
 * monotonic clock), so no head written from t0 on can reference such a file; neither the GC host's
 * clock nor a producer's wall clock plays a part. It deletes nothing without its manifest (a wrong
 * path would read as an empty queue) and nothing under a data prefix another queue owns
 * ([[DataPrefixOwner]]).
 *
 * With a segmented head it reads the head and its index objects, never a segment: the refs' oldest
 * batch times bound every batch a segment holds, so rule 3 keeps them all; and it deletes segment and
 * index objects not reachable from the head by the same age rule (docs/format.md §2.2).
 */
final class GarbageCollector(
    store: ObjectStore,
    manifestPath: String,
    dataPathPrefix: String,
    gracePeriod: FiniteDuration,
    clock: Clock,
    metrics: MetricsRegistry = new MetricsRegistry) {

  private val log = LoggerFactory.getLogger(classOf[GarbageCollector])
  private val deletedCounter = metrics.counter(MetricNames.GcFilesDeleted)
  private val failedCounter = metrics.counter(MetricNames.GcFilesFailed)
  private val duration = metrics.histogram(MetricNames.GcDuration)
  /** Index objects are immutable: the ones read stay decoded across cycles (bounded). */
  private val tree = new SegmentTree(new ManifestStore(store, manifestPath))

  /**
   * Proves the data prefix is this queue's (claiming it if unclaimed); InvalidConfigException if not.
   * Returns the grace period a cycle uses: the queue's, or ours if longer. Creating the record gives
   * the queue ours, but never less than the default (a GC with a tiny one must not shorten what
   * producers are told).
   */
  def checkOwner(): Long = {
    val own = gracePeriod.toMillis
    val owner = DataPrefixOwner.claim(store, manifestPath, dataPathPrefix, clock,
      Some(math.max(own, DataPrefixOwner.DefaultGracePeriodMs)))
    math.max(own, owner.fold(own)(_.gcGracePeriodMs))
  }

  def runOnce(dryRun: Boolean = false): GcResult = {
    val started = clock.nanoTime()
    val listPrefix = if (dataPathPrefix.isEmpty) "" else dataPathPrefix.stripSuffix("/") + "/"
    val segmentPrefix = SegmentNames.prefix(manifestPath)
    // List BEFORE reading the head: the head then read is the listed manifest or a successor, so its
    // store time is at least the listed one, t0 (docs/format.md §6). Files written after the listing
    // are not candidates at all.
    val listed = {
      val data = store.list(listPrefix)
      if (manifestPath.startsWith(listPrefix)) data
      else data ++ store.list(manifestPath).filterNot(_.key.startsWith(listPrefix)) // the manifest and its segments
    }
    def noManifest = new IllegalQueueStateException(
      s"GC found no manifest at '$manifestPath': it deletes nothing without its queue's manifest (is the manifest path right?)")
    val t0 = listed.find(_.key == manifestPath).getOrElse(throw noManifest).lastModifiedMs
    val head = ManifestHead.parse(store.get(manifestPath).getOrElse(throw noManifest).bytes, manifestPath)
    val graceMs = checkOwner()
    val referenced = head.tailLocations.map(_._2).toSet
    val oldestReferenced = head.oldestReferencedBatchMs
    /** Written a grace period before t0, both by the store's clock (no overflow for an unknown time). */
    def old(info: ObjectInfo) = t0 - info.lastModifiedMs >= graceMs

    var keptReferenced, keptInGrace, keptNewer, skipped = 0
    def isIntent(key: String) = IntentCodec.parseIntentName(manifestPath, key).isDefined
    val batches = listed.filter { info =>
      val key = info.key
      if (!BatchNames.isBatchUnder(dataPathPrefix, key)) {
        if (key != manifestPath && !key.startsWith(segmentPrefix) && !isIntent(key) && key.startsWith(listPrefix))
          skipped += 1
        false
      } else if (referenced.contains(key)) { keptReferenced += 1; false }
      // Names compared with names, never with a clock: a batch in a segment is not older than its ref's oldest.
      else if (oldestReferenced.exists(BatchNames.ulidTimeMs(key).get >= _)) { keptNewer += 1; false }
      else if (!old(info)) { keptInGrace += 1; false }
      else true
    }.map(_.key)
    // Reachable from the head read (its refs and, through index objects, theirs); a missing index
    // hides which objects a newer head reaches through it, so then none is deleted.
    val reachable = tree.reachableKeys(head)
    reachable.left.foreach { k =>
      log.warn(s"GC of '$manifestPath': index object '$k' of the head it read is missing (a newer head expanded it " +
        "and it was collected); deleting no segment or index object this cycle")
    }
    // Unreachable and written a grace period before t0: every head that lists one is written within
    // grace / 2 of its PUT (producers make the edit again otherwise), so before t0, and nothing dropped
    // is listed again (docs/format.md §2.2, §6).
    val segments = listed.filter(_.key.startsWith(segmentPrefix)).filter { info =>
      SegmentNames.ulidTimeMs(manifestPath, info.key) match {
        case None => skipped += 1; false
        case Some(_) if reachable.fold(_ => true, _.contains(info.key)) => keptReferenced += 1; false
        case Some(_) if !old(info) => keptInGrace += 1; false
        case Some(_) => true
      }
    }.map(_.key)
    // An intent is appended only while fresh (< grace / 4 before the head, docs/format.md §5.4): one a
    // grace period before t0 can never be; its batches, unlisted, are collected as orphans.
    val intents = listed.filter(i => isIntent(i.key)).filter { info =>
      if (!old(info)) { keptInGrace += 1; false }
      else true
    }.map(_.key)
    val candidates = batches ++ segments ++ intents
    val (deleted, failed) =
      if (dryRun) (candidates, Seq.empty)
      else candidates.partition { key =>
        try { store.delete(key); true }
        catch { case NonFatal(e) => log.warn(s"GC could not delete '$key'; will retry next cycle", e); false }
      }
    if (!dryRun) { deletedCounter.add(deleted.size); failedCounter.add(failed.size) }
    duration.observe((clock.nanoTime() - started) / 1e9)
    GcResult(deleted, failed, keptReferenced, keptInGrace, keptNewer, skipped, graceMs, reachable.left.toOption)
  }
}
