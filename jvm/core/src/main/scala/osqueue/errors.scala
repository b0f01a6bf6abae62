package osqueue

/**
 * The public kind of every osqueue failure: what a caller can do about it. Serializable, as the
 * exceptions holding it are (Spark sends a task's failure to the driver; see [[osqueue.format.Compression]]).
 */
sealed abstract class ErrorKind(val name: String) extends Serializable
object ErrorKind {
  /** A bad option, URI or argument: fix the input. */
  case object Configuration extends ErrorKind("Configuration")
  /** Stored bytes are corrupt, of an unknown version, or missing: needs an operator. */
  case object PersistentState extends ErrorKind("PersistentState")
  /** Another consumer took over the queue (epoch bump): this one must stop. */
  case object Fenced extends ErrorKind("Fenced")
  /** The store failed or contention did not settle: the same call may succeed later. */
  case object Transient extends ErrorKind("Transient")
  /** A call on an object in the wrong state (closed producer, out-of-order ack). */
  case object Operation extends ErrorKind("Operation")
}

/** Base of every error osqueue raises on purpose. Python mirrors the names with an `Error` suffix. */
sealed abstract class OsqueueException(message: String, val kind: ErrorKind, cause: Throwable = null)
    extends RuntimeException(message, cause)

/** An option or argument is invalid; the message names it and echoes the value. */
final class InvalidConfigException(val option: String, val value: String, val hint: String)
    extends OsqueueException(s"invalid value for '$option': '$value'. $hint", ErrorKind.Configuration)

/** An object key would escape the store root or is not a plain relative key. */
final class InvalidObjectKeyException(val key: String, reason: String)
    extends OsqueueException(s"invalid object key '$key': $reason", ErrorKind.Configuration)

/** A manifest object does not decode. `key` names the object in its store. */
final class CorruptManifestException(val key: String, detail: String)
    extends OsqueueException(s"corrupt queue manifest '$key': $detail", ErrorKind.PersistentState)

/**
 * A batch object does not decode, or (`integrityMismatch`) does not match its entry's integrity
 * record (docs/format.md §2.1: the Spark source then follows `failOnDataLoss`). `key` names the object.
 */
final class CorruptBatchException(val key: String, detail: String, cause: Throwable = null,
    val integrityMismatch: Boolean = false)
    extends OsqueueException(s"corrupt data batch '$key': $detail", ErrorKind.PersistentState, cause)

/** A manifest or batch was written by a newer (or unknown) format version; `reads`: the versions the refusing reader reads. */
final class UnsupportedFormatVersionException(val key: String, val objectType: String, val version: Int,
    val reads: Seq[Int] = Seq(1))
    extends OsqueueException(
      s"$objectType '$key' has format version $version; this osqueue reads " +
        (if (reads.size == 1) s"version ${reads.head}" else s"versions ${reads.init.mkString(", ")} and ${reads.last}") +
        " only (upgrade osqueue)",
      ErrorKind.PersistentState)

/** A manifest entry points at a batch object that does not exist. */
final class BatchNotFoundException(val key: String, val sequence: Long)
    extends OsqueueException(
      s"data batch '$key' (sequence $sequence) is referenced by the manifest but does not exist",
      ErrorKind.PersistentState)

/** This consumer's epoch is no longer the manifest's: a newer consumer fenced it. */
final class FencedException(val ownEpoch: Long, val currentEpoch: Long,
    val reason: String = "another consumer initialized the queue")
    extends OsqueueException(
      s"consumer with epoch $ownEpoch was fenced: the queue manifest is now at epoch $currentEpoch ($reason)",
      ErrorKind.Fenced)

/**
 * A sink writer's generation is no longer current: a newer driver with the same writer id
 * claimed the writer (docs/adr/0002), so this one must not append anything more.
 */
final class WriterFencedException(val writerId: String, val ownGeneration: Long, val currentGeneration: Long)
    extends OsqueueException(
      s"sink writer '$writerId' with generation $ownGeneration was fenced: generation $currentGeneration " +
        "now owns it (a newer driver of the same query or writerId started)",
      ErrorKind.Fenced)

/** A resume point that the queue cannot honour without skipping or replaying entries. */
final class ResumePointException(message: String) extends OsqueueException(message, ErrorKind.PersistentState)

/** Compare-and-swap on the manifest kept conflicting until the retry budget ran out. */
final class ConflictRetriesExhaustedException(val key: String, val attempts: Int, val elapsedMs: Long)
    extends OsqueueException(
      s"manifest '$key' update gave up after $attempts conflicting attempts in $elapsedMs ms " +
        "(too many concurrent writers; raise the retry budget or add group commit)",
      ErrorKind.Transient)

/** A write's outcome could not be determined (its reply was lost and the evidence is gone). */
final class AmbiguousCommitException(message: String, cause: Throwable = null)
    extends OsqueueException(message, ErrorKind.Transient, cause)

/**
 * A producer spool's log file is damaged in the middle (a record that does not check is followed by a
 * valid one), so it is not a torn tail; nothing is uploaded from the spool until an operator moves the
 * file away (docs/adr/0006, part 2).
 */
final class CorruptSpoolException(val path: String, val offset: Long, detail: String)
    extends OsqueueException(
      s"corrupt producer spool file '$path' at offset $offset: $detail; move the file away to start",
      ErrorKind.PersistentState)

/** A cap was reached: a producer spool's `spoolMaxBytes` (or a queue's size cap, ADR 0005). */
final class QueueFullException(message: String) extends OsqueueException(message, ErrorKind.Transient)

/**
 * Retention removed `count` entries from `first` on before the reader (`subscription`, None: the unnamed reader) read
 * them (docs/format.md §2.3, ADR 0005).
 */
final class DataLossException(val subscription: Option[String], val first: Long, val count: Long)
    extends OsqueueException(
      s"data loss: retention removed $count entries ($first..${first + count - 1}) before " +
        subscription.fold("the unnamed reader")(s => s"subscription '$s'") + " read them",
      ErrorKind.PersistentState
    )

/** The object store failed (I/O error, 5xx, timeout, unreachable endpoint). */
final class StoreException(message: String, cause: Throwable = null)
    extends OsqueueException(message, ErrorKind.Transient, cause)

/**
 * The object store endpoint (S3, GCS or Azure) does not honour conditional writes (create only if
 * absent, replace only if unchanged): a store that accepts a condition and overwrites anyway would
 * lose entries without an error, so osqueue refuses it (docs/format.md §8). Thrown by the probe a
 * store runs before its first conditional write, and when a replace conditional on the object's
 * current version keeps failing.
 */
final class ConditionalWritesNotHonouredException(val endpoint: String, val detail: String)
    extends OsqueueException(
      s"the object store endpoint $endpoint does not honour conditional writes: $detail. osqueue needs " +
        "create-if-absent and replace-if-unchanged writes to keep the manifest consistent and refuses this store",
      ErrorKind.Configuration)

/** A call on an object in the wrong state: closed producer or consumer, out-of-order ack. */
final class IllegalQueueStateException(message: String) extends OsqueueException(message, ErrorKind.Operation)
