package osqueue.producer

import java.util.concurrent.{CompletableFuture, ExecutorService, Executors}
import java.util.zip.CRC32

import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import org.slf4j.LoggerFactory

import osqueue.{AmbiguousCommitException, Clock, ConflictRetriesExhaustedException, RandomSource, StoreException}
import osqueue.format.{BatchCodec, BatchIntegrity, BatchNames, Compression, MetadataItem}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{DataPrefixOwner, ManifestAppender, PendingLocation, RetryPolicy}
import osqueue.store.ObjectStore

/**
 * Ships a producer spool's batches: PUT, manifest CAS with ATTEMPT records, LANDED; replay (steps 2-6
 * of docs/adr/0006 part 2; Python: `osqueue.producer.spool_uploader`).
 *
 * The uploader retries PUTs and manifest writes without a budget (backoff up to the retry policy's
 * `maxDelayMs`), so an outage only delays delivery. Each CAS is preceded by an ATTEMPT record, and
 * every later write of the batch (a retry, or a replay after a crash) is seeded with all of them, so
 * a write of unknown outcome is resolved as docs/format.md §5 does (the locations at their bases, the
 * segments, the receipts) before anything is appended again.
 *
 * Pipelined as an unspooled producer's group commit is (issue 28): up to [[SpoolUploader.ParallelPuts]]
 * batch files are PUT at once while one thread appends the uploaded ones, in batch order, several per
 * manifest write (one ATTEMPT record names them all; one LANDED record settles them all).
 */
