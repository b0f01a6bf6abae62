package osqueue.producer

import java.util.concurrent.{CompletableFuture, LinkedBlockingQueue, Semaphore, TimeUnit}

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import osqueue.{
  Clock,
  IllegalQueueStateException,
  InvalidConfigException,
  QueueFullException,
  RandomSource,
  SystemClock,
  SystemRandomSource
}
import osqueue.format.{BatchCodec, BatchIntegrity, BatchNames, MetadataItem}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{DataPrefixOwner, ManifestAppender, ManifestStore, PendingLocation, QueueFullWait, QueueProducer}
import osqueue.store.ObjectStore

/**
 * Batches `produce()` calls into data batches, uploads each under a ULID name and appends its
 * location to the manifest (through a group-committing [[QueueProducer]]).
 *
 * One flush thread owns the open batch; it flushes after `flushInterval` from the batch's first
 * input, when it reaches `flushSizeBytes`, with `eagerFlush` as soon as none of its batches is in
 * flight, on `flush()` and on `close()`. Inputs wait in an
 * unbounded queue whose admission is bounded by `maxBufferedInputs` permits: a full buffer
 * blocks `produce()` (backpressure). Uploading batch N+1 overlaps the manifest write of batch N.
 *
 * With `spoolDir` (docs/adr/0006 part 2), `produce()` first writes the call to the [[Spool]]'s log (forced
 * before it returns with `durability = "local"`; the spool's cap bounds what waits, not
 * `maxBufferedInputs`), and the flush thread names each batch and hands it to a [[SpoolUploader]] (PUTs
 * ahead, several batches per manifest write)
 * with its own appender, so each write can be resolved against its ATTEMPT records. At start the
 * flush thread first replays what the spool holds (a batch named but not landed; calls in no batch
 * join the next batch).
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

  private val claim = () =>
    DataPrefixOwner.claim(store, config.manifestPath, config.dataPathPrefix, clock, Some(config.gcGracePeriod.toMillis),
      config.retry)
  // Claimed before the first upload, so GC can prove this producer's files are its queue's, and the
  // queue's grace period (what GC uses) caps ours (docs/format.md §6). A spooled producer claims from its
  // upload thread, retried without a budget (its appender reads the queue's grace period then), so it
  // starts, and takes calls, while the store is unreachable (issue 28).
  private val gracePeriodMs: Long = math.min(config.gcGracePeriod.toMillis,
    if (config.spoolDir.isDefined) Long.MaxValue else claim().fold(Long.MaxValue)(_.gcGracePeriodMs))
  // Before the committer's thread starts: a spool owned by another producer fails the constructor.
  private val byCall = new java.util.concurrent.ConcurrentHashMap[java.lang.Long, WriteHandle]()
  private[producer] val spool: Option[Spool] = config.spoolDir.map { dir =>
    new Spool(java.nio.file.Paths.get(dir), config.spoolMaxBytes, config.spoolFullPolicy, config.spoolFullTimeout,
      clock, random, metrics, dropped)
  }
  private val durableLocal = config.durability == "local"
  // Its own appender, written to from the flush thread: each write is resolved against the spool's
  // ATTEMPT records (a shared group write could not be).
  private def queueFullWait = QueueFullWait.of(config.queueFullTimeout, config.queueFullRetryInterval)
  private val uploader: Option[SpoolUploader] = spool.map { s =>
    val appender = new ManifestAppender(new ManifestStore(store, config.manifestPath), config.retry, clock, metrics,
      gracePeriodMs, random = random, segmentEntries = config.manifestSegmentEntries, queueFullWait = queueFullWait)
    new SpoolUploader(store, s, appender, config.dataPathPrefix, config.compression, clock, random, config.retry, metrics,
      claim)
  }
  @volatile private var replayError: Throwable = null
  private val spoolOrder = new Object
  private val queueProducer = new QueueProducer(
    new ManifestStore(store, config.manifestPath), config.retry, clock, metrics, gracePeriodMs, random = random,
    segmentEntries = config.manifestSegmentEntries, queueFullWait = queueFullWait, commitMode = config.commitMode)
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
    if (spool.isDefined) return produceSpooled(entries, metadata)
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

  /** Step 1: the call goes to the spool's log (forced before returning with durability local), then to the batch. */
  private def produceSpooled(entries: Seq[Array[Byte]], metadata: Array[Byte]): WriteHandle = {
    val handle = WriteHandle()
    val timeMs = clock.nowMillis()
    // Call numbers enter the inbox in their order; the read lock orders the input before a Close, as above.
    val ticket = spoolOrder.synchronized {
      lifecycle.readLock().lock()
      try {
        if (closed) throw new IllegalQueueStateException("producer is closed")
        val (callNo, ticket) = spool.get.appendEntries(entries, metadata, timeMs)
        byCall.put(callNo, handle)
        inbox.put(Input(entries.toIndexedSeq, metadata, timeMs, handle, callNo))
        ticket
      } finally lifecycle.readLock().unlock()
    }
    if (durableLocal) spool.get.sync(ticket)
    handle
  }

  /** `drop_oldest` dropped these calls (none in a batch): their handles fail. */
  private def dropped(callNos: Seq[Long]): Unit = {
    val error = new QueueFullException(s"dropped by drop_oldest: calls ${callNos.head}..${callNos.last} of the full " +
      s"producer spool '${config.spoolDir.getOrElse("")}'")
    callNos.foreach(n => Option(byCall.remove(n)).foreach(_.future.completeExceptionally(error)))
  }

  /** A spooled batch replay could not append (it stays in the spool): flush() and close() throw it. */
  private def throwReplayError(): Unit = if (replayError != null) throw replayError

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
    throwReplayError()
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
      try awaitControl(done)
      finally {
        flusher.join()
        queueProducer.close()
        // Nothing on its way writes to the spool any more once the uploader is idle.
        if (uploader.forall { u =>
            val idle = u.idle(10000L); if (idle) u.close(); idle
          }) spool.foreach(_.close())
      }
      throwReplayError()
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

  // Replay: calls in no batch are batched again with the new ones.
  spool.foreach(_.unbatchedCalls().foreach { r =>
    val handle = WriteHandle()
    byCall.put(r.callNo, handle)
    inbox.put(Input(r.entries.toIndexedSeq, r.metadata, r.ingestionTimeMs, handle, r.callNo))
  })

  // Started last: the loop uses every field above.
  private val flusher = new Thread(() => flushLoop(), "osqueue-producer-flush")
  flusher.setDaemon(true)
  flusher.start()

  private def flushLoop(): Unit =
    try {
      uploader.foreach { u =>
        try u.replay()
        catch {
          case NonFatal(e) => // the spool keeps them; flush() and close() throw it
            org.slf4j.LoggerFactory.getLogger(classOf[Producer]).error(s"spool replay failed: $e")
            replayError = e
        }
      }
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
      case Landed => ()
    }

  private def runFlushLoop(): Unit = {
    var running = true
    while (running) {
      val waitNanos = if (batchRecords.isEmpty) TimeUnit.SECONDS.toNanos(1) else batchDeadlineNanos - clock.nanoTime()
      val msg = if (waitNanos > 0) inbox.poll(waitNanos, TimeUnit.NANOSECONDS) else inbox.poll()
      msg match {
        case null => if (batchRecords.nonEmpty && clock.nanoTime() >= batchDeadlineNanos) flushBatch()
        case in: Input =>
          if (spool.isEmpty) permits.release()
          add(in)
          if (batchBytes >= config.flushSizeBytes) flushBatch()
          else if (config.eagerFlush && !inbox.peek().isInstanceOf[Input] && nothingInFlight) flushBatch()
        case Landed => if (batchRecords.nonEmpty && nothingInFlight) flushBatch() // eagerFlush
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

  /** No batch of this producer is uploading or waiting for its manifest write (eagerFlush's test). */
  private def nothingInFlight: Boolean = inFlight.forall(_.isDone)

  private def add(in: Input): Unit = {
    if (batchRecords.isEmpty) batchDeadlineNanos = clock.nanoTime() + config.flushInterval.toNanos
    batchInputs += ((in, batchRecords.size))
    batchMetadata += MetadataItem(batchRecords.size, in.ingestionTimeMs, in.metadata)
    batchRecords ++= in.entries
    batchBytes += BatchCodec.recordBytes(in.entries) + in.metadata.length
  }

  /** Encodes and uploads the open batch, then hands its location to the group committer. */
  private def flushBatch(): Unit = if (batchRecords.nonEmpty) {
    if (spool.isDefined) return flushSpooled()
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
      // After `enqueued` completes (so the flush thread finds it done): a batch lingering behind it may go now.
      if (config.eagerFlush) enqueued.whenComplete((_, _) => inbox.put(Landed))
      inFlight.filterInPlace(!_.isDone)
      inFlight += enqueued
    } catch {
      case NonFatal(e) => inputs.foreach(_._1.handle.future.completeExceptionally(e))
    } finally {
      batchRecords.clear(); batchMetadata.clear(); batchInputs.clear(); batchBytes = 0
    }
  }

  /** Steps 2-6: name the batch in the spool, PUT it, append it (ATTEMPT before each CAS), LANDED. */
  private def flushSpooled(): Unit = {
    val started = clock.nanoTime()
    val all = batchInputs.map(_._1).toIndexedSeq
    try {
      // drop_oldest took the oldest of them meanwhile (their handles failed then)
      val gone = spool.get.claimBatch(all.head.callNo, all.last.callNo).toSet
      val inputs = all.filterNot(in => gone.contains(in.callNo))
      if (inputs.nonEmpty)
        try {
          val calls = inputs.map(in => EntriesRecord(in.callNo, in.ingestionTimeMs, in.metadata, in.entries))
          awaitUncommittedBelowCap()
          // Named here; PUT and appended in the background, several per manifest write.
          val landed = uploader.get.submit(calls).whenComplete { (done, error) =>
            if (error != null) inputs.foreach(_.handle.future.completeExceptionally(unwrap(error)))
            else {
              val (sequence, location, size) = done
              batchesFlushed.increment(); entriesFlushed.add(inputs.map(_.entries.size.toLong).sum)
              bytesFlushed.add(inputs.map(in => BatchCodec.recordBytes(in.entries) + in.metadata.length).sum)
              bytesWritten.add(size.toLong)
              flushDuration.observe((clock.nanoTime() - started) / 1e9)
              var index = 0
              inputs.foreach { in =>
                in.handle.future.complete(DurableWrite(sequence, location, index, in.ingestionTimeMs))
                index += in.entries.size
              }
            }
          }
          inFlight.filterInPlace(!_.isDone)
          inFlight += landed
        } catch { case NonFatal(e) => inputs.foreach(_.handle.future.completeExceptionally(e)) }
    } finally {
      all.foreach(in => byCall.remove(in.callNo))
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
  /** `callNo`: its ENTRIES record in the spool (-1: no spool). */
  final case class Input(entries: IndexedSeq[Array[Byte]], metadata: Array[Byte], ingestionTimeMs: Long, handle: WriteHandle,
      callNo: Long = -1) extends Message
  final case class Flush(done: CompletableFuture[Void]) extends Message
  final case class Close(done: CompletableFuture[Void]) extends Message
  /** eagerFlush: a batch's manifest write landed (or failed), so the open batch may go at once. */
  case object Landed extends Message

  def unwrap(e: Throwable): Throwable = e match {
    case c: java.util.concurrent.CompletionException if c.getCause != null => c.getCause
    case other => other
  }
}
