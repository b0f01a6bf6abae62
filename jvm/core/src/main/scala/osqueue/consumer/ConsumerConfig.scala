package osqueue.consumer

import scala.concurrent.duration._

import osqueue.{DataLossException, InvalidConfigException}
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
    ackInterval: FiniteDuration = Duration.Zero,
    /**
     * When retention removed entries this reader had not read (a range below the queue's `low_water`,
     * docs/format.md §2.3), the read that finds it throws [[DataLossException]] naming the first lost
     * sequence and the exact count (true, the default); false: nothing is thrown. Either way the range is
     * reported once (`onDataLoss`, the `buffer.data_loss_events` / `buffer.dropped_entries` metrics) and
     * reading goes on after it.
     */
    failOnDataLoss: Boolean = true,
    /** Called with the [[DataLossException]] of each lost range (before it is thrown). */
    onDataLoss: DataLossException => Unit = ConsumerConfig.IgnoreDataLoss) {
  subscription.foreach(osqueue.queue.Subscriptions.validate)
  if (ackBatchSize < 1) throw new InvalidConfigException("ackBatchSize", ackBatchSize.toString, "must be >= 1")
  if (ackInterval < Duration.Zero)
    throw new InvalidConfigException("ackInterval", ackInterval.toString, "must be >= 0 (0: no coalescing)")
  if (gcInterval <= Duration.Zero) throw new InvalidConfigException("gcInterval", gcInterval.toString, "must be > 0")
  if (gcGracePeriod <= Duration.Zero)
    throw new InvalidConfigException("gcGracePeriod", gcGracePeriod.toString, "must be > 0")
}

object ConsumerConfig {
  /** The default `onDataLoss`: nothing beyond the metrics (and the exception, with `failOnDataLoss`). */
  val IgnoreDataLoss: DataLossException => Unit = _ => ()
}
