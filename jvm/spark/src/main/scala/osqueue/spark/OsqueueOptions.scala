package osqueue.spark

import java.util.Locale

import scala.concurrent.duration._

import osqueue.format.{Compression, ManifestHead}
import osqueue.store.{ObjectKeys, ObjectStoreProvider}

/** Where a queue lives and how to reach its store; serializable so executors can open the store. */
private[spark] final case class QueueLocation(
    uri: String,
    manifestPath: String,
    dataPathPrefix: String,
    storeOptions: Map[String, String]) {
  /** Names the queue in offsets and messages: the store URI and the manifest key. */
  def identity: String = s"${uri.stripSuffix("/")}/$manifestPath"
}

/**
 * Every option of `format("osqueue")`, parsed and validated in one place. Keys are
 * case-insensitive; messages name the option, echo the value and say what is expected.
 */
private[spark] object OsqueueOptions {
  /** Store settings, as Hadoop names them: S3A's, hadoop-azure's and the GCS connector's. */
  val StoreOptionPrefixes: Seq[String] = Seq("fs.s3a.", "fs.azure.", "fs.gs.")
  def isStoreOption(key: String): Boolean = StoreOptionPrefixes.exists(p => key.startsWith(p) || key.startsWith("spark.hadoop." + p))

  val Path = "path"
  val ManifestPath = "manifestpath"
  val DataPathPrefix = "datapathprefix"
  val MaxBatchesPerTrigger = "maxbatchespertrigger"
  val MinBatchesPerTrigger = "minbatchespertrigger"
  val MaxTriggerDelay = "maxtriggerdelay"
  val FailOnDataLoss = "failondataloss"
  val Gc = "gc"
  val GcInterval = "gcinterval"
  val GcGracePeriod = "gcgraceperiod"
  val StartingSequence = "startingsequence"
  val EndingSequence = "endingsequence"
  val CompressionKey = "compression"
  val FlushSizeBytes = "flushsizebytes"
  val WriterId = "writerid"
  val WriterBatchId = "writerbatchid"
  val PollInterval = "pollinterval"
  val MaxPollInterval = "maxpollinterval"
  val ManifestSegmentEntries = "manifestsegmententries"
  val Subscription = "subscription"
  val CreateSubscription = "createsubscription"

  private val sourceKeys = Set(Path, ManifestPath, DataPathPrefix, MaxBatchesPerTrigger, MinBatchesPerTrigger,
    MaxTriggerDelay, FailOnDataLoss, Gc, GcInterval, GcGracePeriod, PollInterval, MaxPollInterval, Subscription,
    CreateSubscription)
  private val batchReadKeys =
    Set(Path, ManifestPath, DataPathPrefix, StartingSequence, EndingSequence, FailOnDataLoss, Subscription)
  private val sinkKeys = Set(Path, ManifestPath, DataPathPrefix, CompressionKey, FlushSizeBytes, WriterId, WriterBatchId,
    GcGracePeriod, ManifestSegmentEntries)
  /** Keys Spark itself may pass along with user options. */
  private val sparkKeys = Set("paths", "checkpointlocation", "queryname")

  /** Lower-cased keys; Spark's CaseInsensitiveStringMap already lower-cases, plain maps may not. */
  def normalize(options: collection.Map[String, String]): Map[String, String] =
    options.iterator.map { case (k, v) => k.toLowerCase(Locale.ROOT) -> v }.toMap

  def location(options: Map[String, String], sessionStoreOptions: Map[String, String]): QueueLocation = {
    val uri = options.get(Path).map(_.trim).filter(_.nonEmpty).getOrElse(throw OsqueueExceptions.missingPath())
    val manifest = key(options, ManifestPath, "ingest/manifest")
    val prefix = options.getOrElse(DataPathPrefix, "ingest").trim.stripSuffix("/")
    if (prefix.nonEmpty) validKey(DataPathPrefix, prefix)
    // Store settings: the session's fs.s3a.* (fs.azure.*...) first, then options given on this read/write.
    val fromOptions = options.collect {
      case (k, v) if isStoreOption(k) => k.stripPrefix("spark.hadoop.") -> v
    }
    QueueLocation(uri, manifest, prefix, sessionStoreOptions ++ fromOptions)
  }

  /**
   * Checks what every mode shares, at `load()`/`save()` time (Spark does not say yet whether it
   * will stream or batch): the path, known keys, and the form of every value given.
   */
  def validateGeneral(options: Map[String, String]): Unit = {
    checkKnown(options, "any")
    location(options, Map.empty)
    Seq(MaxBatchesPerTrigger, MinBatchesPerTrigger).foreach(positiveInt(options, _))
    positiveLong(options, FlushSizeBytes)
    Seq(StartingSequence, EndingSequence, WriterBatchId).foreach(nonNegativeLong(options, _))
    Seq(MaxTriggerDelay, GcInterval, GcGracePeriod, PollInterval, MaxPollInterval).foreach(duration(options, _, 1.second))
    Seq(FailOnDataLoss, Gc).foreach(boolean(options, _, default = true))
    compression(options)
    ObjectStoresCheck.uri(options(Path))
  }

  def checkKnown(options: Map[String, String], mode: String): Unit = {
    val known =
      (mode match {
        case "source" => sourceKeys
        case "batch read" => batchReadKeys
        case "sink" => sinkKeys
        case _ => sourceKeys ++ batchReadKeys ++ sinkKeys
      }) ++ sparkKeys
    options.keys.filterNot(k => known(k) || isStoreOption(k)).toSeq.sorted
      .headOption.foreach { k =>
        throw OsqueueExceptions.unknownOption(k, mode, known.diff(sparkKeys).toSeq.sorted)
      }
  }

  def positiveInt(options: Map[String, String], key: String): Option[Int] = options.get(key).map { v =>
    v.trim.toIntOption.filter(_ > 0).getOrElse(throw OsqueueExceptions.invalidOptionValue(key, v, "expected a positive integer"))
  }

  def positiveLong(options: Map[String, String], key: String): Option[Long] = options.get(key).map { v =>
    v.trim.toLongOption.filter(_ > 0).getOrElse(throw OsqueueExceptions.invalidOptionValue(key, v, "expected a positive integer"))
  }

  def nonNegativeLong(options: Map[String, String], key: String): Option[Long] = options.get(key).map { v =>
    v.trim.toLongOption.filter(_ >= 0).getOrElse(throw OsqueueExceptions.invalidOptionValue(key, v, "expected an integer >= 0"))
  }

  def boolean(options: Map[String, String], key: String, default: Boolean): Boolean =
    options.get(key).map(_.trim.toLowerCase(Locale.ROOT)) match {
      case None => default
      case Some("true") => true
      case Some("false") => false
      case Some(v) => throw OsqueueExceptions.invalidOptionValue(key, options(key), "expected true or false")
    }

  /** Durations like `500ms`, `30s`, `5m`, `1h` (a bare number is milliseconds): the one grammar, [[osqueue.Durations]]. */
  def duration(options: Map[String, String], key: String, default: FiniteDuration): FiniteDuration =
    options.get(key).map { v =>
      val d = osqueue.Durations.parseOrHint(v).fold(
        hint => throw OsqueueExceptions.invalidOptionValue(key, v, hint), identity)
      if (d <= Duration.Zero) throw OsqueueExceptions.invalidOptionValue(key, v, "must be > 0")
      d
    }.getOrElse(default)

  def compression(options: Map[String, String]): Compression =
    options.get(CompressionKey).map(v =>
      try Compression.parse(CompressionKey, v)
      catch {
        case e: osqueue.InvalidConfigException => throw OsqueueExceptions.invalidOptionValue(CompressionKey, v, e.hint)
      }).getOrElse(Compression.None)

  private def key(options: Map[String, String], name: String, default: String): String =
    validKey(name, options.getOrElse(name, default).trim)

  /** A named subscription (docs/adr/0005): 1 to 128 characters of [A-Za-z0-9._-]. */
  def subscription(options: Map[String, String]): Option[String] = options.get(Subscription).map(_.trim).map { name =>
    if (!osqueue.format.HeadSections.validName(name))
      throw OsqueueExceptions.invalidOptionValue(Subscription, name, "expected 1 to 128 characters of [A-Za-z0-9._-]")
    name
  }

  private def validKey(name: String, value: String): String =
    try ObjectKeys.validate(value)
    catch {
      case e: osqueue.InvalidObjectKeyException =>
        throw OsqueueExceptions.invalidOptionValue(name, value, e.getMessage)
    }
}

