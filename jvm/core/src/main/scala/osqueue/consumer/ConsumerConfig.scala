package osqueue.consumer

import scala.concurrent.duration._

import osqueue.InvalidConfigException
import osqueue.queue.RetryPolicy

/** Consumer settings (RFC 0001 `ConsumerConfig` plus the GC fields the RFC puts on it). */
final case class ConsumerConfig(
    manifestPath: String = "ingest/manifest",
    dataPathPrefix: String = "ingest",
    /** `ack()` dequeues every this many acks (RFC: 100); `flush()` and `close()` dequeue the rest. */
    ackBatchSize: Int = 100,
    runGc: Boolean = true,
    gcInterval: FiniteDuration = 5.minutes,
    gcGracePeriod: FiniteDuration = 10.minutes,
    retry: RetryPolicy = RetryPolicy(),
    /** A named subscription to read (docs/adr/0005): its own position and fence; None: the RFC's unnamed consumer. */
    subscription: Option[String] = None,
    /** Create the subscription at the queue's first entry when `initialize` finds none. */
    createSubscription: Boolean = false,
    /**
     * Above zero, acks are coalesced (docs/adr/0005, "Ack coalescing"): `ack` and `ackThrough` write the
     * manifest at most once per interval, a read writes the acks still pending once it has passed, and
     * `flush`/`close` write at once. Zero: `ack` writes every `ackBatchSize` acks, `ackThrough` at once.
     */
    ackInterval: FiniteDuration = Duration.Zero) {
  subscription.foreach(osqueue.queue.Subscriptions.validate)
  if (ackBatchSize < 1) throw new InvalidConfigException("ackBatchSize", ackBatchSize.toString, "must be >= 1")
  if (ackInterval < Duration.Zero)
    throw new InvalidConfigException("ackInterval", ackInterval.toString, "must be >= 0 (0: no coalescing)")
  if (gcInterval <= Duration.Zero) throw new InvalidConfigException("gcInterval", gcInterval.toString, "must be > 0")
  if (gcGracePeriod <= Duration.Zero)
    throw new InvalidConfigException("gcGracePeriod", gcGracePeriod.toString, "must be > 0")
}