final class SpoolUploader(
    store: ObjectStore,
    spool: Spool,
    appender: ManifestAppender,
    prefix: String,
    compression: Compression,
    clock: Clock,
    random: RandomSource,
    retry: RetryPolicy,
    metrics: MetricsRegistry,
    claim: () => Option[DataPrefixOwner] = () => None) {
  import SpoolUploader._
  private val log = LoggerFactory.getLogger("osqueue.producer.spool")
  private val puts: ExecutorService = Executors.newFixedThreadPool(ParallelPuts,
    { (r: Runnable) =>
      val t = new Thread(r, "osqueue-spool-put"); t.setDaemon(true); t
    })
  private val lock = new Object
  private val inFlight = ArrayBuffer.empty[Shipment] // submitted, not yet taken by the committer, in batch order
  private var committer: Thread = null
  private val unsettled = ArrayBuffer.empty[(Long, Seq[Long])] // LANDED records written, not yet forced: (ticket, batchNos)

  /** A store error is retried; so is a CAS loop that ran out of budget (against other writers, or undecided). */
  private def retried(e: Throwable): Boolean = e match {
    case _: StoreException | _: ConflictRetriesExhaustedException => true
    // The CAS loop gave up while a write was undecided: its ATTEMPT record is kept, so the next try
    // resolves it. An ambiguity found by looking (no such cause) is final: thrown.
    case a: AmbiguousCommitException => a.getCause != null && retried(a.getCause) && !a.getCause.isInstanceOf[AmbiguousCommitException]
    case _ => false
  }

  private def forever[T](what: String)(action: => T): T = {
    var failures = 0
    while (true) {
      try return action
      catch {
        case e: Exception if retried(e) =>
          failures += 1
          if (failures == 1 || failures % 50 == 0)
            log.warn(s"spool '${spool.directory}': $what failed ($failures times so far), retrying: ${e.getMessage}")
          clock.sleepMillis(retry.delayMs(math.min(failures, 30), () => random.nextDouble()))
      }
    }
    throw new IllegalStateException("unreachable")
  }

  /** PUTs, retried without a budget; when it started (clock.nanoTime()). */
  private def put(key: String, data: Array[Byte]): Long = {
    val started = clock.nanoTime()
    forever(s"PUT $key")(store.put(key, data))
    started
  }

  private def newKey(): String = BatchNames.newKey(prefix, clock.nowMillis(), random)

  /** Starts the PUT of a batch its BATCH record already named (step 3). */
  private def shipment(batchNo: Long, data: Array[Byte], location: String, metadata: IndexedSeq[MetadataItem])
      : Shipment = {
    val putDone = CompletableFuture.supplyAsync[java.lang.Long](() => java.lang.Long.valueOf(put(location, data)), puts)
    new Shipment(batchNo, data, location, metadata, putDone, new CompletableFuture[(Long, String, Int)]())
  }

  /**
   * Steps 2-6 for calls in no batch yet: encode and BATCH record in this thread, then in the background
   * the PUT (no force first: the ATTEMPT record's covers the BATCH record) and the append. The future
   * completes once the batch's manifest CAS landed (before its LANDED record is forced), with (sequence,
   * location, size), or fails with what retrying cannot fix (e.g. [[AmbiguousCommitException]]; the
   * batch stays in the spool).
   */
  def submit(calls: Seq[EntriesRecord]): CompletableFuture[(Long, String, Int)] = {
    val (data, metadata) = encode(calls)
    val key = newKey()
    val batchNo = spool.nameBatch(calls.head.callNo, calls.last.callNo, data.length.toLong, crc(data), key)
    val putDone = CompletableFuture.supplyAsync[java.lang.Long](
      // No fsync of the BATCH record before its PUT. The ATTEMPT record's fsync before
      // the CAS covers it (tickets are forced in order, a rotation forces the file it closes), so a name not
      // on disk is never in the manifest; after a crash replay re-batches its calls under a fresh name and the
      // orphan PUT is garbage GC deletes (docs/adr/0006 part 2).
      () => java.lang.Long.valueOf(put(key, data)),
      puts
    )
    val s = new Shipment(batchNo, data, key, metadata, putDone, new CompletableFuture[(Long, String, Int)]())
    lock.synchronized {
      inFlight += s
      if (committer == null) {
        committer = new Thread(() => run(), "osqueue-spool-commit")
        committer.setDaemon(true)
        committer.start()
      }
    }
    s.done
  }

  /** The committer: waits for the oldest PUT, then appends it with every later one already uploaded. */
  private def run(): Unit = while (true) {
    if (lock.synchronized(inFlight.isEmpty)) {
      settleLanded(sync = true) // the last LANDED records: forced off the callers' path
      lock.synchronized {
        if (inFlight.isEmpty) { committer = null; lock.notifyAll(); return }
      }
    }
    val first = lock.synchronized(inFlight.head)
    if (!first.put.isDone) settleLanded(sync = true) // nothing to coalesce with while the PUT is out: settle now
    val putFailure =
      try { first.put.join(); None }
      catch { case NonFatal(e) => Some(Option(e.getCause).getOrElse(e)) }
    putFailure match {
      case Some(e) => // not a store error (those are retried): this batch fails alone
        lock.synchronized(inFlight.remove(0))
        first.done.completeExceptionally(e)
      case None =>
        val group = lock.synchronized {
          var n = 1
          while (n < math.min(inFlight.size, MaxGroup) && inFlight(n).put.isDone &&
            !inFlight(n).put.isCompletedExceptionally) n += 1
          val g = inFlight.take(n).toIndexedSeq
          inFlight.remove(0, n)
          g
        }
        try {
          val sequences = commit(group)
          group.zip(sequences).foreach { case (s, (q, loc)) => s.done.complete((q, loc, s.data.length)) }
        } catch { case NonFatal(e) => group.foreach(_.done.completeExceptionally(e)) }
    }
  }

  /** Steps 4-6 for uploaded batches: appended in one write (ATTEMPT before each CAS), then LANDED. */
  private def commit(group: IndexedSeq[Shipment]): IndexedSeq[(Long, String)] = {
    val batchNos = group.map(_.batchNo)
    val what = s"appending batch ${batchNos.head}" + (if (group.size > 1) s"..${batchNos.last}" else "")
    val landed = forever(what) {
      // An ATTEMPT record names every batch it carried.
      val prior = batchNos.flatMap(spool.attemptsOf).distinct.map(a => (a.base, a.locations.toIndexedSeq))
      val pending = group.map { s =>
        new PendingLocation(s.location, s.metadata, () => { val key = newKey(); put(key, s.data); key },
          BatchIntegrity.record(s.data), if (prior.isEmpty) Some(s.put.join().longValue) else None)
      }
      val sequences = appender.commitMany(pending, prior,
        (base, locs) => {
          spool.recordAttempt(base, batchNos, locs)
          settleLanded(sync = false) // that fsync covered every LANDED record written before it
        })
      sequences.zip(pending.map(_.location))
    }
    // The handles resolve once the CAS landed, before LANDED is durable (a crash in between is an
    // ATTEMPT without LANDED, which replay resolves as landed). The record is forced by the next ATTEMPT's
    // fsync or when the committer waits or goes idle; only then are the batches settled (truncation).
    unsettled += ((spool.appendLanded(landed.head._1, batchNos), batchNos))
    landed
  }

  /** Settles the batches whose LANDED records are on disk (`sync`: forces them first). Committer thread only. */
  private def settleLanded(sync: Boolean): Unit = if (unsettled.nonEmpty) {
    if (sync) spool.sync(unsettled.last._1)
    val done = unsettled.toList
    unsettled.clear()
    done.foreach { case (_, batchNos) => spool.settleLanded(batchNos) }
  }

  def encode(calls: Seq[EntriesRecord]): (Array[Byte], IndexedSeq[MetadataItem]) = {
    val (records, metadata) = SpoolUploader.assemble(calls)
    (BatchCodec.encode(records, compression), metadata)
  }

  /**
   * Ships every batch the spool named but did not see land (step 2 on), in batch order and grouped as
   * [[SpoolUploader.replayGroups]] says; how many. The data prefix is claimed first (`claim`, retried
   * like an upload, so a producer started while the store is unreachable starts).
   */
  def replay(): Int = {
    // The appender then takes the queue's grace period from the record, if shorter than ours (§6).
    forever("claiming the data prefix")(claim())
    replayGroups(spool.pendingBatches(), spool.attemptsOf).map { group =>
      val shipments = group.map { r =>
        val (data, metadata) = encode(spool.batchCalls(r.batchNo))
        var location = r.location
        if (data.length.toLong != r.byteLength || crc(data) != r.batchCrc32) {
          // Other bytes (another compression or zstd build): a fresh name, recorded before its PUT.
          location = newKey()
          spool.renameBatch(BatchRecord(r.batchNo, r.firstCall, r.lastCall, data.length.toLong, crc(data), location))
        }
        shipment(r.batchNo, data, location, metadata)
      }
      shipments.foreach(_.put.join())
      commit(shipments.toIndexedSeq)
      settleLanded(sync = true)
      metrics.counter(MetricNames.SpoolReplayedBatches).add(group.size.toLong)
      group.size
    }.sum
  }

  /** Waits until nothing submitted is still on its way; whether that happened within `timeoutMs`. */
  def idle(timeoutMs: Long): Boolean = lock.synchronized {
    val deadline = clock.nanoTime() + timeoutMs * 1000000L
    while (committer != null && clock.nanoTime() < deadline)
      lock.wait(math.max(1L, (deadline - clock.nanoTime()) / 1000000L))
    committer == null
  }

  /** Stops the PUT threads (call once [[idle]]). */
  def close(): Unit = puts.shutdown()
}