/** Rejects a path no store understands, without opening anything. */
private[spark] object ObjectStoresCheck {
  def uri(path: String): Unit = {
    val scheme = """^([a-zA-Z][a-zA-Z0-9+.-]*):""".r.findFirstMatchIn(path).map(_.group(1).toLowerCase(Locale.ROOT))
    // A plugged store's scheme (abfss, gs...) too: without its artifact, opening it names the artifact.
    if (!scheme.forall(Set("file", "s3", "s3a", "memory") ++ ObjectStoreProvider.ArtifactForScheme.keySet))
      throw OsqueueExceptions.invalidOptionValue("path", path,
        "expected an absolute local path, file:/..., " +
          "s3://bucket/prefix, s3a://bucket/prefix, gs://bucket/prefix or abfss://container@account.dfs.core.windows.net/prefix")
  }
}

/**
 * Source options after validation. `pollInterval`/`maxPollInterval`: how often the source looks at
 * the manifest while the queue is idle (the real-time reader; in micro-batch mode, `latestOffset`);
 * each look that finds no change doubles the wait, up to `maxPollInterval` (the idle cost), and a
 * change resets it.
 */
private[spark] final case class SourceOptions(
    location: QueueLocation,
    maxBatchesPerTrigger: Option[Int],
    minBatchesPerTrigger: Option[Int],
    maxTriggerDelay: FiniteDuration,
    failOnDataLoss: Boolean,
    gcEnabled: Boolean,
    gcInterval: FiniteDuration,
    gcGracePeriod: FiniteDuration,
    pollInterval: FiniteDuration = SourceOptions.DefaultPollInterval,
    maxPollInterval: FiniteDuration = SourceOptions.DefaultMaxPollInterval,
    /** Read as this named subscription (its own position and fence); None: the queue's unnamed reader. */
    subscription: Option[String] = None,
    /** Create the subscription at the queue's first entry when the query's first read finds none. */
    createSubscription: Boolean = false)

