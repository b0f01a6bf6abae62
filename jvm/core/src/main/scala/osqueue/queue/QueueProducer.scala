package osqueue.queue

import java.util.concurrent.{CompletableFuture, LinkedBlockingQueue, TimeUnit}

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import osqueue.{AmbiguousCommitException, Clock, IllegalQueueStateException}
import osqueue.format.{BatchNames, ManifestCodec, MetadataItem, NewEntry, RawManifest}
import osqueue.metrics.{MetricNames, MetricsRegistry}

/** An uploaded batch waiting for its manifest entry. `reupload` copies it under a fresh ULID name. */
final class PendingLocation(
    @volatile var location: String,
    val metadata: IndexedSeq[MetadataItem],
    val reupload: () => String) {
  private[queue] val promise = new CompletableFuture[Long]()
}

/**
 * The producer side of the queue protocol: appends batch locations to the manifest with
 * compare-and-swap and **group commit** — one committer thread, and every location that becomes
 * ready while a write is in flight goes into the next write. Ambiguous outcomes are resolved by
 * re-reading the manifest and looking for our own locations (docs/format.md §5), so an entry is
 * never appended twice; stale uploads are re-uploaded before a write (§6), so GC cannot have
 * deleted anything this appends.
 */
final class QueueProducer(
    manifest: ManifestStore,
    policy: RetryPolicy,
    clock: Clock,
    metrics: MetricsRegistry,
    gcGracePeriodMs: Long,
    maxEntriesPerWrite: Int = 10000) extends AutoCloseable {

  private val pending = new LinkedBlockingQueue[PendingLocation]()
  private val loop = new CasLoop(manifest, policy, clock, metrics, "producer")
  private val reuploaded = metrics.counter(MetricNames.BatchesReuploaded)
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

  private def commitLoop(): Unit = {
    while (!closing || !pending.isEmpty) {
      val first = pending.poll(50, TimeUnit.MILLISECONDS)
      if (first != null) {
        val group = ArrayBuffer(first)
        while (group.size < maxEntriesPerWrite && !pending.isEmpty) group += pending.poll()
        try {
          val sequences = commit(group.toIndexedSeq)
          group.zip(sequences).foreach { case (p, s) => p.promise.complete(s) }
        } catch {
          case NonFatal(e) => group.foreach(_.promise.completeExceptionally(e))
        }
      }
    }
  }

  /** Appends the group as consecutive entries in one CAS write; returns their sequences. */
  import QueueProducer.Attempt

  private[queue] def commit(group: IndexedSeq[PendingLocation]): IndexedSeq[Long] = {
    val attempts = ArrayBuffer.empty[Attempt]
    var lastSent: Option[(Long, IndexedSeq[String])] = None
    loop.run[IndexedSeq[Long]] { (snapshot, previous) =>
      (previous, lastSent) match {
        case (Some(p), Some((base, locs))) =>
          attempts += new Attempt(base, locs, p.isInstanceOf[PreviousAttempt.Unknown])
        case _ =>
      }
      resolve(snapshot, attempts.toSeq) match {
        case Some(sequences) => CasStep.Done(sequences)
        case None =>
          refreshStaleUploads(group)
          val entries = group.map(p => NewEntry(p.location, p.metadata))
          val (bytes, base) = RawManifest.append(snapshot.raw, entries, manifest.key)
          lastSent = Some((base, entries.map(_.location)))
          CasStep.Write(bytes, () => base until base + group.size)
      }
    }
  }

  /**
   * Did one of our earlier writes land? Some(sequences) if so; None if none did (safe to write
   * again); AmbiguousCommit if a write with an unknown outcome can no longer be checked.
   */
  private def resolve(snapshot: Snapshot, attempts: Seq[Attempt]): Option[IndexedSeq[Long]] = {
    if (attempts.isEmpty) return None
    val present: Map[String, Long] = RawManifest.locations(snapshot.raw, manifest.key).map(_.swap).toMap
    // A write lands as one block, so its base is where any of its locations sits minus that
    // location's index (retries may carry the same locations at a later base; a dequeued prefix is fine).
    attempts.iterator.flatMap { a =>
      a.locations.iterator.zipWithIndex.collectFirst { case (l, i) if present.contains(l) => present(l) - i }
        .map(base => a.locations.indices.map(base + _))
    }.nextOption().orElse {
      val footer = ManifestCodec.decodeFooter(snapshot.raw, manifest.key)
      val first = present.values.minOption.getOrElse(footer.nextSequence)
      attempts.filter(a => a.unknownOutcome && !a.resolvedNotLanded).foreach { a =>
        // Not landed if nothing was appended since its base, or the entry at its base is someone else's.
        if (footer.nextSequence == a.base || first <= a.base) a.resolvedNotLanded = true
        else throw new AmbiguousCommitException(
          s"manifest '${manifest.describe}': a write of ${a.locations.size} entries at sequence ${a.base} " +
            s"had an unknown outcome and the entries from ${a.base} on were already dequeued; " +
            "not appending again to avoid duplicates")
      }
      None
    }
  }

  /** A location older than half the GC grace period is uploaded again under a fresh name (§6). */
  private def refreshStaleUploads(group: IndexedSeq[PendingLocation]): Unit = {
    val now = clock.nowMillis()
    group.foreach { p =>
      val age = BatchNames.ulidTimeMs(p.location).map(now - _).getOrElse(0L)
      if (age >= gcGracePeriodMs / 2) {
        p.location = p.reupload()
        reuploaded.increment()
      }
    }
  }
}

private object QueueProducer {
  /** One sent write: its locations and the sequence it would have started at. */
  final class Attempt(val base: Long, val locations: IndexedSeq[String], val unknownOutcome: Boolean) {
    var resolvedNotLanded = false
  }
}
