package osqueue.store

import java.nio.ByteBuffer

/** An opaque object version: S3's ETag, a content hash on the local filesystem, a counter in memory. */
final case class ObjectVersion(token: String)

final case class VersionedObject(bytes: Array[Byte], version: ObjectVersion)

/**
 * A listed object. `lastModifiedMs`: when the store last wrote it, in ms since the Unix epoch by the
 * STORE's clock (S3 LastModified, GCS `updated`, Azure Last-Modified, a file's mtime); GC ages
 * objects by it, never by a writer's clock (docs/format.md §6).
 */
final case class ObjectInfo(key: String, size: Long, lastModifiedMs: Long)

object ObjectInfo {
  /** A listed object's time when the store gave none: "just now" forever, so GC never ages it. */
  val UnknownLastModifiedMs: Long = Long.MaxValue
}

/** What a conditional read ([[ObjectStore.getIfChanged]]) found. */
sealed trait ConditionalRead
object ConditionalRead {
  /** The object is still at the version the caller knows: no bytes were transferred. */
  case object NotModified extends ConditionalRead
  case object Absent extends ConditionalRead
  final case class Changed(obj: VersionedObject) extends ConditionalRead
}

/** The outcome of a conditional write. A thrown `StoreException` means the outcome is unknown. */
sealed trait CasOutcome
object CasOutcome {
  final case class Written(version: ObjectVersion) extends CasOutcome
  /** The condition did not hold (412/409): the object changed, or already existed. */
  case object PreconditionFailed extends CasOutcome
}

/**
 * The few object-store operations the queue needs. Keys are relative to the store root,
 * '/'-separated, and validated by [[ObjectKeys.validate]] (no escape from the root).
 *
 * Failures throw [[osqueue.StoreException]]. After a conditional write throws, the write may or
 * may not have been applied: callers resolve that by reading the object back.
 */
trait ObjectStore extends AutoCloseable {
  /** Where this store points, for messages: `s3://bucket/prefix`, `file:/dir`, `memory://name`. */
  def uri: String

  /** The object and its version, or None if it does not exist. */
  def get(key: String): Option[VersionedObject]

  /**
   * The object unless it is still at version `known`: a poll that transfers no bytes when nothing
   * changed (S3 and Azure: GET with `If-None-Match` answered 304; GCS: the generation from the
   * metadata; local: the file's attributes). This default reads the object and compares.
   */
  def getIfChanged(key: String, known: ObjectVersion): ConditionalRead = get(key) match {
    case None => ConditionalRead.Absent
    case Some(o) if o.version == known => ConditionalRead.NotModified
    case Some(o) => ConditionalRead.Changed(o)
  }

  /** The object's bytes without its version (batch reads), or None if it does not exist. */
  def getBytes(key: String): Option[Array[Byte]] = get(key).map(_.bytes)

  /**
   * [[getBytes]] as a buffer (to read, never to write), for a batch read that copies each record out of it once
   * (`BatchFetcher`): the local store maps the file rather than copying it onto the heap whole.
   */
  def getBuffer(key: String): Option[ByteBuffer] = getBytes(key).map(ByteBuffer.wrap)

  /** Unconditional write (batch files: ULID names are never reused). */
  def put(key: String, bytes: Array[Byte]): Unit

  /** Create only if the key does not exist. */
  def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome

  /** Overwrite only if the current version is `expected`. */
  def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome

  /** All objects whose key starts with `prefix` (recursively), in no particular order. */
  def list(prefix: String): Seq[ObjectInfo]

  /** Delete; deleting a missing key succeeds. */
  def delete(key: String): Unit

  /**
   * Deletes `keys`: one by one here; a store with a bulk delete overrides it (S3: DeleteObjects, one request
   * per 1,000 keys). A missing key is no error. Python: `osqueue.store.object_store.delete_many`.
   */
  def deleteMany(keys: Seq[String]): Unit = keys.foreach(delete)

  override def close(): Unit = ()
}

object ObjectKeys {
  /** Rejects keys that are absolute, contain '.'/'..'/empty segments, backslashes or NULs. */
  def validate(key: String): String = {
    def bad(reason: String) = throw new osqueue.InvalidObjectKeyException(key, reason)
    if (key == null || key.isEmpty) bad("empty key")
    if (key.startsWith("/")) bad("absolute keys are not allowed")
    if (key.contains("\\")) bad("backslashes are not allowed")
    if (key.contains("\u0000")) bad("NUL characters are not allowed")
    if (key.contains("://")) bad("keys are relative to the store root, not URIs")
    val segments = key.split("/", -1)
    if (segments.exists(_.isEmpty)) bad("empty path segment")
    if (segments.exists(s => s == "." || s == "..")) bad("'.' and '..' segments are not allowed")
    key
  }

  /**
   * Validates a `list` prefix: empty (everything), a key, a key ending with '/' (a "directory"),
   * or a partial last segment (`ingest/01J`). Returns it unchanged.
   */
  def validatePrefix(prefix: String): String = {
    if (prefix == null) throw new osqueue.InvalidObjectKeyException("null", "null prefix")
    if (prefix.nonEmpty) validate(prefix.stripSuffix("/"))
    prefix
  }

  /** Joins a prefix and a name with exactly one '/'. An empty prefix yields the name. */
  def join(prefix: String, name: String): String =
    if (prefix.isEmpty) name else prefix.stripSuffix("/") + "/" + name
}
