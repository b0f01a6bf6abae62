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
    manifestSegmentEntries: Int = ManifestHead.DefaultSegmentEntries) {
  if (flushInterval < Duration.Zero)
    throw new InvalidConfigException("flushInterval", flushInterval.toString, "must be >= 0 (the linger)")
  if (flushSizeBytes <= 0) throw new InvalidConfigException("flushSizeBytes", flushSizeBytes.toString, "must be > 0")
  if (maxBufferedInputs <= 0)
    throw new InvalidConfigException("maxBufferedInputs", maxBufferedInputs.toString, "must be > 0")
  if (gcGracePeriod <= Duration.Zero)
    throw new InvalidConfigException("gcGracePeriod", gcGracePeriod.toString, "must be > 0")
  if (manifestSegmentEntries < 1)
    throw new InvalidConfigException("manifestSegmentEntries", manifestSegmentEntries.toString, "must be >= 1")
}
