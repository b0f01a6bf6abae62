package osqueue.consumer

import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}

import org.slf4j.LoggerFactory

import osqueue.{Clock, IllegalQueueStateException, SystemClock}
import osqueue.gc.GarbageCollector
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{ManifestStore, QueueConsumer}
import osqueue.store.ObjectStore

/**
 * The single consumer of a queue (RFC 0001 + the read-ahead API of RFC 0003).
 *
 * `initialize(lastAcked)` bumps the epoch and fences any earlier consumer. Three cursors:
 * `lastAcked` (durable once dequeued), `lastHandedOut` (descriptors given out) and, for the
 * serial API, the batch fetched by `nextBatch()` (which moves only after a successful fetch).
 */
final class Consumer(
    store: ObjectStore,
    config: ConsumerConfig = ConsumerConfig(),
    clock: Clock = SystemClock,
    val metrics: MetricsRegistry = new MetricsRegistry) extends AutoCloseable {

  private val log = LoggerFactory.getLogger(classOf[Consumer])
  private val queue = new QueueConsumer(new ManifestStore(store, config.manifestPath), config.retry, clock, metrics)
  private val fetcher = new BatchFetcher(store, clock, metrics)
  private val acks = metrics.counter(MetricNames.Acks)
  private val batchesCollected = metrics.counter(MetricNames.BatchesCollected)
  private val entriesCollected = metrics.counter(MetricNames.EntriesCollected)
  private val handedOut = metrics.counter(MetricNames.DescriptorsHandedOut)
  private val queueLength = metrics.gauge(MetricNames.QueueLength)
  private val lagSeconds = metrics.gauge(MetricNames.ConsumerLagSeconds)

  private var lastAcked: Option[Long] = None
  private var lastDequeued: Option[Long] = None
  private var lastHandedOut: Option[Long] = None
  private var acksSinceDequeue = 0
  private var gcExecutor: Option[ScheduledExecutorService] = None
  @volatile private var closed = false

  /** Takes over the queue; entries `<= lastAcked` are dequeued in the same manifest write. */
  def initialize(lastAckedSequence: Option[Long] = None): Long = synchronized {
    val epoch = queue.initialize(lastAckedSequence)
    lastAcked = lastAckedSequence
    lastDequeued = lastAckedSequence
    lastHandedOut = lastAckedSequence
    if (config.runGc && gcExecutor.isEmpty) startGc()
    epoch
  }

  def epoch: Option[Long] = queue.ownEpoch

  /** Up to `max` descriptors after the last handed out, from one manifest read. Never reissued. */
  def nextDescriptors(max: Int): IndexedSeq[BatchDescriptor] = synchronized {
    checkOpen()
    if (max <= 0) IndexedSeq.empty
    else {
      val descriptors = pendingAfter(lastHandedOut, max)
      descriptors.lastOption.foreach(d => lastHandedOut = Some(d.sequence))
      handedOut.add(descriptors.size)
      descriptors
    }
  }

  /** A thread-safe fetcher: no cursor, no epoch check (the owner learns of fencing). */
  def fetchHandle: BatchFetcher = fetcher

  /** The next batch in order, or None when the queue has nothing more. Cursor moves on success only. */
  def nextBatch(): Option[ConsumedBatch] = synchronized {
    checkOpen()
    pendingAfter(lastHandedOut, 1).headOption.map { d =>
      val batch = fetcher.fetch(d)
      lastHandedOut = Some(d.sequence)
      batchesCollected.increment()
      entriesCollected.add(batch.entries.size)
      batch.metadata.lastOption.foreach(m => lagSeconds.set(math.max(0L, (clock.nowMillis() - m.ingestionTimeMs) / 1000)))
      batch
    }
  }

  /** Acknowledges the next sequence in order; dequeues every `ackBatchSize` acks. */
  def ack(sequence: Long): Unit = synchronized {
    checkOpen()
    val expected = lastAcked.map(_ + 1).orElse(firstHandedOut)
    if (!expected.contains(sequence))
      throw new IllegalQueueStateException(
        s"out-of-order ack of $sequence: expected ${expected.map(_.toString).getOrElse("a batch to be read first")}")
    requireHandedOut(sequence)
    lastAcked = Some(sequence)
    acks.increment()
    acksSinceDequeue += 1
    if (acksSinceDequeue >= config.ackBatchSize) flushAcks()
  }

  /** Moves the durable frontier through `sequence` in one write; state changes only on success. */
  def ackThrough(sequence: Long): Unit = synchronized {
    checkOpen()
    if (lastAcked.exists(sequence <= _))
      throw new IllegalQueueStateException(s"non-monotonic ack_through($sequence): already acked through ${lastAcked.get}")
    requireHandedOut(sequence)
    queue.dequeueThrough(sequence)
    val from = lastAcked.map(_ + 1).orElse(firstHandedOut).getOrElse(sequence)
    acks.add(sequence - from + 1)
    lastAcked = Some(sequence)
    lastDequeued = Some(sequence)
    acksSinceDequeue = 0
  }

  /** Dequeues everything acked so far. */
  def flush(): Unit = synchronized { flushAcks() }

  override def close(): Unit = synchronized {
    if (!closed) {
      try flushAcks()
      finally {
        closed = true
        gcExecutor.foreach(_.shutdownNow())
      }
    }
  }

  private var firstHandedOutSeq: Option[Long] = None
  private def firstHandedOut: Option[Long] = firstHandedOutSeq

  private def pendingAfter(after: Option[Long], max: Int): IndexedSeq[BatchDescriptor] = {
    val manifest = queue.read()
    queueLength.set(manifest.entries.size)
    val ds = manifest.entries.iterator.filter(e => after.forall(e.sequence > _)).take(max).map(BatchDescriptor.of).toIndexedSeq
    if (firstHandedOutSeq.isEmpty && lastAcked.isEmpty) firstHandedOutSeq = ds.headOption.map(_.sequence)
    ds
  }

  private def requireHandedOut(sequence: Long): Unit =
    if (!lastHandedOut.exists(sequence <= _))
      throw new IllegalQueueStateException(s"cannot ack $sequence: it has not been read yet")

  private def flushAcks(): Unit = if (lastAcked != lastDequeued) {
    lastAcked.foreach(queue.dequeueThrough)
    lastDequeued = lastAcked
    acksSinceDequeue = 0
  }

  private def checkOpen(): Unit = if (closed) throw new IllegalQueueStateException("consumer is closed")

  private def startGc(): Unit = {
    val gc = new GarbageCollector(store, config.manifestPath, config.dataPathPrefix, config.gcGracePeriod, clock, metrics)
    val ex = Executors.newSingleThreadScheduledExecutor { r =>
      val t = new Thread(r, "osqueue-gc"); t.setDaemon(true); t
    }
    val period = config.gcInterval.toMillis
    ex.scheduleWithFixedDelay(() => {
      try gc.runOnce()
      catch { case e: Exception => log.warn(s"GC cycle failed; retrying in ${config.gcInterval}", e) }
    }, period, period, TimeUnit.MILLISECONDS)
    gcExecutor = Some(ex)
  }
}
