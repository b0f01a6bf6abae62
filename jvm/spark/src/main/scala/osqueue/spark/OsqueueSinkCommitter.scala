package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.Base64

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.internal.Logging

import scala.util.control.NonFatal

import osqueue.{Clock, SystemClock}
import osqueue.format.{BatchIntegrity, BatchNames, EntryTag}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{
  CasCounters,
  CasLoop,
  CasObject,
  CasStep,
  DataPrefixOwner,
  ManifestAppender,
  ManifestStore,
  PendingLocation,
  RetryPolicy
}
import osqueue.WriterFencedException
import osqueue.store.ObjectStore

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
 *
 * Files older than half the grace period at commit are copied under fresh names on the executors
 * before the append (docs/format.md §6). A stale file GC already deleted cannot be enqueued: the
 * epoch fails with OSQUEUE_SINK_FILES_EXPIRED and the state's `stageUploads` makes the replay's
 * tasks write under `<manifestPath>.staging/`, where GC never deletes; such an epoch's files are
 * all copied into the data prefix at commit, so the replay commits however slow it is.
 */
private[spark] final class OsqueueSinkCommitter(options: SinkOptions, writerId: String, queryId: String,
    clock: Clock = SystemClock) extends Logging {
  import OsqueueSinkCommitter.WriterState

  private val store: ObjectStore = OsqueueStores.open(options.location)
  private val stateKey = OsqueueSinkCommitter.stateKey(options.location.manifestPath, writerId)
  /** Where this writer's tasks write while the state asks for staging (GC never deletes there). */
  val stagingPrefix: String = OsqueueSinkCommitter.stagingPrefix(options.location.manifestPath, writerId)
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
        throw OsqueueExceptions.writerOwnedByAnother(writerId, o, s.lastCommittedBatch, queryId)
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
      append(batchId, enqueueable(batchId, batches, recordExpiry = false)._1, tag = Array.emptyByteArray)
      OsqueueSinkFaults.at("between-append-and-state")
      return true
    }
    // Files of a batch id this committer already sent a manifest write for may be referenced: keep them.
    def deleteUnreferenced(): Unit = if (!manifestWriteAttempted(batchId)) batches.foreach(b => store.delete(b.location))
    val state =
      try checkOwner()
      catch {
        case e: WriterFencedException =>
          deleteUnreferenced() // this attempt's own files: never referenced
          throw e
      }
    // A df.write must not share a streaming query's batch ids (the claim refuses the reverse).
    val batchOwner = OsqueueExceptions.BatchWriteOwner
    state.flatMap(_.owner).filter(o => owner.contains(batchOwner) && o != batchOwner).foreach { o =>
      deleteUnreferenced()
      throw OsqueueExceptions.streamWriterUsedByBatch(writerId, o)
    }
    if (state.exists(_.lastCommittedBatch >= batchId)) {
      logInfo(s"osqueue sink '$writerId': batch $batchId was already committed; deleting this attempt's files")
      deleteUnreferenced()
      return false
    }
    val (ready, slow) = enqueueable(batchId, batches, recordExpiry = true)
    append(batchId, ready,
      tag = EntryTag(writerId, batchId, BatchNames.newKey("", clock.nowMillis()).stripSuffix(".batch")).encode)
    OsqueueSinkFaults.at("between-append-and-state")
    val staged = batches.filter(b => isStaged(b.location))
    // Monotonic: a batch id already recorded (by a zombie that got further) is left alone. A staged
    // epoch that was quick after all ends the staging.
    updateState(
      s =>
        if (s.lastCommittedBatch >= batchId) s
        else s.copy(lastCommittedBatch = batchId, owner = s.owner.orElse(owner),
          stageUploads = s.stageUploads && (staged.isEmpty || slow)),
      checkOwnerOf = true)
    if (staged.nonEmpty) deleteStaged(staged)
    true
  }

  /** The staging prefix if the writer state asks the tasks to stage their files, else None. */
  def stagingRequested(): Option[String] =
    readState().filter(_.stageUploads).map { _ =>
      logWarning(s"osqueue sink '$writerId': an earlier epoch's files expired before its commit; this epoch's tasks " +
        s"write under '$stagingPrefix' (GC never deletes there) and the commit copies them into the queue")
      stagingPrefix
    }

  def isStaged(location: String): Boolean = location.startsWith(stagingPrefix + "/")

  /**
   * The files as they can be enqueued, and whether any was older than half the grace period. Staged
   * and stale files are copied under fresh names in one Spark job. If GC deleted a stale one, the
   * epoch cannot commit: the copies are deleted, the state asks for staging (`recordExpiry`) so that
   * the replay commits, and OSQUEUE_SINK_FILES_EXPIRED is thrown.
   */
  private def enqueueable(batchId: Long, batches: Seq[WrittenBatch], recordExpiry: Boolean): (Seq[WrittenBatch], Boolean) = {
    if (batches.isEmpty) return (batches, false)
    val graceMs = gracePeriodMs()
    val now = clock.nowMillis()
    def stale(b: WrittenBatch) = BatchNames.ulidTimeMs(b.location).exists(now - _ >= graceMs / 2)
    val toCopy = batches.filter(b => isStaged(b.location) || stale(b)).toIndexedSeq
    if (toCopy.isEmpty) return (batches, false)
    logInfo(s"osqueue sink '$writerId': copying ${toCopy.size} staged or stale files of batch $batchId on the executors")
    val copies = SinkFileCopier.onExecutors(options, toCopy.map(_.location))
    metrics.counter(MetricNames.BatchesReuploaded).add(copies.flatten.size.toLong)
    val missing = toCopy.zip(copies).collect { case (b, None) => b.location }
    if (missing.nonEmpty) {
      copies.flatten.foreach(k =>
        try store.delete(k)
        catch { case NonFatal(_) => () }) // orphans otherwise: GC's
      if (recordExpiry) updateState(_.copy(stageUploads = true), checkOwnerOf = true)
      throw OsqueueExceptions.filesExpired(writerId, batchId, missing, graceMs, staging = recordExpiry)
    }
    val fresh = toCopy.map(_.location).zip(copies.flatten).toMap
    (batches.map(b => fresh.get(b.location).fold(b)(k => b.copy(location = k))), batches.exists(stale))
  }

  /** The queue's grace period as the sink applies it: its option, or the queue's if shorter (§6). */
  private def gracePeriodMs(): Long = {
    val queue = DataPrefixOwner.claim(store, options.location.manifestPath, options.location.dataPathPrefix, clock, None)
    math.min(options.gcGracePeriod.toMillis, queue.fold(Long.MaxValue)(_.gcGracePeriodMs))
  }

  /**
   * Staged files are never referenced (their copies are): deleted after the commit, with any older
   * ones of this writer (left by an attempt that died before its commit).
   */
  private def deleteStaged(staged: Seq[WrittenBatch]): Unit =
    try {
      val oldest = staged.flatMap(b => BatchNames.ulidTimeMs(b.location)).min
      val older = store.list(stagingPrefix + "/").map(_.key)
        .filter(k => BatchNames.ulidTimeMs(k).exists(_ < oldest))
      (staged.map(_.location) ++ older).foreach(store.delete)
    } catch {
      case NonFatal(e) => logWarning(s"osqueue sink '$writerId': could not delete staged files under '$stagingPrefix'", e)
    }

  /** All the files in ONE manifest write; each write attempt first re-checks the generation. */
  private def append(batchId: Long, batches: Seq[WrittenBatch], tag: Array[Byte]): Unit = if (batches.nonEmpty) {
    // The entry-integrity record first, then the sink tag (§2.1); copies of stale files are byte-identical.
    def extension(b: WrittenBatch) = b.crc32.fold(tag)(crc => BatchIntegrity.record(b.bytes, crc) ++ tag)
    val pending = batches.map(b => new PendingLocation(b.location, b.metadata, reupload(b.location), extension(b))).toIndexedSeq
    new ManifestAppender(new ManifestStore(store, options.location.manifestPath), RetryPolicy(), clock, metrics,
      options.gcGracePeriod.toMillis, role = "sink", beforeWrite = () => { checkOwner(); writeAttempted.add(batchId); () },
      segmentEntries = options.manifestSegmentEntries)
      .append(pending)
  }

  /** True once a manifest write for `batchId` was sent (or about to be): its outcome may be unknown. */
  def manifestWriteAttempted(batchId: Long): Boolean = writeAttempted.contains(batchId)

  def conflicts: Long = metrics.counterValue(MetricNames.ManifestConflicts, "role" -> "sink")

  /**
   * The appender's last resort, only when the manifest write itself outlasts half the grace period
   * after [[enqueueable]]'s copies: one more copy, on the driver.
   */
  private def reupload(location: String): () => String = () =>
    SinkFileCopier.copy(options, location).getOrElse(throw OsqueueExceptions.batchNotFound(location))

  /** The current state, after checking that this driver still owns the writer (if it claimed it). */
  private def checkOwner(): Option[WriterState] = {
    val state = readState()
    verifyOwner(state)
    state
  }

  private def verifyOwner(state: Option[WriterState]): Unit = generation.foreach { own =>
    val current = state.map(_.generation).getOrElse(0L)
    if (current != own) throw OsqueueExceptions.writerFenced(writerId, own, current)
  }

  private def readState(): Option[WriterState] = {
    val snapshot = stateObject.read()
    snapshot.version.map(_ => OsqueueSinkCommitter.decodeState(stateKey, snapshot.raw))
  }

  /**
   * Compare-and-swap `f` onto the state (created if missing) through the core's [[CasLoop]]; no
   * write when `f` changes nothing. A write of unknown outcome is re-applied to the state re-read.
   */
  private def updateState(f: WriterState => WriterState, checkOwnerOf: Boolean = false): WriterState =
    stateLoop.run[WriterState] { (snapshot, _) =>
      val current = snapshot.version.map(_ => OsqueueSinkCommitter.decodeState(stateKey, snapshot.raw))
      if (checkOwnerOf) verifyOwner(current)
      val before = current.getOrElse(WriterState(writerId, lastCommittedBatch = -1, generation = 0))
      val after = f(before)
      if (current.isDefined && after == before) CasStep.Done(after)
      else CasStep.Write(OsqueueSinkCommitter.encodeState(after), () => after)
    }

  /** The writer's state object: a CAS register beside the manifest, not counted as manifest writes. */
  private lazy val stateObject = new CasObject(store, stateKey)
  private lazy val stateLoop = new CasLoop(stateObject, RetryPolicy(), clock, CasCounters.uncounted)
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
  final case class WriterState(writerId: String, lastCommittedBatch: Long, generation: Long, owner: Option[String] = None,
      stageUploads: Boolean = false)

  def encodeState(s: WriterState): Array[Byte] = {
    val node = mapper.createObjectNode()
    node.put("version", 1).put("writerId", s.writerId).put("lastCommittedBatch", s.lastCommittedBatch)
      .put("generation", s.generation)
    s.owner.foreach(node.put("owner", _))
    if (s.stageUploads) node.put("stageUploads", true)
    mapper.writeValueAsBytes(node)
  }

  /**
   * `generation` and `owner` are optional (states written before writer fencing have no
   * generation: 0; before owners, no owner). Readers ignore fields they do not know, so the
   * version stays 1.
   */
  def decodeState(key: String, bytes: Array[Byte]): WriterState = {
    val node =
      try mapper.readTree(bytes)
      catch {
        case e: Exception => throw OsqueueExceptions.corruptSinkState(key, e.getMessage)
      }
    def long(field: String, default: Option[Long]): Long = node.path(field) match {
      case n if n.isIntegralNumber && n.canConvertToLong => n.asLong
      case n if n.isMissingNode && default.isDefined => default.get
      case _ => throw OsqueueExceptions.corruptSinkState(key, new String(bytes, UTF_8))
    }
    if (node == null || node.path("version").asInt(-1) != 1)
      throw OsqueueExceptions.corruptSinkState(key, new String(bytes, UTF_8))
    val owner = node.path("owner") match {
      case n if n.isMissingNode || n.isNull => None
      case n if n.isTextual => Some(n.asText)
      case _ => throw OsqueueExceptions.corruptSinkState(key, new String(bytes, UTF_8))
    }
    val stageUploads = node.path("stageUploads") match {
      case n if n.isMissingNode => false
      case n if n.isBoolean => n.asBoolean
      case _ => throw OsqueueExceptions.corruptSinkState(key, new String(bytes, UTF_8))
    }
    WriterState(node.path("writerId").asText(""), long("lastCommittedBatch", None), long("generation", Some(0L)), owner,
      stageUploads)
  }

  /** `<manifestPath>.writers/<base64url(writerId)>`: any writer id maps to one safe key. */
  def stateKey(manifestPath: String, writerId: String): String =
    s"$manifestPath.writers/" + Base64.getUrlEncoder.withoutPadding.encodeToString(writerId.getBytes(UTF_8))

  /** `<manifestPath>.staging/<base64url(writerId)>`: not directly under the data prefix, so GC never deletes there. */
  def stagingPrefix(manifestPath: String, writerId: String): String =
    s"$manifestPath.staging/" + Base64.getUrlEncoder.withoutPadding.encodeToString(writerId.getBytes(UTF_8))
}
