package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.Base64

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.internal.Logging

import osqueue.SystemClock
import osqueue.format.{BatchNames, EntryTag}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{ManifestAppender, ManifestStore, PendingLocation, RetryPolicy}
import osqueue.WriterFencedException
import osqueue.store.{CasOutcome, ObjectStore, ObjectVersion}

/**
 * The driver's commit of one sink write (docs/adr/0002): skip a batch id this writer already
 * committed; otherwise append every task's files in ONE manifest write, tagged
 * (writerId, batchId, attemptId), then record the batch id in the writer's state object.
 * A crash between those two writes makes a replay append a second copy with a new attemptId,
 * which osqueue readers drop.
 *
 * A streaming write first [[claim]]s the writer: it raises the state's `generation`, which
 * fences every older driver of the same writer id, and records its Spark query id as the owner.
 * A fenced committer re-reads the state before each manifest write attempt and stops with
 * [[WriterFencedException]] instead of writing.
 */
private[spark] final class OsqueueSinkCommitter(options: SinkOptions, writerId: String, queryId: String) extends Logging {
  import OsqueueSinkCommitter.WriterState

  private val store: ObjectStore = OsqueueStores.open(options.location)
  private val stateKey = OsqueueSinkCommitter.stateKey(options.location.manifestPath, writerId)
  val metrics = new MetricsRegistry
  /**
   * Batch ids for which this committer let a manifest write go out (or may have): their files
   * may be referenced by the manifest even if `commit` then failed, so they must not be deleted.
   */
  private val writeAttempted = java.util.concurrent.ConcurrentHashMap.newKeySet[java.lang.Long]()
  /** The generation this driver claimed; None for batch writes, which never claim. */
  @volatile private var generation: Option[Long] = None

  /** Claims the writer once per streaming run (see [[OsqueueWrite.streamRunId]]); later writes of the run reuse it. */
  def claimForRun(runId: String): Long = {
    val key = s"${options.location.identity}\u0000${writerId}\u0000${runId}"
    val claimed = OsqueueSinkCommitter.runGenerations.computeIfAbsent(key, _ => claim())
    generation = Some(claimed)
    claimed
  }

  /**
   * Makes this driver the writer's owner: generation + 1, fencing older drivers. Returns it.
   * Refuses a writer whose batches another query (another checkpoint: its batch ids restart at
   * 0) or df.write already committed: this query's batches would be skipped as replays.
   */
  def claim(): Long = {
    val claimed = updateState { s =>
      s.owner.filter(o => o != queryId && s.lastCommittedBatch >= 0).foreach { o =>
        throw OsqueueSinkErrors.writerOwnedByAnother(writerId, o, s.lastCommittedBatch, queryId)
      }
      s.copy(generation = s.generation + 1, owner = Some(queryId))
    }.generation
    generation = Some(claimed)
    logInfo(s"osqueue sink '$writerId': this driver is writer generation $claimed (older drivers are fenced)")
    claimed
  }

  /**
   * Returns false when `batchId` was already committed (a replay) and nothing was appended.
   * `owner` is what the writer state records (the query id, or df.write); None for a one-off
   * df.write, which Spark commits once: no state and no tags, as they could never skip anything.
   */
  def commit(batchId: Long, messages: Seq[OsqueueCommitMessage], owner: Option[String]): Boolean = {
    val batches = messages.sortBy(_.partitionId).flatMap(_.batches)
    if (owner.isEmpty) {
      append(batchId, batches, tag = Array.emptyByteArray)
      OsqueueSinkFaults.at("between-append-and-state")
      return true
    }
    // Files of a batch id this committer already sent a manifest write for may be referenced: keep them.
    def deleteUnreferenced(): Unit = if (!manifestWriteAttempted(batchId)) batches.foreach(b => store.delete(b.location))
    val state = try checkOwner() catch {
      case e: WriterFencedException =>
        deleteUnreferenced() // this attempt's own files: never referenced
        throw e
    }
    // A df.write must not share a streaming query's batch ids (the claim refuses the reverse).
    val batchOwner = OsqueueSinkErrors.BatchWriteOwner
    state.flatMap(_.owner).filter(o => owner.contains(batchOwner) && o != batchOwner).foreach { o =>
      deleteUnreferenced()
      throw OsqueueSinkErrors.streamWriterUsedByBatch(writerId, o)
    }
    if (state.exists(_.lastCommittedBatch >= batchId)) {
      logInfo(s"osqueue sink '$writerId': batch $batchId was already committed; deleting this attempt's files")
      deleteUnreferenced()
      return false
    }
    append(batchId, batches,
      tag = EntryTag(writerId, batchId, BatchNames.newKey("", System.currentTimeMillis()).stripSuffix(".batch")).encode)
    OsqueueSinkFaults.at("between-append-and-state")
    // Monotonic: a batch id already recorded (by a zombie that got further) is left alone.
    updateState(
      s => if (s.lastCommittedBatch >= batchId) s else s.copy(lastCommittedBatch = batchId, owner = s.owner.orElse(owner)),
      checkOwnerOf = true)
    true
  }

  /** All the files in ONE manifest write; each write attempt first re-checks the generation. */
  private def append(batchId: Long, batches: Seq[WrittenBatch], tag: Array[Byte]): Unit = if (batches.nonEmpty) {
    val pending = batches.map(b => new PendingLocation(b.location, b.metadata, reupload(b.location), tag)).toIndexedSeq
    new ManifestAppender(new ManifestStore(store, options.location.manifestPath), RetryPolicy(), SystemClock, metrics,
      options.gcGracePeriod.toMillis, role = "sink", beforeWrite = () => { checkOwner(); writeAttempted.add(batchId); () })
      .append(pending)
  }

  /** True once a manifest write for `batchId` was sent (or about to be): its outcome may be unknown. */
  def manifestWriteAttempted(batchId: Long): Boolean = writeAttempted.contains(batchId)

  def conflicts: Long = metrics.counterValue(MetricNames.ManifestConflicts, "role" -> "sink")

  /** A file that waited past half the GC grace period is copied under a fresh name before enqueueing. */
  private def reupload(location: String): () => String = () => {
    val bytes = store.get(location).getOrElse(throw new osqueue.BatchNotFoundException(location, -1)).bytes
    val key = BatchNames.newKey(options.location.dataPathPrefix, System.currentTimeMillis())
    store.put(key, bytes)
    key
  }

  /** The current state, after checking that this driver still owns the writer (if it claimed it). */
  private def checkOwner(): Option[WriterState] = {
    val state = readState().map(_._1)
    verifyOwner(state)
    state
  }

  private def verifyOwner(state: Option[WriterState]): Unit = generation.foreach { own =>
    val current = state.map(_.generation).getOrElse(0L)
    if (current != own) throw new WriterFencedException(writerId, own, current)
  }

  private def readState(): Option[(WriterState, ObjectVersion)] =
    store.get(stateKey).map(o => (OsqueueSinkCommitter.decodeState(stateKey, o.bytes), o.version))

  /** Compare-and-swap `f` onto the state (created if missing); no write when `f` changes nothing. */
  private def updateState(f: WriterState => WriterState, checkOwnerOf: Boolean = false): WriterState = {
    var attempt = 0
    while (true) {
      val current = readState()
      if (checkOwnerOf) verifyOwner(current.map(_._1))
      val before = current.map(_._1).getOrElse(WriterState(writerId, lastCommittedBatch = -1, generation = 0))
      val after = f(before)
      if (current.isDefined && after == before) return after
      val bytes = OsqueueSinkCommitter.encodeState(after)
      val outcome = current match {
        case Some((_, v)) => store.putIfVersionMatches(stateKey, bytes, v)
        case None => store.putIfAbsent(stateKey, bytes)
      }
      if (outcome.isInstanceOf[CasOutcome.Written]) return after
      attempt += 1
      if (attempt >= 100) throw new osqueue.ConflictRetriesExhaustedException(stateKey, attempt, -1)
      Thread.sleep(RetryPolicy().delayMs(attempt))
    }
    throw new IllegalStateException("unreachable")
  }
}

