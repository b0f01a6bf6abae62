package osqueue.spark

import java.util.concurrent.ConcurrentHashMap

import scala.concurrent.duration.FiniteDuration
import scala.util.control.NonFatal

import org.apache.spark.internal.Logging

import osqueue.Clock
import osqueue.format.{EntryTag, Incarnation, ManifestEntry, ManifestHead}
import osqueue.metrics.MetricsRegistry
import osqueue.queue.{BackgroundDequeuer, ManifestStore, QueueConsumer, RetryPolicy, VersionedManifest}
import osqueue.store.ObjectStore

/**
 * The stream driver's handle on its queue. The first read takes the queue over (epoch bump, then
 * `onTakeOver`), fencing any earlier reader; every read after is conditional on the version last
 * read. `poll` is `latestOffset`'s read, with the idle backoff. `commit` hands a committed end to the
 * background dequeuer (the manifest CAS is off Spark's critical path; commits coalesce into one
 * write), and `stop` dequeues through the last committed batch and flushes the dequeuer, up to
 * [[DriverQueue.DequeueFlushTimeoutMs]]. A fence the dequeuer met fails the next read.
 */
private[spark] final class DriverQueue(store: ObjectStore, location: QueueLocation, pollInterval: FiniteDuration,
    maxPollInterval: FiniteDuration, dataLoss: DataLossReporter, clock: Clock, onTakeOver: Long => Unit = _ => (),
    subscription: Option[String] = None, createSubscription: Boolean = false)
    extends Logging {
  private val manifests = new ManifestStore(store, location.manifestPath)
  private val consumer = new QueueConsumer(manifests, RetryPolicy(), clock, new MetricsRegistry,
    subscription = subscription, createSubscription = createSubscription)
  private val dequeuer = new BackgroundDequeuer(consumer, s"'${location.identity}'", clock)
  /** The manifest head as last read, with its version: the next read is conditional on it. */
  @volatile private var lastRead: Option[VersionedManifest] = None
  /** poll's idle backoff: no manifest read before `nextPollAt` (nanoTime), after `idleWaitMs` of quiet. */
  @volatile private var nextPollAt = 0L
  @volatile private var idleWaitMs = 0L
  /** Checkpoint positions found ahead of a reset queue: Spark commits them later, and they must ack nothing. */
  private val preResetEnds = ConcurrentHashMap.newKeySet[Long]()

  /** Takes over the queue on first use. */
  lazy val epoch: Long = {
    subscription.filterNot(_ => createSubscription).foreach { name =>
      val s = manifests.read()
      if (s.version.isEmpty || manifests.head(s).subscription(name).isEmpty)
        throw OsqueueExceptions.noSubscription(name, location.identity)
    }
    val e = consumer.initialize(None)
    logInfo(s"osqueue source on '${location.identity}' took over " +
      s"${subscription.fold("the queue")(n => s"subscription '$n'")} at epoch ${java.lang.Long.toUnsignedString(e)}")
    onTakeOver(e)
    e
  }

  /** The manifest writes this reader's commits made so far (coalesced: docs/adr/0005, "Ack coalescing"). */
  def ackWrites: Long = dequeuer.dequeueRuns

  /** Where this reader's record in the head said to start when it took over (a subscription's `next`). */
  def readerNext: Option[Long] = consumer.readerNext

  /** The subscription's incarnation once taken over (None: the unnamed reader). */
  def subscriptionIncarnation: Option[Long] = if (subscription.isDefined) consumer.ownIncarnation else None

  /** The epoch this reader took over at, once it has. */
  def ownEpoch: Option[Long] = consumer.ownEpoch

  /** The manifest head as last read. */
  def last: Option[ManifestHead] = lastRead.map(_.head)

  /** The manifest head, read now (taking the queue over first if this is the first read). */
  def read(): ManifestHead = {
    dequeuer.checkFailed()
    val _ = epoch
    // Conditional on the version last read: unchanged, no bytes are transferred and the head is that one.
    val read = consumer.readUnlessAt(lastRead) // raises FencedException once another reader took over
    lastRead = Some(read)
    read.head
  }

  /**
   * latestOffset's manifest head. A read that finds no change puts the next one off by `pollInterval`,
   * doubling up to `maxPollInterval`, and the head last read stands in meanwhile; a change
   * reads again at once. At trigger 0 Spark asks every few milliseconds: an idle query costs ~1
   * conditional read per `maxPollInterval`, not one full read per ask. `always` (AvailableNow) reads.
   */
  def poll(always: Boolean): ManifestHead = {
    val now = clock.nanoTime()
    lastRead match {
      case Some(known) if !always && now - nextPollAt < 0 =>
        dequeuer.checkFailed()
        known.head
      case before =>
        val m = read()
        val changed = !before.exists(b => lastRead.exists(_ eq b))
        idleWaitMs =
          if (changed) 0L
          else math.min(math.max(idleWaitMs * 2, pollInterval.toMillis), maxPollInterval.toMillis)
        nextPollAt = now + idleWaitMs * 1000000L
        m
    }
  }

  /** The head as it is, read without taking the queue over (AvailableNow's target, before the checkpoint). */
  def peek(): ManifestHead = manifests.head(manifests.read())

  /** The plan of [from, to) from `m`; the segments are read from the store directly (a read-ahead walk). */
  def plan(m: ManifestHead, from: Long, to: Long, delivered: EntryTag.Delivered, failOnDataLoss: Boolean,
      skip: Int): OsqueuePlanner.Plan =
    // the store directly: the consumer's segment cache would serialize the read-ahead
    OsqueuePlanner.plan(m, consumer.segmentTree, manifests.readSegment, location, from, to, delivered, failOnDataLoss, skip)

  /** The queued entry at `sequence`: from the tail, or its segment (the consumer keeps the last two read). */
  def entryAt(m: ManifestHead, sequence: Long): Option[ManifestEntry] =
    if (sequence >= m.nextSequence) None
    else if (sequence >= m.tailFirstSequence) m.tailEntries.find(_.sequence == sequence)
    else consumer.segmentTree.leafFor(m, sequence).flatMap(r => consumer.readSegment(r).find(_.sequence == sequence))

  /** A checkpoint position ahead of a reset queue: when Spark commits it, nothing is dequeued (once). */
  def ignoreCommitOf(end: Long): Unit = { val _ = preResetEnds.add(end) }

  /**
   * Spark committed the batch ending at `end`: the dequeuer dequeues through `end - 1` (one write,
   * or none, or one for several commits) while Spark goes on. An end from before a reset of the
   * queue acks nothing: the reset queue's entries below it are not the ones Spark processed (even
   * if producers have since written that far).
   */
  def commit(endAt: OsqueueSourceOffset): Unit = {
    val next = endAt.nextSequence
    if (preResetEnds.remove(next)) // once: the reset queue may later reach this sequence itself
      logWarning(s"not dequeuing through ${next - 1}: that position is from before '${location.identity}' was reset")
    else if (next > 0) {
      val m = last.filter(_.nextSequence >= next).getOrElse(read())
      if (endAt.incarnation.exists(_ != Incarnation.of(m.epoch)))
        logWarning(s"not dequeuing through ${next - 1}: ${dataLoss.resetMessage(endAt, m)}")
      else if (next > m.nextSequence) {
        dataLoss.report(DataLossReporter.Ahead, next, dataLoss.aheadMessage(next, m))
        logWarning(s"not dequeuing through ${next - 1}: '${location.identity}' has only assigned up to ${m.nextSequence - 1}")
      } else dequeuer.request(next - 1)
    }
  }

  /**
   * The query ended: commits `lastCommitted()` — the end of the last micro-batch in the
   * checkpoint's commit log, Spark's own test of "done" on restart, and never further (a batch
   * whose sink commit did not complete has no entry and stays queued for the restart to re-read,
   * docs/adr/0003) — then lets the dequeues land (bounded) and closes the dequeuer. Only a reader
   * that took over the queue acks; any failure leaves the batch queued (the next run's first plan,
   * or its stop, dequeues it) and is logged, not thrown over the query's outcome.
   */
  def stop(lastCommitted: () => Option[OsqueueSourceOffset]): Unit =
    try {
      if (ownEpoch.isDefined)
        try lastCommitted().foreach(commit)
        catch {
          case NonFatal(e) => logWarning(
              s"could not dequeue the last committed micro-batch of '${location.identity}' " +
                "when the query ended; it stays queued until the next run of this query", e)
        }
      if (!dequeuer.flush(DriverQueue.DequeueFlushTimeoutMs))
        logWarning(s"the dequeues of '${location.identity}' did not finish within " +
          s"${DriverQueue.DequeueFlushTimeoutMs} ms of the query's end" +
          dequeuer.failedWith.fold("")(e => s" (${e.getMessage})") +
          "; the entries stay queued until the next run of this query dequeues them")
    } finally dequeuer.close()
}

private[spark] object DriverQueue {
  /** How long `stop()` waits for the background dequeues to land. */
  val DequeueFlushTimeoutMs = 30000L
}
