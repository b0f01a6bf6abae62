package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.UUID
import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

import osqueue.{Clock, SystemClock}
import osqueue.queue.{CasCounters, CasLoop, CasObject, CasStep, RetryPolicy, Snapshot}
import osqueue.store.{ObjectStore, ObjectStores}

/** Opens stores once per JVM (driver or executor) and per location, since S3 clients are costly. */
private[spark] object OsqueueStores extends Logging {
  private val cache = new ConcurrentHashMap[(String, Map[String, String]), ObjectStore]()

  def open(location: QueueLocation): ObjectStore =
    cache.computeIfAbsent((location.uri, location.storeOptions), _ => ObjectStores.open(location.uri, location.storeOptions))

  /** The session's store settings (`spark.hadoop.fs.s3a.*`, `fs.azure.*`... and the Hadoop configuration's). */
  def sessionStoreOptions(): Map[String, String] = SparkSession.getActiveSession.map { spark =>
    val hadoop = spark.sparkContext.hadoopConfiguration.iterator().asScala
      .map(e => e.getKey -> e.getValue).filter(e => OsqueueOptions.isStoreOption(e._1)).toMap
    val runtime = spark.conf.getAll.collect {
      case (k, v) if k.startsWith("spark.hadoop.") && OsqueueOptions.isStoreOption(k) => k.stripPrefix("spark.hadoop.") -> v
    }
    hadoop ++ runtime
  }.getOrElse(Map.empty)

  /**
   * The queue's id: a UUID in `<manifestPath>.queue-id`, created once (put-if-absent) by the first
   * stream that reads the queue. A queue recreated from scratch gets a new id, so an old checkpoint
   * is refused instead of being applied to the wrong entries.
   */
  def queueId(store: ObjectStore, location: QueueLocation, create: Boolean, clock: Clock = SystemClock): Option[String] = {
    val idObject = new CasObject(store, location.manifestPath + ".queue-id")
    def text(s: Snapshot) = new String(s.raw, UTF_8).trim
    if (!create) return Some(idObject.read()).filter(_.version.isDefined).map(text)
    // The core's CasLoop: a create that lost the race or whose reply was lost (unknown outcome) is
    // settled by the re-read; whichever id landed wins. Not counted as a manifest write.
    val loop = new CasLoop(idObject, RetryPolicy(maxAttempts = QueueIdAttempts), clock, CasCounters.uncounted)
    Some(loop.run[String] { (snapshot, _) =>
      if (snapshot.version.isDefined) CasStep.Done(text(snapshot))
      else {
        val id = UUID.randomUUID().toString
        CasStep.Write(id.getBytes(UTF_8), () => id)
      }
    })
  }

  private val QueueIdAttempts = 8
}