private[spark] object OsqueueSinkCommitter {
  private val mapper = new ObjectMapper()
  /** Generation claimed per (queue, writer id, streaming run) in this driver JVM. */
  private val runGenerations = new java.util.concurrent.ConcurrentHashMap[String, Long]()

  /**
   * `<manifestPath>.writers/<b64>`: the last batch id committed (-1: none), the owning generation,
   * and the owner: the Spark query id of the streaming query, or "df.write" (None in states
   * written before owners were recorded).
   */
  final case class WriterState(writerId: String, lastCommittedBatch: Long, generation: Long, owner: Option[String] = None)

  def encodeState(s: WriterState): Array[Byte] = {
    val node = mapper.createObjectNode()
    node.put("version", 1).put("writerId", s.writerId).put("lastCommittedBatch", s.lastCommittedBatch)
      .put("generation", s.generation)
    s.owner.foreach(node.put("owner", _))
    mapper.writeValueAsBytes(node)
  }

  /**
   * `generation` and `owner` are optional (states written before writer fencing have no
   * generation: 0; before owners, no owner). Readers ignore fields they do not know, so the
   * version stays 1.
   */
  def decodeState(key: String, bytes: Array[Byte]): WriterState = {
    val node = try mapper.readTree(bytes) catch {
      case e: Exception => throw new IllegalStateException(s"corrupt osqueue sink state '$key': ${e.getMessage}")
    }
    def long(field: String, default: Option[Long]): Long = node.path(field) match {
      case n if n.isIntegralNumber && n.canConvertToLong => n.asLong
      case n if n.isMissingNode && default.isDefined => default.get
      case _ => throw new IllegalStateException(s"corrupt or newer osqueue sink state '$key': ${new String(bytes, UTF_8)}")
    }
    if (node == null || node.path("version").asInt(-1) != 1)
      throw new IllegalStateException(s"corrupt or newer osqueue sink state '$key': ${new String(bytes, UTF_8)}")
    val owner = node.path("owner") match {
      case n if n.isMissingNode || n.isNull => None
      case n if n.isTextual => Some(n.asText)
      case _ => throw new IllegalStateException(s"corrupt osqueue sink state '$key': ${new String(bytes, UTF_8)}")
    }
    WriterState(node.path("writerId").asText(""), long("lastCommittedBatch", None), long("generation", Some(0L)), owner)
  }

  /** `<manifestPath>.writers/<base64url(writerId)>`: any writer id maps to one safe key. */
  def stateKey(manifestPath: String, writerId: String): String =
    s"$manifestPath.writers/" + Base64.getUrlEncoder.withoutPadding.encodeToString(writerId.getBytes(UTF_8))
}
