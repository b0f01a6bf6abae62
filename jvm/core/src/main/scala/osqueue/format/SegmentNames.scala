package osqueue.format

import osqueue.store.ObjectKeys

/**
 * Segment and index objects of a segmented head (docs/format.md §2.2):
 * `<manifestPath>.segments/<ULID>.segment` and `<manifestPath>.segments/<ULID>.index`.
 */
object SegmentNames {
  val DirSuffix = ".segments"
  private val Suffix = ".segment"
  private val IndexSuffix = ".index"

  /** The "directory" holding a manifest's segments and index objects, with its trailing '/' (what GC lists). */
  def prefix(manifestPath: String): String = manifestPath + DirSuffix + "/"

  /** A fresh segment key named at `nowMs` (GC measures an unreachable segment's age from it). */
  def newKey(manifestPath: String, nowMs: Long): String =
    ObjectKeys.join(manifestPath + DirSuffix, BatchNames.newUlid(nowMs) + Suffix)

  /** A fresh index object key named at `nowMs`, as [[newKey]]. */
  def newIndexKey(manifestPath: String, nowMs: Long): String =
    ObjectKeys.join(manifestPath + DirSuffix, BatchNames.newUlid(nowMs) + IndexSuffix)

  /**
   * The ULID time of a key that is exactly `<ULID>.segment` or `<ULID>.index` directly under the
   * manifest's segments, else None (GC deletes nothing else there).
   */
  def ulidTimeMs(manifestPath: String, key: String): Option[Long] = {
    val dir = prefix(manifestPath)
    if (!key.startsWith(dir) || key.substring(dir.length).contains('/')) None
    else BatchNames.ulidTimeMs(key, Suffix).orElse(BatchNames.ulidTimeMs(key, IndexSuffix))
  }
}