private[spark] object SourceOptions {
  import OsqueueOptions._

  val DefaultPollInterval: FiniteDuration = 50.millis
  val DefaultMaxPollInterval: FiniteDuration = 1.second

  def apply(options: Map[String, String], session: Map[String, String]): SourceOptions = {
    checkKnown(options, "source")
    val max = positiveInt(options, MaxBatchesPerTrigger)
    val min = positiveInt(options, MinBatchesPerTrigger)
    (min, max) match {
      case (Some(lo), Some(hi)) if lo > hi => throw OsqueueExceptions.minAboveMax(lo, hi)
      case _ =>
    }
    if (options.contains(MaxTriggerDelay) && min.isEmpty)
      throw OsqueueExceptions.maxTriggerDelayWithoutMin()
    val poll = duration(options, PollInterval, DefaultPollInterval)
    val maxPoll =
      duration(options, MaxPollInterval, if (options.contains(PollInterval)) poll.max(DefaultMaxPollInterval) else DefaultMaxPollInterval)
    if (maxPoll < poll)
      throw OsqueueExceptions.maxPollBelowPoll(options(MaxPollInterval), options.getOrElse(PollInterval, poll.toString))
    SourceOptions(
      location(options, session), max, min,
      duration(options, MaxTriggerDelay, 15.minutes),
      boolean(options, FailOnDataLoss, default = true),
      boolean(options, Gc, default = true),
      duration(options, GcInterval, 5.minutes),
      duration(options, GcGracePeriod, 10.minutes),
      poll, maxPoll, subscription(options), boolean(options, CreateSubscription, default = false))
  }
}

/** Batch-read options after validation: an optional [startingSequence, endingSequence) window. */
private[spark] final case class BatchReadOptions(location: QueueLocation, startingSequence: Option[Long],
    endingSequence: Option[Long], failOnDataLoss: Boolean,
    /** Start at this subscription's position (read only: nothing acked, nobody fenced). */
    subscription: Option[String] = None)

private[spark] object BatchReadOptions {
  import OsqueueOptions._

  def apply(options: Map[String, String], session: Map[String, String]): BatchReadOptions = {
    checkKnown(options, "batch read")
    val start = nonNegativeLong(options, StartingSequence)
    val end = nonNegativeLong(options, EndingSequence)
    for (s <- start; e <- end if e < s) throw OsqueueExceptions.endBelowStart(e, s)
    BatchReadOptions(location(options, session), start, end, boolean(options, FailOnDataLoss, default = true),
      subscription(options))
  }
}

/**
 * Sink options after validation. `writerBatchId` is the batch id a `df.write` with a `writerId`
 * commits as (Delta's txnVersion); streaming queries use Spark's micro-batch ids instead.
 * `manifestSegmentEntries` is the producer's K (docs/format.md §2.2): `Int.MaxValue` keeps the queue RFC v1.
 */
private[spark] final case class SinkOptions(
    location: QueueLocation,
    compression: Compression,
    flushSizeBytes: Long,
    writerId: Option[String],
    gcGracePeriod: FiniteDuration,
    writerBatchId: Option[Long] = None,
    manifestSegmentEntries: Int = ManifestHead.DefaultSegmentEntries)

private[spark] object SinkOptions {
  import OsqueueOptions._

  def apply(options: Map[String, String], session: Map[String, String]): SinkOptions = {
    checkKnown(options, "sink")
    val writerId = options.get(WriterId).map(_.trim)
    if (writerId.exists(_.isEmpty))
      throw OsqueueExceptions.invalidOptionValue(WriterId, "", "expected a non-empty id")
    val writerBatchId = nonNegativeLong(options, WriterBatchId)
    if (writerBatchId.isDefined && writerId.isEmpty) throw OsqueueExceptions.writerBatchIdWithoutWriterId()
    SinkOptions(location(options, session), compression(options),
      positiveLong(options, FlushSizeBytes).getOrElse(64L << 20), writerId,
      duration(options, GcGracePeriod, 10.minutes), writerBatchId,
      positiveInt(options, ManifestSegmentEntries).getOrElse(ManifestHead.DefaultSegmentEntries))
  }
}
