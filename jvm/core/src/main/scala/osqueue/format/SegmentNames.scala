package osqueue.format

import osqueue.store.ObjectKeys

/** Segment objects of a segmented head (docs/format.md §2.2): `<manifestPath>.segments/<ULID>.segment`. */
object SegmentNames {
  val DirSuffix = ".segments"
  private val Suffix = ".segment"

  /** The "directory" holding a manifest's segments, with its trailing '/' (what GC lists). */
  def prefix(manifestPath: String): String = manifestPath + DirSuffix + "/"

  /** A fresh segment key named at `nowMs` (GC measures an unlisted segment's age from it). */
  def newKey(manifestPath: String, nowMs: Long): String =
    ObjectKeys.join(manifestPath + DirSuffix, BatchNames.newUlid(nowMs) + Suffix)

  /** The ULID time of a key that is exactly `<ULID>.segment` directly under the manifest's segments, else None. */
  def ulidTimeMs(manifestPath: String, key: String): Option[Long] = {
    val dir = prefix(manifestPath)
    if (!key.startsWith(dir) || key.substring(dir.length).contains('/')) None
    else BatchNames.ulidTimeMs(key, Suffix)
  }
}
