package osqueue.consumer

import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}

import scala.collection.mutable

import org.slf4j.LoggerFactory

import osqueue.{
  Clock,
  DataLossException,
  FencedException,
  IllegalQueueStateException,
  RandomSource,
  SystemClock,
  SystemRandomSource
}
import osqueue.consumer.Consumer.Scan
import osqueue.format.{EntryTag, ManifestEntry}
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
 *
 * Like the Spark source, it applies the sink's reader rule (docs/adr/0002, [[EntryTag.Delivered]]):
 * a replayed copy of a sink batch is never handed out, and counts as acked (the frontier moves over
 * it; `ack` expects the next delivered sequence). The delivered-copies map lives in memory for this
 * consumer's lifetime only: after a restart with `lastAcked` it starts empty.
 */
final class Consumer(
    store: ObjectStore,
    config: ConsumerConfig = ConsumerConfig(),
    clock: Clock = SystemClock,
    val metrics: MetricsRegistry = new MetricsRegistry,
    random: RandomSource = SystemRandomSource) extends AutoCloseable {

  /** For Java callers, which cannot use the default arguments: the system RandomSource. */
  def this(store: ObjectStore, config: ConsumerConfig, clock: Clock, metrics: MetricsRegistry) =
    this(store, config, clock, metrics, SystemRandomSource)

  private val log = LoggerFactory.getLogger(classOf[Consumer])
  private val queue = new QueueConsumer(new ManifestStore(store, config.manifestPath), config.retry, clock, metrics, random,
    config.subscription, config.createSubscription)
  private val fetcher = new BatchFetcher(store, clock, metrics)
  private val acks = metrics.counter(MetricNames.Acks)
  private val batchesCollected = metrics.counter(MetricNames.BatchesCollected)
  private val entriesCollected = metrics.counter(MetricNames.EntriesCollected)
  private val handedOut = metrics.counter(MetricNames.DescriptorsHandedOut)
  private val queueLength = metrics.gauge(MetricNames.QueueLength)
  private val lagSeconds = metrics.gauge(MetricNames.ConsumerLagSeconds)
  private val duplicatesSkipped = metrics.counter(MetricNames.DuplicateCopiesSkipped)
  private val dataLossEvents = metrics.counter(MetricNames.DataLossEvents)
  private val droppedEntries = metrics.counter(MetricNames.DroppedEntries)
  // Per reader: each subscription's consumer counts its own ack writes and lag (docs/adr/0005).
  private val reader = "subscription" -> config.subscription.getOrElse("")
  private val ackWrites = metrics.counter(MetricNames.AckWrites, reader)
  private val lagEntries = metrics.gauge(MetricNames.ConsumerLagEntries, reader)
  private val ackIntervalNanos = config.ackInterval.toNanos
  /** When an ack last wrote the manifest (initialize counts: it wrote the head), on `clock.nanoTime`. */
  private var lastAckWrite = clock.nanoTime()

  private var lastAcked: Option[Long] = None
  private var lastDequeued: Option[Long] = None
  private var lastHandedOut: Option[Long] = None
  private var acksSinceDequeue = 0
  private var delivered = EntryTag.Delivered.Empty
  /** Sequences read and skipped as replayed copies, ascending, that the ack frontier has not passed yet. */
  private val skipped = mutable.Queue.empty[Long]
  /** [first, end) ranges retention cut before this reader read them, that the ack frontier has not passed yet. */
  private val lost = mutable.Queue.empty[(Long, Long)]
  /** The first sequence this reader should read after `initialize` (its resume point or record); None: the queue's first. */
  private var expectedFirst: Option[Long] = None
  private var gcExecutor: Option[ScheduledExecutorService] = None
  @volatile private var closed = false

  /**
   * Takes over the queue; entries `<= lastAcked` are dequeued in the same manifest write.
   * `incarnation` is the manifest incarnation the resume point belongs to ([[incarnation]] when it
   * was acked; docs/format.md §5.2): another one means the queue was reset (ResumePointException).
   */
  def initialize(lastAckedSequence: Option[Long] = None, incarnation: Option[Long] = None): Long = synchronized {
    val epoch = queue.initialize(lastAckedSequence, incarnation)
    // A reader record (a subscription's, or the unnamed reader's on a v3 head) says where this reader
    // stopped: without a resume point, read on from there rather than from the queue's first entry.
    val from = lastAckedSequence.orElse(queue.readerNext.filter(_ > 0).map(_ - 1))
    lastAcked = from
    lastDequeued = from
    lastHandedOut = from
    expectedFirst = lastAckedSequence.map(_ + 1).orElse(queue.readerNext)
    lastAckWrite = clock.nanoTime()
    if (config.runGc && gcExecutor.isEmpty) startGc()
    epoch
  }

  def epoch: Option[Long] = queue.ownEpoch

  /** The incarnation of the queue's manifest: store it with the acked sequence and pass both to `initialize`. */
  def incarnation: Option[Long] = queue.ownIncarnation

  /**
   * Up to `max` descriptors after the last handed out: those already read while any are left
   * (possibly fewer than `max`), else from one manifest read (and one segment). Never reissued;
   * empty only when nothing deliverable is queued (what was read being only skipped copies, it reads on).
   */
  def nextDescriptors(max: Int): IndexedSeq[BatchDescriptor] = synchronized {
    checkUsable()
    if (max <= 0) IndexedSeq.empty
    else {
      writeDueAcks()
      var s = scan(max)
      commit(s)
      while (s.descriptors.isEmpty && s.skipped.nonEmpty) { s = scan(max); commit(s) }
      handedOut.add(s.descriptors.size)
      s.descriptors
    }
  }

  /** A thread-safe fetcher: no cursor, no epoch check (the owner learns of fencing). */
  def fetchHandle: BatchFetcher = fetcher

  /** The next batch in order, or None when the queue has nothing more. Cursor moves on success only. */
  def nextBatch(): Option[ConsumedBatch] = synchronized {
    checkUsable()
    writeDueAcks()
    var s = scan(1)
    // Only skipped copies (if any) were left in what was read. With a segmented manifest that is the
    // end of one segment, not of the queue: read on rather than report an empty queue.
    while (s.descriptors.isEmpty && s.skipped.nonEmpty) { commit(s); s = scan(1) }
    if (s.descriptors.isEmpty) commit(s)
    s.descriptors.headOption.map { d =>
      val batch = fetcher.fetch(d)
      commit(s)
      batchesCollected.increment()
      entriesCollected.add(batch.entries.size)
      batch.metadata.lastOption.foreach(m => lagSeconds.set(math.max(0L, (clock.nowMillis() - m.ingestionTimeMs) / 1000)))
      batch
    }
  }

  /** Acknowledges the next sequence in order; dequeues every `ackBatchSize` acks. */
  def ack(sequence: Long): Unit = synchronized {
    checkUsable()
    val expected = lastAcked.map(_ + 1).orElse(firstHandedOut)
    if (!expected.contains(sequence))
      throw new IllegalQueueStateException(
        s"out-of-order ack of $sequence: expected ${expected.map(_.toString).getOrElse("a batch to be read first")}")
    requireHandedOut(sequence)
    lastAcked = Some(sequence)
    absorbSkipped()
    acks.increment()
    acksSinceDequeue += 1
    if (ackIntervalNanos > 0) writeDueAcks()
    else if (acksSinceDequeue >= config.ackBatchSize) flushAcks()
  }

  /**
   * Moves the durable frontier through `sequence` in one write; state changes only on success. With
   * `ackInterval`, coalesced as `ack`: the frontier moves at once and the write carries it when due
   * (a failure of that write is raised by a later call).
   */
  def ackThrough(sequence: Long): Unit = synchronized {
    checkUsable()
    if (lastAcked.exists(sequence <= _))
      throw new IllegalQueueStateException(s"non-monotonic ack_through($sequence): already acked through ${lastAcked.get}")
    requireHandedOut(sequence)
    val coalesce = ackIntervalNanos > 0
    if (!coalesce) queue.dequeueThrough(sequence)
    val from = lastAcked.map(_ + 1).orElse(firstHandedOut).getOrElse(sequence)
    acks.add(sequence - from + 1)
    lastAcked = Some(sequence)
    if (!coalesce) {
      lastDequeued = Some(sequence)
      acksSinceDequeue = 0
      lastAckWrite = clock.nanoTime()
      ackWrites.increment()
    }
    absorbSkipped()
    if (coalesce) writeDueAcks()
  }

  /**
   * Dequeues everything acked so far. With nothing to dequeue it still reads the manifest to
   * check the epoch (and writes nothing), so a fenced consumer learns of it here.
   */
  def flush(): Unit = synchronized {
    checkUsable()
    if (lastAcked != lastDequeued) flushAcks() else queue.readHead()
  }

  /** Dequeues what was acked (unless fenced: that write could never land) and stops GC. */
  override def close(): Unit = synchronized {
    if (!closed) {
      try if (queue.fenced.isEmpty) flushAcks()
      finally {
        closed = true
        gcExecutor.foreach(_.shutdownNow())
      }
    }
  }

  /** The first sequence handed out after `initialize(None)`: where in-order acks start. */
  private var firstHandedOut: Option[Long] = None

  /**
   * Entries read from the manifest and not handed out yet (from `bufferStart` on): handed out before
   * the manifest is read again, so draining a backlog of N entries decodes the manifest O(1) times
   * per N entries instead of once per batch (docs/performance.md). With a segmented head it holds
   * one segment (or the tail) at a time.
   */
  private var buffer: IndexedSeq[ManifestEntry] = IndexedSeq.empty
  private var bufferStart = 0

  /**
   * The entries after the last one handed out: those already read, or (none left) those of a fresh,
   * epoch-checked read. A head whose first entry is past the one this reader expects next means retention
   * cut entries it had not read (ADR 0005): reported once ([[reportLoss]]), and reading goes on after them.
   */
  private def buffered(): Iterator[ManifestEntry] = {
    if (bufferStart >= buffer.size) {
      // One segment or the tail at a time: memory stays bounded at any depth (docs/format.md §2.2).
      val head = queue.readHead()
      queueLength.set(head.depth)
      lagEntries.set(math.max(0L, head.nextSequence - lastAcked.map(_ + 1).getOrElse(head.firstSequence)))
      val expected = lastHandedOut.map(_ + 1).orElse(lastAcked.map(_ + 1)).orElse(expectedFirst)
      expected.filter(_ < head.firstSequence).foreach { e =>
        buffer = IndexedSeq.empty
        bufferStart = 0
        reportLoss(e, head.firstSequence)
      }
      val after = lastHandedOut
      val start = math.max(head.firstSequence, after.fold(head.firstSequence)(_ + 1))
      buffer = queue.segmentTree.leafFor(head, start) match {
        case Some(ref) => queue.readSegment(ref).filter(_.sequence >= head.firstSequence)
        case None => head.tailEntries
      }
      bufferStart = 0
    }
    val after = lastHandedOut
    (bufferStart until buffer.size).iterator.map(buffer).filter(e => after.forall(e.sequence > _))
  }

  /**
   * Reports the range `[first, end)` retention removed, once, and moves the read cursor (and the ack
   * frontier, when it reaches the range) past it; throws it when `failOnDataLoss`.
   */
  private def reportLoss(first: Long, end: Long): Unit = {
    if (lastHandedOut.forall(_ < end - 1)) lastHandedOut = Some(end - 1)
    lost += ((first, end))
    absorbSkipped()
    dataLossEvents.increment()
    droppedEntries.add(end - first)
    val error = new DataLossException(config.subscription, first, end - first)
    config.onDataLoss(error)
    if (config.failOnDataLoss) throw error
  }

  /**
   * Entries after `after` through the `max`-th deliverable one, applying the reader rule, from those
   * already read if any are left, else from one manifest read; no cursor moves.
   */
  private def scan(max: Int): Scan = {
    val entries = buffered() // first: a loss it reports moves the cursor
    val after = lastHandedOut
    val ds = IndexedSeq.newBuilder[BatchDescriptor]
    val skips = IndexedSeq.newBuilder[Long]
    var state = delivered
    var last = after
    var n = 0
    val admissions = delivered.admitAll(entries)
    while (n < max && admissions.hasNext) {
      val a = admissions.next()
      state = a.after
      last = Some(a.entry.sequence)
      if (a.admitted) { ds += BatchDescriptor.of(a.entry, config.manifestPath); n += 1 }
      else skips += a.entry.sequence
    }
    val s = Scan(ds.result(), skips.result(), last, state)
    // The first entry read is always delivered (an empty map admits anything).
    if (firstHandedOut.isEmpty && lastAcked.isEmpty) firstHandedOut = s.descriptors.headOption.map(_.sequence)
    s
  }

  /** Moves the read cursor past everything `s` read (skipped copies included) and keeps its decisions. */
  private def commit(s: Scan): Unit = {
    lastHandedOut = s.last
    while (bufferStart < buffer.size && s.last.exists(buffer(bufferStart).sequence <= _)) bufferStart += 1
    delivered = s.delivered
    skipped ++= s.skipped
    duplicatesSkipped.add(s.skipped.size)
    absorbSkipped()
  }

  /**
   * Skipped copies count as acked: the frontier moves over those right after it (dequeued with the next
   * flush). So does a lost range it reaches (never delivered, so never acked one by one).
   */
  private def absorbSkipped(): Unit = {
    var moved = true
    while (moved) {
      moved = false
      while (skipped.nonEmpty && lastAcked.exists(skipped.head <= _)) skipped.dequeue()
      while (skipped.nonEmpty && lastAcked.exists(_ + 1 == skipped.head)) lastAcked = Some(skipped.dequeue())
      while (lost.nonEmpty && lastAcked.map(_ + 1).orElse(expectedFirst).exists(lost.head._1 <= _)) {
        val end = lost.dequeue()._2
        if (lastAcked.forall(_ + 1 < end)) { lastAcked = Some(end - 1); moved = true }
      }
    }
  }

  private def requireHandedOut(sequence: Long): Unit =
    if (!lastHandedOut.exists(sequence <= _))
      throw new IllegalQueueStateException(s"cannot ack $sequence: it has not been read yet")

  private def flushAcks(): Unit = if (lastAcked != lastDequeued) {
    lastAcked.foreach(queue.dequeueThrough)
    lastDequeued = lastAcked
    acksSinceDequeue = 0
    lastAckWrite = clock.nanoTime()
    ackWrites.increment()
  }

  /** With `ackInterval`: writes the pending acks once an interval passed since the last ack write. */
  private def writeDueAcks(): Unit =
    if (ackIntervalNanos > 0 && lastAcked != lastDequeued && clock.nanoTime() - lastAckWrite >= ackIntervalNanos)
      flushAcks()

  /** Closed, or fenced before (a fence is remembered: every later call fails with it, as in Python). */
  private def checkUsable(): Unit = {
    if (closed) throw new IllegalQueueStateException("consumer is closed")
    queue.fenced.foreach(f => throw new FencedException(f.ownEpoch, f.currentEpoch, f.reason))
  }

  private def startGc(): Unit = {
    val gc = new GarbageCollector(store, config.manifestPath, config.dataPathPrefix, config.gcGracePeriod, clock, metrics)
    val _ = gc.checkOwner() // a data prefix another queue owns is refused at start (docs/format.md §6)
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

private object Consumer {
  /** What a read found: up to `max` deliverable entries, the copies skipped among them, the last sequence read. */
  final case class Scan(descriptors: IndexedSeq[BatchDescriptor], skipped: IndexedSeq[Long],
      last: Option[Long], delivered: EntryTag.Delivered)
}