/** One named batch on its way: its PUT (completing with when it started) and its landing. */
final class Shipment(
    val batchNo: Long,
    val data: Array[Byte],
    val location: String,
    val metadata: IndexedSeq[MetadataItem],
    val put: CompletableFuture[java.lang.Long],
    val done: CompletableFuture[(Long, String, Int)])

object SpoolUploader {
  /** Batch files PUT at once, and batches appended per manifest write at most (an ATTEMPT record's count is a u16). */
  val ParallelPuts = 4
  val MaxGroup = 64

  /**
   * The pending batches cut into manifest writes, in batch order: a batch with ATTEMPT records goes with
   * the batches its write carried (so each earlier write is resolved as the group it was); runs of
   * batches never sent go [[MaxGroup]] at a time.
   */
  def replayGroups(pending: Seq[BatchRecord], attemptsOf: Long => Seq[AttemptRecord]): Seq[Seq[BatchRecord]] = {
    val byNo = pending.map(b => b.batchNo -> b).toMap
    val placed = scala.collection.mutable.Set.empty[Long]
    val groups = ArrayBuffer.empty[Seq[BatchRecord]]
    val run = ArrayBuffer.empty[BatchRecord]
    def endRun(): Unit = if (run.nonEmpty) { groups += run.toList; run.clear() }
    pending.foreach { b =>
      if (!placed(b.batchNo)) {
        val attempts = attemptsOf(b.batchNo)
        if (attempts.isEmpty) {
          run += b; placed += b.batchNo
          if (run.size == MaxGroup) endRun()
        } else {
          endRun()
          val members = (attempts.flatMap(_.batchNos).filter(n => byNo.contains(n) && !placed(n)) :+ b.batchNo)
            .distinct.sorted
          placed ++= members
          groups += members.map(byNo)
        }
      }
    }
    endRun()
    groups.toList
  }

  /** A batch's records and metadata items from its calls, as the producer builds them. */
  def assemble(calls: Seq[EntriesRecord]): (IndexedSeq[Array[Byte]], IndexedSeq[MetadataItem]) = {
    val records = IndexedSeq.newBuilder[Array[Byte]]
    val metadata = IndexedSeq.newBuilder[MetadataItem]
    var n = 0
    calls.foreach { c =>
      metadata += MetadataItem(n, c.ingestionTimeMs, c.metadata)
      records ++= c.entries
      n += c.entries.size
    }
    (records.result(), metadata.result())
  }

  private[producer] def crc(data: Array[Byte]): Long = { val c = new CRC32(); c.update(data); c.getValue }
}
