package osqueue.queue

import java.util.concurrent.{CompletableFuture, LinkedBlockingQueue, TimeUnit}

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import osqueue.{Clock, IllegalQueueStateException, RandomSource, SystemRandomSource}
import osqueue.format.MetadataItem
import osqueue.metrics.MetricsRegistry

/**
 * An uploaded batch waiting for its manifest entry. `reupload` copies it under a fresh ULID name.
 * `uploadStartedNanos`: when its PUT started, by the appender's clock's `nanoTime` (None if the
 * upload ran elsewhere, as the Spark sink's on executors: its ULID time is used then).
 */
final class PendingLocation(
    @volatile var location: String,
    val metadata: IndexedSeq[MetadataItem],
    val reupload: () => String,
    val extension: Array[Byte] = Array.emptyByteArray,
    @volatile var uploadStartedNanos: Option[Long] = None) {
  private[queue] val promise = new CompletableFuture[Long]()
}

/**
 * The producer side of the queue protocol with **group commit**: one committer thread, and every
 * location that becomes ready while a manifest write is in flight goes into the next write
 * (through a [[ManifestAppender]]). `segmentEntries` is K (docs/format.md §2.2): 2048 by default;
 * `Int.MaxValue` never seals, keeping the queue RFC v1. `commitMode` `cooperative`: producers in separate
 * processes append each other's announced batches ([[CooperativeCommit]], docs/adr/0007 part 1).
 */
final class QueueProducer(
    manifest: ManifestStore,
    policy: RetryPolicy,
    clock: Clock,
    metrics: MetricsRegistry,
    gcGracePeriodMs: Long,
    maxEntriesPerWrite: Int = 10000,
    random: RandomSource = SystemRandomSource,
    segmentEntries: Int = osqueue.format.ManifestHead.DefaultSegmentEntries,
    /** How long an append waits for room under a `backpressure` size cap (docs/format.md §2.3). */
    queueFullWait: QueueFullWait = QueueFullWait(),
    commitMode: String = CooperativeCommit.Solo) extends AutoCloseable {
  CooperativeCommit.checkCommitMode(commitMode, segmentEntries)

  private val pending = new LinkedBlockingQueue[PendingLocation]()
  private val appender = new ManifestAppender(manifest, policy, clock, metrics, gcGracePeriodMs, random = random,
    segmentEntries = segmentEntries, queueFullWait = queueFullWait, commitMode = commitMode)

  /** The cooperative committer (`commitMode = "cooperative"`, docs/adr/0007 part 1), if any. */
  private[osqueue] def cooperative: Option[CooperativeCommitter] = appender.cooperative
  @volatile private var closing = false
  private val committer = new Thread(() => commitLoop(), "osqueue-manifest-committer")
  committer.setDaemon(true)
  committer.start()

  /** Queues a location for the next manifest write; completes with its sequence once durable. */
  def enqueue(p: PendingLocation): CompletableFuture[Long] = {
    if (closing) p.promise.completeExceptionally(new IllegalQueueStateException("queue producer is closed"))
    else pending.put(p)
    p.promise
  }

  /** Finishes every queued write, then stops the committer thread. */
  override def close(): Unit = {
    closing = true
    committer.join()
  }

  private def drain(group: ArrayBuffer[PendingLocation]): ArrayBuffer[PendingLocation] = {
    while (group.size < maxEntriesPerWrite && !pending.isEmpty) group += pending.poll()
    group
  }
  // A cooperative producer announces what was queued while its group waits as its next group (ADR 0007 s. 15).
  cooperative.foreach(_.takeQueued = () => drain(ArrayBuffer.empty).toIndexedSeq)

  private def commitLoop(): Unit = {
    var ahead = cooperative.flatMap(_.nextAhead())
    while (!closing || !pending.isEmpty || ahead.isDefined) {
      val first = if (ahead.isDefined) null else pending.poll(50, TimeUnit.MILLISECONDS)
      if (first != null || ahead.isDefined) {
        val group = ahead.fold(drain(ArrayBuffer(first)))(g => ArrayBuffer(g.pending: _*))
        try {
          val sequences = ahead.fold(appender.append(group.toIndexedSeq))(g => cooperative.get.commitAhead(g))
          group.zip(sequences).foreach { case (p, s) => p.promise.complete(s) }
        } catch {
          case NonFatal(e) => group.foreach(_.promise.completeExceptionally(e))
        }
      }
      ahead = cooperative.flatMap(_.nextAhead())
    }
  }
}
