package osqueue.producer

import java.util.concurrent.{CompletableFuture, LinkedBlockingQueue, Semaphore, TimeUnit}

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import osqueue.{Clock, IllegalQueueStateException, InvalidConfigException, RandomSource, SystemClock, SystemRandomSource}
import osqueue.format.{BatchCodec, BatchIntegrity, BatchNames, MetadataItem}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{DataPrefixOwner, ManifestStore, PendingLocation, QueueProducer}
import osqueue.store.ObjectStore

/**
 * Batches `produce()` calls into data batches, uploads each under a ULID name and appends its
 * location to the manifest (through a group-committing [[QueueProducer]]).
 *
 * One flush thread owns the open batch; it flushes after `flushInterval` from the batch's first
 * input, when it reaches `flushSizeBytes`, on `flush()` and on `close()`. Inputs wait in an
 * unbounded queue whose admission is bounded by `maxBufferedInputs` permits: a full buffer
 * blocks `produce()` (backpressure). Uploading batch N+1 overlaps the manifest write of batch N.
 */
final class Producer(
    store: ObjectStore,
    config: ProducerConfig = ProducerConfig(),
    clock: Clock = SystemClock,
    val metrics: MetricsRegistry = new MetricsRegistry,
    random: RandomSource = SystemRandomSource) extends AutoCloseable {

  /** For Java callers, which cannot use the default arguments: the system RandomSource. */
  def this(store: ObjectStore, config: ProducerConfig, clock: Clock, metrics: MetricsRegistry) =
    this(store, config, clock, metrics, SystemRandomSource)

  import Producer._

  // Claimed before the first upload, so GC can prove this producer's files are its queue's, and the
  // queue's grace period (what GC uses) caps ours (docs/format.md §6).
  private val gracePeriodMs: Long = math.min(config.gcGracePeriod.toMillis,
    DataPrefixOwner.claim(store,
      config.manifestPath, config.dataPathPrefix, clock, Some(config.gcGracePeriod.toMillis), config.retry).fold(Long.MaxValue)(
      _.gcGracePeriodMs))
  private val queueProducer = new QueueProducer(
    new ManifestStore(store, config.manifestPath), config.retry, clock, metrics, gracePeriodMs, random = random,
    segmentEntries = config.manifestSegmentEntries)
  private val inbox = new LinkedBlockingQueue[Message]()
  private val permits = new Semaphore(config.maxBufferedInputs)
  private val batchesFlushed = metrics.counter(MetricNames.BatchesFlushed)
  private val entriesFlushed = metrics.counter(MetricNames.EntriesFlushed)
  private val bytesFlushed = metrics.counter(MetricNames.BytesFlushed)
  private val bytesWritten = metrics.counter(MetricNames.BytesWritten)
  private val flushDuration = metrics.histogram(MetricNames.FlushDuration)
  @volatile private var closed = false
  private val lifecycle = new java.util.concurrent.locks.ReentrantReadWriteLock()

  /** Buffers `entries` (kept in order, sharing `metadata`); blocks only while the buffer is full. */
  def produce(entries: Seq[Array[Byte]], metadata: Array[Byte] = Array.emptyByteArray): WriteHandle = {
    if (entries.isEmpty) throw new InvalidConfigException("entries", "[]", "produce() needs at least one entry")
    if (closed) throw new IllegalQueueStateException("producer is closed")
    permits.acquire()
    val handle = WriteHandle()
    // The read lock orders this input before a concurrent close()'s Close message (or refuses it).
    lifecycle.readLock().lock()
    try {
      if (closed) {
        permits.release()
        throw new IllegalQueueStateException("producer is closed")
      }
      inbox.put(Input(entries.toIndexedSeq, metadata, clock.nowMillis(), handle))
    } finally lifecycle.readLock().unlock()
    handle
  }

  /** Flushes the open batch and waits until everything produced before this call is durable. */
  def flush(): Unit = {
    val done = new CompletableFuture[Void]()
    // Under the read lock, as produce(): the Flush is queued before a Close, or refused.
    lifecycle.readLock().lock()
    try {
      if (closed) throw new IllegalQueueStateException("producer is closed")
      inbox.put(Flush(done))
    } finally lifecycle.readLock().unlock()
    awaitControl(done)
  }

  /** Flushes, waits for every pending write, and stops the threads. Idempotent. */
  override def close(): Unit = synchronized {
    if (!closed) {
      val done = new CompletableFuture[Void]()
      lifecycle.writeLock().lock()
      try {
        closed = true
        inbox.put(Close(done))
      } finally lifecycle.writeLock().unlock()
      awaitControl(done)
      flusher.join()
      queueProducer.close()
    }
  }

  /**
   * Waits for a Flush/Close to be processed. Every control message the flush thread takes is
   * completed, possibly after the thread ended (the writes it waits for finish on the committer);
   * any it never took is failed when it ends (normally or not), so this cannot hang.
   */
  private def awaitControl(done: CompletableFuture[Void]): Unit =
    try done.get()
    catch {
      case e: java.util.concurrent.ExecutionException => throw e.getCause
      case e: InterruptedException =>
        Thread.currentThread().interrupt()
        throw new IllegalQueueStateException(s"interrupted while waiting for the producer: $e")
    }

  // ---- flush thread ----
  private val batchRecords = ArrayBuffer.empty[Array[Byte]]
  private val batchMetadata = ArrayBuffer.empty[MetadataItem]
  private val batchInputs = ArrayBuffer.empty[(Input, Int)]
  private var batchBytes = 0L
  private var batchDeadlineNanos = 0L
  private val inFlight = ArrayBuffer.empty[CompletableFuture[_]]

  // Started last: the loop uses every field above.
  private val flusher = new Thread(() => flushLoop(), "osqueue-producer-flush")
  flusher.setDaemon(true)
  flusher.start()

  private def flushLoop(): Unit =
    try {
      runFlushLoop()
      // After Close: fail what a racing flush() put behind it (produce() refuses once closed).
      failQueued(new IllegalQueueStateException("producer is closed"))
    } catch {
      case e: Throwable =>
        // A bug must not leave callers waiting forever: refuse new input, fail what is queued.
        lifecycle.writeLock().lock()
        try closed = true
        finally lifecycle.writeLock().unlock()
        val failure = new IllegalQueueStateException(s"producer flush thread failed: $e")
        batchInputs.foreach(_._1.handle.future.completeExceptionally(failure))
        failQueued(failure)
        throw e
    }

  private def failQueued(failure: Exception): Unit =
    Iterator.continually(inbox.poll()).takeWhile(_ != null).foreach {
      case in: Input => in.handle.future.completeExceptionally(failure)
      case Flush(done) => done.completeExceptionally(failure)
      case Close(done) => done.completeExceptionally(failure)
    }

  private def runFlushLoop(): Unit = {
    var running = true
    while (running) {
      val waitNanos = if (batchRecords.isEmpty) TimeUnit.SECONDS.toNanos(1) else batchDeadlineNanos - clock.nanoTime()
      val msg = if (waitNanos > 0) inbox.poll(waitNanos, TimeUnit.NANOSECONDS) else inbox.poll()
      msg match {
        case null => if (batchRecords.nonEmpty && clock.nanoTime() >= batchDeadlineNanos) flushBatch()
        case in: Input =>
          permits.release()
          add(in)
          if (batchBytes >= config.flushSizeBytes) flushBatch()
        case Flush(done) =>
          flushBatch()
          completeAfterInFlight(done)
        case Close(done) =>
          flushBatch()
          completeAfterInFlight(done)
          running = false
      }
    }
  }

  private def add(in: Input): Unit = {
    if (batchRecords.isEmpty) batchDeadlineNanos = clock.nanoTime() + config.flushInterval.toNanos
    batchInputs += ((in, batchRecords.size))
    batchMetadata += MetadataItem(batchRecords.size, in.ingestionTimeMs, in.metadata)
    batchRecords ++= in.entries
    batchBytes += in.entries.foldLeft(0L)(_ + _.length) + in.metadata.length
  }

  /** Encodes and uploads the open batch, then hands its location to the group committer. */
  private def flushBatch(): Unit = if (batchRecords.nonEmpty) {
    awaitUncommittedBelowCap()
    val started = clock.nanoTime()
    val inputs = batchInputs.toIndexedSeq
    val metadata = batchMetadata.toIndexedSeq
    val rawBytes = batchBytes
    val entryCount = batchRecords.size
    try {
      val bytes = BatchCodec.encode(batchRecords.toIndexedSeq, config.compression)
      val upload = () => {
        val key = BatchNames.newKey(config.dataPathPrefix, clock.nowMillis(), random)
        store.put(key, bytes)
        key
      }
      val putStarted = clock.nanoTime() // the age that counts is the PUT's, by this clock's own rate (§6)
      val pendingLocation = new PendingLocation(upload(), metadata, upload,
        extension = BatchIntegrity.record(bytes), uploadStartedNanos = Some(putStarted))
      val enqueued = queueProducer.enqueue(pendingLocation).whenComplete { (sequence, error) =>
        if (error != null) inputs.foreach(_._1.handle.future.completeExceptionally(unwrap(error)))
        else {
          batchesFlushed.increment(); entriesFlushed.add(entryCount)
          bytesFlushed.add(rawBytes); bytesWritten.add(bytes.length)
          flushDuration.observe((clock.nanoTime() - started) / 1e9)
          inputs.foreach { case (in, index) =>
            in.handle.future.complete(DurableWrite(sequence, pendingLocation.location, index, in.ingestionTimeMs))
          }
        }
      }
      inFlight.filterInPlace(!_.isDone)
      inFlight += enqueued
    } catch {
      case NonFatal(e) => inputs.foreach(_._1.handle.future.completeExceptionally(e))
    } finally {
      batchRecords.clear(); batchMetadata.clear(); batchInputs.clear(); batchBytes = 0
    }
  }

  /**
   * At most [[MaxUncommittedBatches]] uploaded batches wait for their manifest write, as in Python
   * (docs/format.md §5): while the manifest is slow, the flush thread pauses (and `produce()` blocks
   * once the input buffer is full) instead of holding ever more encoded batches in memory.
   */
  private def awaitUncommittedBelowCap(): Unit = {
    inFlight.filterInPlace(!_.isDone)
    while (inFlight.size >= MaxUncommittedBatches) {
      try CompletableFuture.anyOf(inFlight.toSeq: _*).join()
      catch { case NonFatal(_) => () } // the failed batch's handles carry its error
      inFlight.filterInPlace(!_.isDone)
    }
  }

  private def completeAfterInFlight(done: CompletableFuture[Void]): Unit = {
    val all = CompletableFuture.allOf(inFlight.toSeq: _*)
    inFlight.clear()
    all.handle[Unit]((_, _) => { done.complete(null); () })
  }
}

private object Producer {
  /** Uploaded batches that may wait for their manifest write before the flush thread pauses (as in Python). */
  val MaxUncommittedBatches = 8

  sealed trait Message
  final case class Input(entries: IndexedSeq[Array[Byte]], metadata: Array[Byte], ingestionTimeMs: Long, handle: WriteHandle)
      extends Message
  final case class Flush(done: CompletableFuture[Void]) extends Message
  final case class Close(done: CompletableFuture[Void]) extends Message

  def unwrap(e: Throwable): Throwable = e match {
    case c: java.util.concurrent.CompletionException if c.getCause != null => c.getCause
    case other => other
  }
}
