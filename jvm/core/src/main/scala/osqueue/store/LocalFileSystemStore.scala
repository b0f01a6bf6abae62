package osqueue.store

import java.io.IOException
import java.nio.ByteBuffer
import java.nio.channels.FileChannel
import java.nio.file._
import java.nio.file.attribute.BasicFileAttributes
import java.security.MessageDigest
import java.util.HexFormat

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._
import scala.util.Using

import osqueue.{Clock, InvalidObjectKeyException, StoreException, SystemClock, SystemRandomSource}

/**
 * An object store on a local filesystem directory (docs/format.md §7): key `K` is `<root>/K`.
 *
 * Versions are `sha256:<hex>` of the content. Every write goes to a hidden temp file that is
 * fsynced and atomically renamed over the target (then the directory is fsynced), so readers
 * never see a partial object and take no lock. Conditional writes hold a [[LocalFileLock]] on
 * the hidden `<dir>/.<name>.lock` while they compare and write; the Python implementation takes
 * the same POSIX record lock, so JVM and Python writers exclude each other.
 *
 * Names starting with '.' are reserved for those internal files: such key segments are rejected
 * and never listed. Keys are resolved under the root and checked (through `toRealPath`) not to
 * leave it via symlinks.
 */
final class LocalFileSystemStore(root: Path, lockTimeout: FiniteDuration = 30.seconds, clock: Clock = SystemClock)
    extends ObjectStore {
  private val rootPath: Path = root.toAbsolutePath.normalize()

  override val uri: String = s"file:$rootPath"

  private lazy val mapsFiles: Boolean = {
    var dir = rootPath // the root may not exist yet: its filesystem is its nearest existing ancestor's
    while (dir.getParent != null && !Files.exists(dir)) dir = dir.getParent
    try LocalFileSystemStore.mapsFilesOn(Files.getFileStore(dir).`type`(), System.getProperty("os.name", ""))
    catch { case _: IOException => false }
  }

  override def get(key: String): Option[VersionedObject] = {
    val path = resolve(key)
    io("read", key) {
      if (Files.isDirectory(path)) None
      else
        try {
          val bytes = Files.readAllBytes(path)
          Some(VersionedObject(bytes, LocalFileSystemStore.versionOf(bytes)))
        } catch { case _: NoSuchFileException => None }
    }
  }

  /**
   * The file's attributes (file key, size, modification time) against those it had when it was last
   * read at `known`: a write replaces the file by rename, so they change; unchanged, no bytes are read.
   *
   * Exact on coarse timestamps too (the racy-git rule): a rename may reuse the freed inode with the
   * same size within one mtime tick (ext4 with 1 s timestamps, FAT's 2 s, NFS, SMB), so attributes
   * are remembered only when the file's mtime is older than the read by more than
   * [[LocalFileSystemStore.TimestampGranularityMs]]; any later rewrite then gets a later mtime. A
   * file written just before is read and hashed instead, until it is that old: an idle queue costs a
   * `stat` per poll after the first seconds.
   */
  override def getIfChanged(key: String, known: ObjectVersion): ConditionalRead = {
    val path = resolve(key)
    io("read", key) {
      val checkedAtMs = clock.nowMillis() // before the stat: the file's own clock is this host's
      val before = attributesOf(path)
      if (before.isEmpty) ConditionalRead.Absent
      else if (Option(lastRead.get(key)).contains((before.get, known))) ConditionalRead.NotModified
      else get(key) match {
        case None => ConditionalRead.Absent
        case Some(o) =>
          // Remembered only if the file did not change while it was read, and no rewrite can share its mtime.
          val settled = before.get.modifiedMs < checkedAtMs - LocalFileSystemStore.TimestampGranularityMs
          if (settled && attributesOf(path) == before) lastRead.put(key, (before.get, o.version))
          else lastRead.remove(key)
          if (o.version == known) ConditionalRead.NotModified else ConditionalRead.Changed(o)
      }
    }
  }

  /** Per key: the file's attributes and the version read at them, for [[getIfChanged]]. */
  private val lastRead =
    new java.util.concurrent.ConcurrentHashMap[String, (LocalFileSystemStore.FileAttributes, ObjectVersion)]()

  private def attributesOf(path: Path): Option[LocalFileSystemStore.FileAttributes] =
    try {
      val a = Files.readAttributes(path, classOf[BasicFileAttributes])
      if (a.isDirectory) None
      else Some(LocalFileSystemStore.FileAttributes(a.fileKey(), a.size(), a.lastModifiedTime().toString,
          a.lastModifiedTime().toMillis))
    } catch { case _: NoSuchFileException => None }

  /** No content hash: batch reads never need the version. */
  override def getBytes(key: String): Option[Array[Byte]] = {
    val path = resolve(key)
    io("read", key) {
      if (Files.isDirectory(path)) None
      else
        try Some(Files.readAllBytes(path))
        catch { case _: NoSuchFileException => None }
    }
  }

  /**
   * The file mapped read-only: its bytes are read from the page cache where they are used, with no
   * copy of the whole file onto the heap (a batch read copies each record out once). Files are only
   * ever replaced by rename or deleted, never changed in place, so a mapping keeps the bytes it
   * was made over. A file too large to map, or a root on a filesystem not known to be a local
   * disk's, is read as [[getBytes]] reads it: on a network or FUSE filesystem a file deleted by
   * another host can fault a mapping mid-read, and Windows refuses to delete a mapped file.
   */
  override def getBuffer(key: String): Option[ByteBuffer] = {
    val path = resolve(key)
    if (!mapsFiles) return getBytes(key).map(ByteBuffer.wrap)
    io("read", key) {
      if (Files.isDirectory(path)) None
      else
        try Using.resource(FileChannel.open(path, StandardOpenOption.READ)) { ch =>
            val size = ch.size()
            if (size > Int.MaxValue) getBytes(key).map(ByteBuffer.wrap)
            else Some(ch.map(FileChannel.MapMode.READ_ONLY, 0, size))
          }
        catch { case _: NoSuchFileException => None }
    }
  }

  override def put(key: String, bytes: Array[Byte]): Unit = {
    val path = resolve(key)
    io("write", key) {
      ensureDirectory(path.getParent)
      writeAtomically(path, bytes)
    }
  }

  override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome =
    conditionalPut(key, bytes, "put-if-absent")(_.isEmpty)

  override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome =
    conditionalPut(key, bytes, "put-if-version-matches")(_.contains(expected))

  override def list(prefix: String): Seq[ObjectInfo] = {
    ObjectKeys.validatePrefix(prefix)
    // Walk only the directory holding the prefix's last (possibly partial) segment.
    val slash = prefix.lastIndexOf('/')
    val dirKey = if (slash < 0) "" else prefix.substring(0, slash)
    val namePrefix = prefix.substring(slash + 1)
    val dir = if (dirKey.isEmpty) rootPath else resolve(dirKey)
    io("list", prefix) {
      val out = Vector.newBuilder[ObjectInfo]
      walk(dir, dirKey, namePrefix, out)
      out.result()
    }
  }

  override def delete(key: String): Unit = {
    val path = resolve(key)
    // A directory is not an object: nothing to delete (as for a missing key).
    io("delete", key)(if (!Files.isDirectory(path, LinkOption.NOFOLLOW_LINKS)) Files.deleteIfExists(path))
  }

  private def conditionalPut(key: String, bytes: Array[Byte], op: String)(holds: Option[ObjectVersion] => Boolean): CasOutcome = {
    val path = resolve(key)
    io(op, key) {
      val dir = path.getParent
      ensureDirectory(dir)
      val lockFile = dir.toRealPath().resolve(s".${path.getFileName}.lock")
      LocalFileLock.withLock(lockFile, lockTimeout, s"$uri key '$key'") {
        val current =
          try Some(LocalFileSystemStore.versionOf(Files.readAllBytes(path)))
          catch { case _: NoSuchFileException => None }
        if (!holds(current)) CasOutcome.PreconditionFailed
        else {
          writeAtomically(path, bytes)
          CasOutcome.Written(LocalFileSystemStore.versionOf(bytes))
        }
      }
    }
  }

  /** Temp file in the same directory, fsync, atomic rename over the target, fsync the directory. */
  private def writeAtomically(path: Path, bytes: Array[Byte]): Unit = {
    val dir = path.getParent
    val tmp = dir.resolve(s".${path.getFileName}.tmp-${java.lang.Long.toHexString(SystemRandomSource.nextLong())}")
    try {
      Using.resource(FileChannel.open(tmp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) { ch =>
        val buf = ByteBuffer.wrap(bytes)
        while (buf.hasRemaining) ch.write(buf)
        ch.force(true)
      }
      Files.move(tmp, path, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING)
    } finally Files.deleteIfExists(tmp)
    LocalFileSystemStore.fsyncDirectory(dir)
  }

  /** Creates missing directories (the root too) one by one, fsyncing each parent so the new entry is durable. */
  private def ensureDirectory(dir: Path): Unit =
    if (!Files.isDirectory(dir)) {
      val parent = dir.getParent
      if (parent != null) ensureDirectory(parent)
      try Files.createDirectory(dir)
      catch { case _: FileAlreadyExistsException if Files.isDirectory(dir) => () }
      if (parent != null) LocalFileSystemStore.fsyncDirectory(parent)
    }

  private def walk(dir: Path, dirKey: String, namePrefix: String, out: scala.collection.mutable.Builder[ObjectInfo, Vector[ObjectInfo]])
      : Unit = {
    val entries =
      try Using.resource(Files.newDirectoryStream(dir))(_.asScala.toVector)
      catch { case _: NoSuchFileException | _: NotDirectoryException => Vector.empty }
    for (entry <- entries) {
      val name = entry.getFileName.toString
      if (!name.startsWith(".") && name.startsWith(namePrefix)) {
        val key = ObjectKeys.join(dirKey, name)
        // Not following links: a symlinked file or directory is not part of the store.
        val attrs =
          try Some(Files.readAttributes(entry, classOf[BasicFileAttributes], LinkOption.NOFOLLOW_LINKS))
          catch { case _: NoSuchFileException => None }
        attrs.foreach { a =>
          if (a.isDirectory) walk(entry, key, "", out)
          else if (a.isRegularFile) out += ObjectInfo(key, a.size(), a.lastModifiedTime().toMillis)
        }
      }
    }
  }

  /** Validates `key` and returns its path, checking that no symlink leads outside the root. */
  private def resolve(key: String): Path = {
    ObjectKeys.validate(key)
    if (key.split('/').exists(_.startsWith(".")))
      throw new InvalidObjectKeyException(key, "names starting with '.' are reserved for the local store's internal files")
    val path = rootPath.resolve(key)
    if (Files.exists(rootPath)) {
      // The deepest existing path among the target and its parents must stay under the real root.
      val realRoot = io("resolve", key)(rootPath.toRealPath())
      // (A dangling link counts as missing: nothing outside the root is reachable through it.)
      var existing = path
      while (existing != rootPath && !Files.exists(existing)) existing = existing.getParent
      if (!io("resolve", key)(existing.toRealPath()).startsWith(realRoot))
        throw new InvalidObjectKeyException(key, s"resolves outside the store root $rootPath (through a symbolic link)")
    }
    path
  }

  private def io[T](op: String, key: String)(body: => T): T =
    try body
    catch {
      case e: IOException => throw new StoreException(s"local store $uri: $op of '$key' failed: $e", e)
    }
}

object LocalFileSystemStore {
  /**
   * More than the coarsest file timestamp (FAT's 2 s; ext4 with 128-byte inodes, HFS+: 1 s) plus the
   * kernel's coarse clock lag: a file whose mtime is older than this when read cannot share its mtime
   * with a later rewrite.
   */
  val TimestampGranularityMs = 3000L

  /** Filesystem types (as Linux and macOS name them) whose files a batch read may map. */
  val LocalDiskTypes: Set[String] = Set("ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "apfs", "hfs")

  /** Whether [[LocalFileSystemStore.getBuffer]] maps files on a filesystem of `fsType` under `osName`. */
  private[store] def mapsFilesOn(fsType: String, osName: String): Boolean =
    !osName.startsWith("Windows") && LocalDiskTypes.contains(fsType)

  /** What [[LocalFileSystemStore.getIfChanged]] compares; `modified` at full precision, `modifiedMs` to age it. */
  private final case class FileAttributes(fileKey: Any, size: Long, modified: String, modifiedMs: Long)

  /** `sha256:<lower-case hex>` of the bytes (docs/format.md §7). */
  def versionOf(bytes: Array[Byte]): ObjectVersion =
    ObjectVersion("sha256:" + HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes)))

  private[store] def fsyncDirectory(dir: Path): Unit =
    Using.resource(FileChannel.open(dir, StandardOpenOption.READ))(_.force(true))
}
