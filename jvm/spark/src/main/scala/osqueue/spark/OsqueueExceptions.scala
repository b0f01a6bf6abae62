package osqueue.spark

import org.apache.spark.SparkException

/**
 * The connector's one error factory, in Spark's error-class style (Kafka's `KafkaExceptions`):
 * each method returns (does not throw) an exception carrying a named condition (`OSQUEUE_...`)
 * and its message parameters; the texts are templates in `error/osqueue-error-conditions.json`,
 * whose conditions tests/golden/vocabulary.json lists. Bad input is an
 * [[OsqueueIllegalArgumentException]], a runtime condition an [[OsqueueIllegalStateException]];
 * a bug in the connector is Spark's `INTERNAL_ERROR`. The core's own failures met here (fenced,
 * writer fenced, batch not found) keep their core types. Every throw in jvm/spark/src/main goes
 * through this object (OsqueueExceptionsSuite scans for others).
 */
private[spark] object OsqueueExceptions {
  import OsqueueOptions.{
    EndingSequence,
    MaxBatchesPerTrigger,
    MaxPollInterval,
    MaxTriggerDelay,
    MinBatchesPerTrigger,
    PollInterval,
    StartingSequence,
    WriterBatchId,
    WriterId
  }

  // ---- options (at load()/start()/save(), before anything is read or written)

  def missingPath(): OsqueueIllegalArgumentException = argument("OSQUEUE_MISSING_PATH")

  def unknownOption(option: String, mode: String, known: Seq[String]): OsqueueIllegalArgumentException =
    argument("OSQUEUE_UNKNOWN_OPTION", "option" -> option, "mode" -> mode, "known" -> known.mkString(", "))

  def invalidOptionValue(option: String, value: String, expected: String): OsqueueIllegalArgumentException =
    argument("OSQUEUE_INVALID_OPTION_VALUE", "option" -> option, "value" -> value, "expected" -> expected)

  def minAboveMax(min: Int, max: Int): OsqueueIllegalArgumentException =
    outOfOrder(MinBatchesPerTrigger, min.toString, "exceed", MaxBatchesPerTrigger, max.toString, "")

  def maxPollBelowPoll(maxPoll: String, poll: String): OsqueueIllegalArgumentException =
    outOfOrder(MaxPollInterval, maxPoll, "be below", PollInterval, poll, "")

  def endBelowStart(end: Long, start: Long): OsqueueIllegalArgumentException =
    outOfOrder(EndingSequence, end.toString, "be below", StartingSequence, start.toString, "; the window is [start, end)")

  private def outOfOrder(option: String, value: String, relation: String, other: String, otherValue: String,
      detail: String): OsqueueIllegalArgumentException =
    argument("OSQUEUE_OPTIONS_OUT_OF_ORDER", "option" -> option, "value" -> value, "relation" -> relation,
      "other" -> other, "otherValue" -> otherValue, "detail" -> detail)

  def maxTriggerDelayWithoutMin(): OsqueueIllegalArgumentException =
    argument("OSQUEUE_OPTION_NEEDS_OPTION", "option" -> MaxTriggerDelay, "needed" -> MinBatchesPerTrigger,
      "why" -> "it bounds how long a trigger waits for that many batches")

  def writerBatchIdWithoutWriterId(): OsqueueIllegalArgumentException =
    argument("OSQUEUE_OPTION_NEEDS_OPTION", "option" -> WriterBatchId, "needed" -> WriterId,
      "why" -> "the batch id is counted per writer id")

  def writerIdNeedsBatchId(writerId: String): OsqueueIllegalArgumentException =
    argument("OSQUEUE_BATCH_WRITE_NEEDS_WRITER_BATCH_ID", "writerId" -> writerId)

  def batchIdOnStream(): OsqueueIllegalArgumentException = argument("OSQUEUE_WRITER_BATCH_ID_ON_STREAM")

  def optionNotInRealTime(option: String): OsqueueIllegalArgumentException =
    argument("OSQUEUE_OPTION_NOT_IN_REAL_TIME", "option" -> option)

  // ---- schema and rows

  def userSchema(): OsqueueIllegalArgumentException = argument("OSQUEUE_FIXED_SCHEMA")

  def sinkMissingValueColumn(columns: Seq[String]): OsqueueIllegalArgumentException =
    argument("OSQUEUE_SINK_MISSING_VALUE_COLUMN", "columns" -> columns.mkString("[", ", ", "]"))

  def sinkUnknownColumns(columns: Seq[String]): OsqueueIllegalArgumentException =
    argument("OSQUEUE_SINK_UNKNOWN_COLUMNS", "columns" -> columns.map(n => s"'$n'").mkString(", "))

  def sinkColumnType(column: String, expected: String, actual: String, hint: String = ""): OsqueueIllegalArgumentException =
    argument("OSQUEUE_SINK_COLUMN_TYPE", "column" -> column, "expected" -> expected, "actual" -> actual,
      "hint" -> (if (hint.isEmpty) "" else s" ($hint)"))

  def sinkNullValue(): OsqueueIllegalArgumentException = argument("OSQUEUE_SINK_NULL_VALUE")

  // ---- the queue and the checkpoint

  def queueNotFound(queue: String): OsqueueIllegalArgumentException = argument("OSQUEUE_QUEUE_NOT_FOUND", "queue" -> queue)

  /** A checkpoint written by another reader of the queue: another subscription, or the unnamed reader (docs/adr/0005). */
  def foreignSubscription(checkpointReader: Option[String], reader: Option[String], queue: String): OsqueueIllegalStateException = {
    def name(r: Option[String]) = r.fold("the unnamed reader")(s => s"subscription '$s'")
    state("OSQUEUE_FOREIGN_SUBSCRIPTION", "checkpointReader" -> name(checkpointReader), "reader" -> name(reader),
      "queue" -> queue)
  }

  /** The `subscription` option names none of the queue's subscriptions (and `createSubscription` is not set). */
  def noSubscription(subscription: String, queue: String): OsqueueIllegalArgumentException =
    argument("OSQUEUE_NO_SUBSCRIPTION", "subscription" -> subscription, "queue" -> queue)

  def queueIdUnavailable(queue: String): OsqueueIllegalStateException = state("OSQUEUE_QUEUE_ID_UNAVAILABLE", "queue" -> queue)

  /** Entries gone before they were read; the message tells how to continue anyway (`failOnDataLoss`). */
  def dataLoss(reason: String): OsqueueIllegalStateException = state("OSQUEUE_DATA_LOSS", "reason" -> reason)

  /** Queues are told apart by id (`<manifest>.queue-id`); the URIs only make the message readable. */
  def foreignCheckpoint(checkpointQueue: String, checkpointId: String, queue: String, queueId: String): OsqueueIllegalStateException = {
    val why =
      if (checkpointQueue == queue) s"The queue at '$queue' was recreated since the checkpoint was written (its id changed)"
      else "The queue was recreated or the checkpoint belongs to another query"
    state("OSQUEUE_FOREIGN_CHECKPOINT", "checkpointQueue" -> checkpointQueue, "checkpointQueueId" -> checkpointId,
      "queue" -> queue, "queueId" -> queueId, "why" -> why)
  }

  def badOffset(json: String, why: String): OsqueueIllegalStateException =
    state("OSQUEUE_BAD_OFFSET", "offset" -> json, "reason" -> why)

  // ---- the sink's writer state

  /** The owner a `df.write` with a `writerId` records in the writer state. */
  val BatchWriteOwner = "df.write"

  /** A writer state another query (or df.write) owns, with batch ids this query would replay. */
  def writerOwnedByAnother(writerId: String, owner: String, lastCommittedBatch: Long, queryId: String): OsqueueIllegalStateException = {
    val who = if (owner == BatchWriteOwner) "batch writes (df.write)" else s"streaming query $owner"
    state("OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY", "writerId" -> writerId, "owner" -> who,
      "consequence" -> (s", which committed up to batch $lastCommittedBatch; this query ($queryId, another checkpoint) " +
        s"would have its batches up to $lastCommittedBatch skipped as replays, losing their rows. Give this query a new " +
        s"'$WriterId', or restart the original query from its own checkpoint."))
  }

  def streamWriterUsedByBatch(writerId: String, owner: String): OsqueueIllegalStateException =
    state("OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY", "writerId" -> writerId, "owner" -> s"streaming query $owner",
      "consequence" -> s"; a batch write (df.write) must not share its batch ids. Use another '$WriterId' for batch writes.")

  /**
   * Files of an epoch that GC deleted before the commit could enqueue them: they waited longer than
   * the grace period. `staging`: the writer state now makes the replay stage its files.
   */
  def filesExpired(writerId: String, batchId: Long, missing: Seq[String], gracePeriodMs: Long, staging: Boolean)
      : OsqueueIllegalStateException = {
    val next =
      if (staging) "Restart the query: the replayed batch's tasks write where GC never deletes and its commit copies " +
        "them into the queue, so it commits however slow it is."
      else "Run the write again (nothing of it was enqueued), faster or with a longer grace period."
    state("OSQUEUE_SINK_FILES_EXPIRED", "writerId" -> writerId, "batchId" -> batchId.toString,
      "count" -> missing.size.toString, "gracePeriodMs" -> gracePeriodMs.toString,
      "files" -> (missing.take(5).mkString(", ") + (if (missing.size > 5) ", ..." else "")), "next" -> next)
  }

  def corruptSinkState(key: String, detail: String): OsqueueIllegalStateException =
    state("OSQUEUE_CORRUPT_SINK_STATE", "key" -> key, "detail" -> detail)

  /** A manifest entry the sink must copy whose file is gone (the core's condition). */
  def batchNotFound(key: String): osqueue.BatchNotFoundException = new osqueue.BatchNotFoundException(key, -1)

  def writerFenced(writerId: String, own: Long, current: Long): osqueue.WriterFencedException =
    new osqueue.WriterFencedException(writerId, own, current)

  def fenced(ownEpoch: Long, currentEpoch: Long): osqueue.FencedException = new osqueue.FencedException(ownEpoch, currentEpoch)

  /** The sink's fault injection (`-Dosqueue.test.failAt=<point>`), for the crash tests. */
  def injectedFault(point: String): OsqueueIllegalStateException = state("OSQUEUE_INJECTED_FAULT", "point" -> point)

  // ---- the Spark line (plain Java only: SparkVersionCheck runs these under another Scala too)

  def incompatibleSpark(spark: String, scala: String, instead: String): OsqueueUnsupportedOperationException = {
    val p = new java.util.LinkedHashMap[String, String]()
    p.put("artifact", BuiltFor.Artifact)
    p.put("version", BuiltFor.Version)
    p.put("builtForSpark", BuiltFor.SparkLine)
    p.put("builtForScala", BuiltFor.ScalaBinary)
    p.put("spark", spark)
    p.put("scala", scala)
    p.put("instead", instead)
    new OsqueueUnsupportedOperationException("OSQUEUE_INCOMPATIBLE_SPARK", p)
  }

  /** A warning, not an error: the newest line's jar in a newer Spark runs. */
  def untestedSparkWarning(spark: String): String = {
    val p = new java.util.LinkedHashMap[String, String]()
    p.put("spark", spark)
    p.put("version", BuiltFor.Version)
    p.put("builtForSpark", BuiltFor.SparkLine)
    p.put("artifact", BuiltFor.Artifact)
    OsqueueErrorConditions.message("OSQUEUE_UNTESTED_SPARK", p)
  }

  // ---- bugs: Spark's INTERNAL_ERROR ("You hit a bug in Spark or the Spark plugins you use")

  def internalError(message: String): SparkException = SparkException.internalError(s"osqueue: $message")

  private def argument(condition: String, parameters: (String, String)*): OsqueueIllegalArgumentException =
    new OsqueueIllegalArgumentException(condition, javaMap(parameters))

  private def state(condition: String, parameters: (String, String)*): OsqueueIllegalStateException =
    new OsqueueIllegalStateException(condition, javaMap(parameters))

  private def javaMap(parameters: Seq[(String, String)]): java.util.Map[String, String] = {
    val m = new java.util.LinkedHashMap[String, String]()
    parameters.foreach { case (k, v) => m.put(k, v) }
    m
  }
}

