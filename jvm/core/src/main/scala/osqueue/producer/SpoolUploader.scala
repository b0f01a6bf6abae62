package osqueue.producer

import java.util.zip.CRC32

import org.slf4j.LoggerFactory

import osqueue.{AmbiguousCommitException, Clock, ConflictRetriesExhaustedException, RandomSource, StoreException}
import osqueue.format.{BatchCodec, BatchIntegrity, BatchNames, Compression, MetadataItem}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{ManifestAppender, PendingLocation, RetryPolicy}
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
    metrics: MetricsRegistry) {
  private val log = LoggerFactory.getLogger("osqueue.producer.spool")

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

  private def put(key: String, data: Array[Byte]): Unit = forever(s"PUT $key")(store.put(key, data))

  private def newKey(): String = BatchNames.newKey(prefix, clock.nowMillis(), random)

  /**
   * PUTs the batch (already named by a BATCH record) and appends it; LANDED when it is in. Returns
   * (sequence, location). Throws what retrying cannot fix (e.g. [[AmbiguousCommitException]]); the
   * batch stays in the spool then.
   */
  def ship(batchNo: Long, data: Array[Byte], location: String, metadata: IndexedSeq[MetadataItem]): (Long, String) = {
    val putStarted = clock.nanoTime()
    put(location, data)
    val reupload = () => { val key = newKey(); put(key, data); key }
    val sequence = forever(s"appending batch $batchNo") {
      val prior = spool.attemptsOf(batchNo).map(a => (a.base, a.locations.toIndexedSeq))
      val pending = new PendingLocation(location, metadata, reupload, BatchIntegrity.record(data),
        if (prior.isEmpty) Some(putStarted) else None)
      val s = appender.commitOne(pending, prior, (base, loc) => spool.recordAttempt(base, Seq(batchNo), Seq(loc)))
      (s, pending.location)
    }
    spool.recordLanded(sequence._1, Seq(batchNo))
    sequence
  }

  /** Steps 2-6 for calls in no batch yet: encode, BATCH record, [[ship]]; (sequence, location, size). */
  def shipCalls(calls: Seq[EntriesRecord]): (Long, String, Int) = {
    val (data, metadata) = encode(calls)
    val key = newKey()
    val batchNo = spool.recordBatch(calls.head.callNo, calls.last.callNo, data.length.toLong, SpoolUploader.crc(data), key)
    val (sequence, location) = ship(batchNo, data, key, metadata)
    (sequence, location, data.length)
  }

  def encode(calls: Seq[EntriesRecord]): (Array[Byte], IndexedSeq[MetadataItem]) = {
    val (records, metadata) = SpoolUploader.assemble(calls)
    (BatchCodec.encode(records, compression), metadata)
  }

  /** Ships every batch the spool named but did not see land (step 2 on); how many. */
  def replay(): Int = spool.pendingBatches().map { r =>
    val (data, metadata) = encode(spool.batchCalls(r.batchNo))
    var location = r.location
    if (data.length.toLong != r.byteLength || SpoolUploader.crc(data) != r.batchCrc32) {
      // Other bytes (another compression or zstd build): a fresh name, recorded before its PUT.
      location = newKey()
      spool.renameBatch(BatchRecord(r.batchNo, r.firstCall, r.lastCall, data.length.toLong, SpoolUploader.crc(data),
          location))
    }
    ship(r.batchNo, data, location, metadata)
    metrics.counter(MetricNames.SpoolReplayedBatches).increment()
    1
  }.sum
}

object SpoolUploader {
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
