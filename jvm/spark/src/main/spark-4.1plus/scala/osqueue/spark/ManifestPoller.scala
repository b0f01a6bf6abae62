package osqueue.spark

import osqueue.format.ManifestHead
import osqueue.queue.{ManifestStore, Snapshot}
import osqueue.store.{ConditionalRead, ObjectStore, ObjectVersion}

/**
 * Follows one manifest for a real-time reader: `poll()` returns the head (a v1 manifest or a
 * segmented head) when it changed since the last poll, else None. Each poll after the first is a
 * conditional read ([[ObjectStore.getIfChanged]]): an idle poll transfers no bytes (S3: a 304;
 * local: the file's attributes). `requests` counts the polls, for the idle-cost figure.
 */
private[spark] final class ManifestPoller(store: ObjectStore, key: String) {
  private val manifests = new ManifestStore(store, key)
  private var lastVersion: Option[ObjectVersion] = None
  @volatile var requests = 0L

  def poll(): Option[ManifestHead] = {
    requests += 1
    val read = lastVersion match {
      case Some(v) => store.getIfChanged(key, v)
      case None => store.get(key).fold[ConditionalRead](ConditionalRead.Absent)(ConditionalRead.Changed(_))
    }
    read match {
      case ConditionalRead.Changed(o) =>
        lastVersion = Some(o.version)
        Some(manifests.head(Snapshot(o.bytes, Some(o.version))))
      case _ => None // unchanged, or no manifest yet (no producer wrote)
    }
  }
}
