package osqueue.producer

import scala.concurrent.duration._

import osqueue.InvalidConfigException
import osqueue.format.{Compression, ManifestHead}
import osqueue.queue.RetryPolicy

/**
 * Producer settings (RFC 0001 `ProducerConfig`), with the RFC's defaults. `flushInterval` is the
 * producer's linger (Kafka's `linger.ms`): how long a batch waits for more inputs after its first.
 * 0 flushes each batch as soon as the flush thread has it; inputs that arrive meanwhile form the next.
 */
final case class ProducerConfig(
    manifestPath: String = "ingest/manifest",
    dataPathPrefix: String = "ingest",
    flushInterval: FiniteDuration = 100.millis,
    flushSizeBytes: Long = 64L << 20,
    maxBufferedInputs: Int = 1000,
    compression: Compression = Compression.None,
    /** Must match the GC's: uploads older than half of it are re-uploaded before enqueueing. */
    gcGracePeriod: FiniteDuration = 10.minutes,
    retry: RetryPolicy = RetryPolicy(),
    /**
     * K: once more than this many entries are queued, the oldest ones are sealed into segment
     * objects so each manifest write stays bounded (docs/format.md §2.2); below it the manifest is RFC v1.
     */
    manifestSegmentEntries: Int = ManifestHead.DefaultSegmentEntries,
    /**
     * A local directory for the producer's spool (docs/adr/0006 part 2; None: no spool). Every
     * `produce()` call is written to a log there first; batches are named in it before their PUT and
     * marked landed after their manifest write, so a producer started again on the same directory
     * (after a crash or kill -9, in either language) appends what had not landed, each entry exactly
     * once. One producer owns a directory at a time. With a spool, uploads and manifest writes are
     * retried without a budget: an outage only delays delivery.
     */
    spoolDir: Option[String] = None,
    /**
     * `queue` (`produce()` returns at once; the handle completes when the entries are in the manifest)
     * or `local` (needs `spoolDir`: `produce()` returns once its entries are forced to the spool).
     */
    durability: String = "queue",
    /** The cap on the spooled bytes not yet in the queue. */
    spoolMaxBytes: Long = Spool.DefaultMaxBytes,
    /**
     * `backpressure` (`produce()` blocks, then throws `QueueFullException` after `spoolFullTimeout`) or
     * `drop_oldest` (the oldest calls in no batch are dropped, counted in `buffer.spool_dropped_entries`;
     * their handles fail with `QueueFullException`).
     */
    spoolFullPolicy: String = "backpressure",
    spoolFullTimeout: FiniteDuration = Spool.DefaultFullTimeout,
    /**
     * How long an append waits for room under a queue's `backpressure` size cap (docs/format.md §2.3,
     * `osqueue.queue.QueueRetention`) before its handles fail with `QueueFullException` (0: at once).
     */
    queueFullTimeout: FiniteDuration = 30.seconds,
    /** How often the waiting append reads the head again. */
    queueFullRetryInterval: FiniteDuration = 1.second,
    /**
     * Flush the open batch as soon as none of this producer's batches is uploading or waiting for its
     * manifest write: a lone `produce()` costs no linger, and inputs that arrive while a batch is in
     * flight wait until it lands or `flushInterval` ends, whichever is first, so a busy producer still
     * batches. It adds requests for a producer whose inputs come further apart than one upload and
     * manifest write but closer than `flushInterval` (each then goes alone).
     */
    eagerFlush: Boolean = false,
    /**
     * `solo` (each producer process CASes its own groups) or `cooperative` (docs/adr/0007 part 1: after a
     * conflict it announces its batches in an intent object and every waiting producer appends every
     * fresh announced batch, so producers in separate processes stop contending). Not with a spool or
     * `manifestSegmentEntries` 2147483647 (cooperative commit writes v3 heads).
     */
    commitMode: String = "solo") {
  if (flushInterval < Duration.Zero)
    throw new InvalidConfigException("flushInterval", flushInterval.toString, "must be >= 0 (the linger)")
  if (flushSizeBytes <= 0) throw new InvalidConfigException("flushSizeBytes", flushSizeBytes.toString, "must be > 0")
  if (maxBufferedInputs <= 0)
    throw new InvalidConfigException("maxBufferedInputs", maxBufferedInputs.toString, "must be > 0")
  if (gcGracePeriod <= Duration.Zero)
    throw new InvalidConfigException("gcGracePeriod", gcGracePeriod.toString, "must be > 0")
  if (durability != "queue" && durability != "local")
    throw new InvalidConfigException("durability", durability, "use 'queue' or 'local'")
  if (durability == "local" && spoolDir.isEmpty)
    throw new InvalidConfigException("durability", durability, "'local' needs a spoolDir")
  if (spoolMaxBytes <= 0)
    throw new InvalidConfigException("spoolMaxBytes", spoolMaxBytes.toString, "must be a positive number of bytes")
  if (!Spool.FullPolicies.contains(spoolFullPolicy))
    throw new InvalidConfigException("spoolFullPolicy", spoolFullPolicy, "use 'backpressure' or 'drop_oldest'")
  if (spoolFullTimeout < Duration.Zero)
    throw new InvalidConfigException("spoolFullTimeout", spoolFullTimeout.toString, "must be >= 0")
  if (queueFullTimeout < Duration.Zero)
    throw new InvalidConfigException("queueFullTimeout", queueFullTimeout.toString, "must be >= 0")
  if (queueFullRetryInterval <= Duration.Zero)
    throw new InvalidConfigException("queueFullRetryInterval", queueFullRetryInterval.toString, "must be > 0")
  if (manifestSegmentEntries < 1)
    throw new InvalidConfigException("manifestSegmentEntries", manifestSegmentEntries.toString, "must be >= 1")
  osqueue.queue.CooperativeCommit.checkCommitMode(commitMode, manifestSegmentEntries, spooled = spoolDir.isDefined)
}
