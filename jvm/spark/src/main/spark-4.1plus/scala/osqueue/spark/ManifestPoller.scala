package osqueue.spark

import java.util.concurrent.atomic.AtomicLong

import osqueue.format.{Incarnation, ManifestHead}
import osqueue.queue.{ManifestStore, Snapshot}
import osqueue.store.{ConditionalRead, ObjectStore, ObjectVersion}

/**
 * Follows one manifest for a real-time reader. A poll is two steps, so that polls can overlap:
 * [[read]] (any thread) is the store request, conditional on the version known when it starts
 * ([[ObjectStore.getIfChanged]]: an idle poll transfers no bytes; S3: a 304; local: the file's
 * attributes), and [[take]] (the reader's thread, in the order the polls started) returns the head
 * (a v1 manifest or a segmented head) when it is newer than the last one taken, else None.
 * `requests` counts the reads, for the idle-cost figure.
 */
private[spark] final class ManifestPoller(store: ObjectStore, key: String) {
  private val manifests = new ManifestStore(store, key)
  private var lastVersion: Option[ObjectVersion] = None
  private var taken: Option[ManifestHead] = None
  private val reads = new AtomicLong

  def requests: Long = reads.get()

  /** The version of the last head taken: what the next read is conditional on. */
  def known: Option[ObjectVersion] = lastVersion

  /** One poll's store request, conditional on `since` (None: a plain read). Safe on any thread. */
  def read(since: Option[ObjectVersion]): ConditionalRead = {
    reads.incrementAndGet()
    since match {
      case Some(v) => store.getIfChanged(key, v)
      case None => store.get(key).fold[ConditionalRead](ConditionalRead.Absent)(ConditionalRead.Changed(_))
    }
  }

  /**
   * A read's outcome, taken in the order the reads started: the head when it changed since the last
   * one taken, else None (unchanged, no manifest yet, or an older head). Two reads in flight can be
   * served out of order, so a later read can return a version older than the one an earlier read
   * returned. Within one incarnation the manifest only moves forward (a higher epoch, or at the same
   * epoch no lower `nextSequence` or `firstSequence`), so such a head is recognised and dropped:
   * following it would look like entries removed under the reader. (A reset's new incarnation is
   * taken whatever its epoch: the reader then reads nothing more this batch, as after any reset.)
   */
  def take(r: ConditionalRead): Option[ManifestHead] = r match {
    case ConditionalRead.Changed(o) if !lastVersion.contains(o.version) =>
      val h = manifests.head(Snapshot(o.bytes, Some(o.version)))
      if (taken.exists(t => ManifestPoller.older(h, t))) None
      else {
        lastVersion = Some(o.version)
        taken = Some(h)
        Some(h)
      }
    case _ => None
  }

  /** One poll on the caller's thread: [[read]] then [[take]]. */
  def poll(): Option[ManifestHead] = take(read(lastVersion))
}

private[spark] object ManifestPoller {
  /** Whether `h` is an earlier state of the same incarnation of the manifest than `t`. */
  def older(h: ManifestHead, t: ManifestHead): Boolean =
    Incarnation.of(h.epoch) == Incarnation.of(t.epoch) && (h.epoch < t.epoch ||
      (h.epoch == t.epoch && (h.nextSequence < t.nextSequence || h.firstSequence < t.firstSequence)))
}
