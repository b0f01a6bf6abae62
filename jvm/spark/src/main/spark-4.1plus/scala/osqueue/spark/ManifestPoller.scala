package osqueue.spark

import java.nio.file.{Files, NoSuchFileException, Path, Paths}
import java.nio.file.attribute.BasicFileAttributes
import java.util.concurrent.TimeUnit

import osqueue.format.ManifestHead
import osqueue.store.{LocalFileSystemStore, ObjectStore, ObjectVersion}

/**
 * Follows one manifest for a real-time reader: `poll()` returns the head when it changed since
 * the last poll, else None. On a local store the change is seen from the file's attributes (inode,
 * size, mtime: the store replaces the manifest by rename), so an idle poll reads no bytes; on S3 an
 * idle poll is one GET whose ETag equals the last one (not decoded). `requests` counts store reads
 * and stats, for the idle-cost figure.
 */
private[spark] final class ManifestPoller(store: ObjectStore, key: String) {
  private val localFile: Option[Path] = store match {
    case s: LocalFileSystemStore => Some(Paths.get(s.uri.stripPrefix("file:")).resolve(key))
    case _ => None
  }
  private var lastStat: Option[(AnyRef, Long, Long)] = None
  private var lastVersion: Option[ObjectVersion] = None
  @volatile var requests = 0L

  def poll(): Option[ManifestHead] = {
    val stat = localFile.map(statOf)
    if (stat.isDefined && stat == lastStat) None
    else {
      requests += 1
      store.get(key) match {
        case None => lastStat = stat; None // no manifest yet: no producer wrote
        case Some(o) if lastVersion.contains(o.version) => lastStat = stat; None
        case Some(o) =>
          lastStat = stat
          lastVersion = Some(o.version)
          Some(ManifestHead.parse(o.bytes, key)) // a v1 manifest or a segmented head
      }
    }
  }

  private def statOf(p: Path): (AnyRef, Long, Long) = {
    requests += 1
    try {
      val a = Files.readAttributes(p, classOf[BasicFileAttributes])
      (a.fileKey(), a.size(), a.lastModifiedTime().to(TimeUnit.NANOSECONDS))
    } catch { case _: NoSuchFileException => (null, -1L, -1L) }
  }
}