/**
 * The message templates of `error/osqueue-error-conditions.json` (Spark's error-conditions format:
 * `<name>` slots, message lines joined by newlines), filled in as Spark shows an error class:
 * `[CONDITION] text`. Plain Java only, see [[SparkVersionCheck]].
 */
private[spark] object OsqueueErrorConditions {
  val Resource = "/error/osqueue-error-conditions.json"

  private lazy val templates: com.fasterxml.jackson.databind.JsonNode = {
    val in = classOf[OsqueueIllegalStateException].getResourceAsStream(Resource)
    if (in == null) throw new IllegalStateException("osqueue: " + Resource + " is missing from the connector jar")
    try new com.fasterxml.jackson.databind.ObjectMapper().readTree(in)
    finally in.close()
  }

  /** The conditions the resource defines. */
  def conditions: java.util.Iterator[String] = templates.fieldNames()

  /** `[condition] text`; a condition or parameter the template does not know is a bug, raised as one. */
  def message(condition: String, parameters: java.util.Map[String, String]): String = {
    val node = templates.get(condition)
    if (node == null) throw new IllegalStateException("osqueue: unknown error condition " + condition)
    val lines = node.get("message")
    val template = new java.lang.StringBuilder()
    var i = 0
    while (i < lines.size) {
      if (i > 0) template.append('\n')
      template.append(lines.get(i).asText)
      i += 1
    }
    "[" + condition + "] " + fill(condition, template.toString, parameters)
  }

  /** One pass over the template, so that a value holding `<x>` is never substituted again. */
  private def fill(condition: String, template: String, parameters: java.util.Map[String, String]): String = {
    val out = new java.lang.StringBuilder()
    val used = new java.util.HashSet[String]()
    var i = 0
    while (i < template.length) {
      val end = if (template.charAt(i) == '<') template.indexOf('>', i) else -1
      val name = if (end > i) template.substring(i + 1, end) else ""
      if (!name.isEmpty && name.chars.allMatch(c => Character.isLetterOrDigit(c) || c == '_')) {
        val value = parameters.get(name)
        if (value == null) throw new IllegalStateException("osqueue: error " + condition + " lacks parameter " + name)
        out.append(value)
        used.add(name)
        i = end + 1
      } else {
        out.append(template.charAt(i))
        i += 1
      }
    }
    if (used.size != parameters.size)
      throw new IllegalStateException("osqueue: error " + condition + " has parameters " + parameters.keySet +
        " but its template uses " + used)
    out.toString
  }
}

/** A bad option, schema or row: the condition names what to fix. PySpark raises it as IllegalArgumentException. */
final class OsqueueIllegalArgumentException private[spark] (val condition: String, parameters: java.util.Map[String, String])
    extends IllegalArgumentException(OsqueueErrorConditions.message(condition, parameters)) with SparkCondition {
  override def messageParameters: java.util.Map[String, String] = java.util.Collections.unmodifiableMap(parameters)
}

/** A runtime condition of the source or sink (data loss, a foreign checkpoint, a writer owned by another query...). */
final class OsqueueIllegalStateException private[spark] (val condition: String, parameters: java.util.Map[String, String])
    extends IllegalStateException(OsqueueErrorConditions.message(condition, parameters)) with SparkCondition {
  override def messageParameters: java.util.Map[String, String] = java.util.Collections.unmodifiableMap(parameters)
}

/** The connector jar was loaded into a Spark or Scala version it was not built for. */
final class OsqueueUnsupportedOperationException private[spark] (val condition: String,
    parameters: java.util.Map[String, String])
    extends UnsupportedOperationException(OsqueueErrorConditions.message(condition, parameters)) with SparkCondition {
  override def messageParameters: java.util.Map[String, String] = java.util.Collections.unmodifiableMap(parameters)
}
