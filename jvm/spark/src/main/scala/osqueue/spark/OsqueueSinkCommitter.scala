package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.Base64

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.internal.Logging

import osqueue.SystemClock
import osqueue.format.{BatchNames, EntryTag}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{ManifestAppender, ManifestStore, PendingLocation, RetryPolicy}
import osqueue.store.{CasOutcome, ObjectStore}

/**
 * The driver's commit of one sink write (docs/adr/0002): skip a batch id this writer already
 * committed; otherwise append every task's files in ONE manifest write, tagged
 * (writerId, batchId, attemptId), then record the batch id in the writer's state object.
 * A crash between those two writes makes a replay append a second copy with a new attemptId,
 * which osqueue readers drop.
 */
private[spark] final class OsqueueSinkCommitter(options: SinkOptions, writerId: String) extends Logging {
  private val store: ObjectStore = OsqueueStores.open(options.location)
  private val stateKey = OsqueueSinkCommitter.stateKey(options.location.manifestPath, writerId)
  val metrics = new MetricsRegistry

  /** Returns false when `batchId` was already committed (a replay) and nothing was appended. */
  def commit(batchId: Long, messages: Seq[OsqueueCommitMessage]): Boolean = {
    val (committed, _) = readState()
    val batches = messages.sortBy(_.partitionId).flatMap(_.batches)
    if (committed.exists(_ >= batchId)) {
      logInfo(s"osqueue sink '$writerId': batch $batchId was already committed; deleting this attempt's files")
      batches.foreach(b => store.delete(b.location))
      return false
    }
    if (batches.nonEmpty) {
      val tag = EntryTag(writerId, batchId, BatchNames.newKey("", System.currentTimeMillis()).stripSuffix(".batch")).encode
      val pending = batches.map(b => new PendingLocation(b.location, b.metadata, reupload(b.location), tag)).toIndexedSeq
      new ManifestAppender(new ManifestStore(store, options.location.manifestPath), RetryPolicy(), SystemClock, metrics,
        options.gcGracePeriod.toMillis, role = "sink").append(pending)
    }
    OsqueueSinkFaults.maybeCrash("between-append-and-state")
    recordCommitted(batchId)
    true
  }

  def conflicts: Long = metrics.counterValue(MetricNames.ManifestConflicts, "role" -> "sink")

  /** A file that waited past half the GC grace period is copied under a fresh name before enqueueing. */
  private def reupload(location: String): () => String = () => {
    val bytes = store.get(location).getOrElse(throw new osqueue.BatchNotFoundException(location, -1)).bytes
    val key = BatchNames.newKey(options.location.dataPathPrefix, System.currentTimeMillis())
    store.put(key, bytes)
    key
  }

  private def readState(): (Option[Long], Option[osqueue.store.ObjectVersion]) =
    store.get(stateKey) match {
      case None => (None, None)
      case Some(o) =>
        val node = try OsqueueSinkCommitter.mapper.readTree(o.bytes) catch {
          case e: Exception => throw new IllegalStateException(s"corrupt osqueue sink state '$stateKey': ${e.getMessage}")
        }
        if (node.path("version").asInt(-1) != 1 || !node.path("lastCommittedBatch").canConvertToLong)
          throw new IllegalStateException(s"corrupt or newer osqueue sink state '$stateKey': ${new String(o.bytes, UTF_8)}")
        (Some(node.get("lastCommittedBatch").asLong), Some(o.version))
    }

  /** Monotonic: a zombie that lost the race to a higher batch id leaves the state alone. */
  private def recordCommitted(batchId: Long): Unit = {
    var done = false
    var attempts = 0
    while (!done) {
      val (committed, version) = readState()
      if (committed.exists(_ >= batchId)) done = true
      else {
        val node = OsqueueSinkCommitter.mapper.createObjectNode()
        node.put("version", 1).put("writerId", writerId).put("lastCommittedBatch", batchId)
        val bytes = OsqueueSinkCommitter.mapper.writeValueAsBytes(node)
        val outcome = version match {
          case Some(v) => store.putIfVersionMatches(stateKey, bytes, v)
          case None => store.putIfAbsent(stateKey, bytes)
        }
        done = outcome.isInstanceOf[CasOutcome.Written]
        attempts += 1
        if (!done && attempts > 100) throw new IllegalStateException(s"could not record sink state '$stateKey'")
      }
    }
  }
}

private[spark] object OsqueueSinkCommitter {
  private val mapper = new ObjectMapper()

  /** `<manifestPath>.writers/<base64url(writerId)>`: any writer id maps to one safe key. */
  def stateKey(manifestPath: String, writerId: String): String =
    s"$manifestPath.writers/" + Base64.getUrlEncoder.withoutPadding.encodeToString(writerId.getBytes(UTF_8))
}
