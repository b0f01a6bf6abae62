package osqueue.spark

import java.nio.file.{Files, Path}

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.{SparkException, SparkThrowable}
import org.scalatest.funsuite.AnyFunSuite

import osqueue.testing.RepoFiles

/**
 * The connector's one error factory: every condition it makes is in the shared vocabulary and has
 * a template, every exception names its condition as Spark's error classes do, and no
 * `throw new` in jvm/spark/src/main bypasses the factory.
 */
class OsqueueExceptionsSuite extends AnyFunSuite {
  /** One call per factory method. */
  private def everyCondition: Seq[Throwable with SparkThrowable] = Seq(
    OsqueueExceptions.missingPath(),
    OsqueueExceptions.unknownOption("nope", "source", Seq("path", "gc")),
    OsqueueExceptions.invalidOptionValue("gc", "sometimes", "expected true or false"),
    OsqueueExceptions.minAboveMax(5, 2),
    OsqueueExceptions.maxPollBelowPoll("1s", "2s"),
    OsqueueExceptions.endBelowStart(1, 3),
    OsqueueExceptions.maxTriggerDelayWithoutMin(),
    OsqueueExceptions.writerBatchIdWithoutWriterId(),
    OsqueueExceptions.writerIdNeedsBatchId("daily"),
    OsqueueExceptions.batchIdOnStream(),
    OsqueueExceptions.optionNotInRealTime("maxbatchespertrigger"),
    OsqueueExceptions.userSchema(),
    OsqueueExceptions.sinkMissingValueColumn(Seq("v")),
    OsqueueExceptions.sinkUnknownColumns(Seq("extra")),
    OsqueueExceptions.sinkColumnType("metadata", "binary", "string", "cast it"),
    OsqueueExceptions.sinkNullValue(),
    OsqueueExceptions.queueNotFound("/q/ingest/manifest"),
    OsqueueExceptions.queueIdUnavailable("/q/ingest/manifest"),
    OsqueueExceptions.dataLoss("entries 3 to 5 were removed"),
    OsqueueExceptions.foreignCheckpoint("/a", "id-a", "/b", "id-b"),
    OsqueueExceptions.foreignSubscription(Some("a"), None, "/q"),
    OsqueueExceptions.noSubscription("a", "/q"),
    OsqueueExceptions.badOffset("{}", "expected {version, queue, queueId, nextSequence}"),
    OsqueueExceptions.writerOwnedByAnother("enrich", "q-1", 4, "q-2"),
    OsqueueExceptions.streamWriterUsedByBatch("streamed", "q-1"),
    OsqueueExceptions.filesExpired("w", 7, Seq("ingest/a.batch"), 600000, staging = true),
    OsqueueExceptions.corruptSinkState("ingest/manifest.writers/x", "{"),
    OsqueueExceptions.injectedFault("before-append"),
    OsqueueExceptions.incompatibleSpark("3.5.7", "2.12.18", "Use the build for your Spark."))

  private def conditionOf(e: SparkThrowable): String = e.getCondition

  private val vocabulary: Set[String] =
    new ObjectMapper().readTree(RepoFiles.golden.resolve("vocabulary.json").toFile).get("spark_errors").get("conditions")
      .elements().asScala.map(_.asText).toSet

  test("should make exactly the conditions of the shared vocabulary, each with a template") {
    val templates = OsqueueErrorConditions.conditions.asScala.toSet
    assert(templates == vocabulary, "error/osqueue-error-conditions.json and tests/golden/vocabulary.json differ")
    // The untested-Spark warning is a message of the same kind, not an exception.
    val made = everyCondition.map(conditionOf).toSet + "OSQUEUE_UNTESTED_SPARK"
    assert(made == vocabulary, s"no factory call here for ${vocabulary -- made}; unknown: ${made -- vocabulary}")
    assert(OsqueueExceptions.untestedSparkWarning("9.9.0").startsWith("[OSQUEUE_UNTESTED_SPARK] Spark 9.9.0 is newer"))
  }

  test("should name the condition as a field, as Spark's error class and at the head of the message") {
    everyCondition.foreach { e =>
      val condition = conditionOf(e)
      assert(condition.matches("OSQUEUE_[A-Z_]+"), condition)
      assert(e.getErrorClass == condition && e.asInstanceOf[SparkCondition].condition == condition)
      assert(e.getMessage.startsWith(s"[$condition] "), e.getMessage)
      assert(!e.getMessage.matches("(?s).*<[A-Za-z_]+>.*"), s"an unfilled slot: ${e.getMessage}")
      e.getMessageParameters.asScala.foreach { case (k, v) => assert(v.isEmpty || e.getMessage.contains(v), s"$condition $k") }
      assert(!e.isInternalError)
    }
  }

  test("should keep the messages users and tests match on") {
    def message(e: Throwable) = e.getMessage
    assert(message(OsqueueExceptions.invalidOptionValue("gc", "sometimes", "expected true or false")) ==
      "[OSQUEUE_INVALID_OPTION_VALUE] invalid value for option 'gc': 'sometimes'; expected true or false")
    assert(message(OsqueueExceptions.minAboveMax(5, 2)).endsWith(
        "option 'minbatchespertrigger' (5) must not exceed 'maxbatchespertrigger' (2)"))
    assert(message(OsqueueExceptions.endBelowStart(1, 3)).endsWith(
        "option 'endingsequence' (1) must not be below 'startingsequence' (3); the window is [start, end)"))
    assert(message(OsqueueExceptions.dataLoss("gone")).contains("gone. If you want the query to continue anyway"))
    assert(message(OsqueueExceptions.writerOwnedByAnother("enrich", "df.write", 4, "q-2")).contains(
        "sink writer 'enrich' belongs to batch writes (df.write), which committed up to batch 4;"))
    assert(message(OsqueueExceptions.streamWriterUsedByBatch("s", "q-1")).contains(
        "sink writer 's' belongs to streaming query q-1; a batch write (df.write) must not share its batch ids"))
    assert(message(OsqueueExceptions.sinkColumnType("value", "binary or string", "bigint")) ==
      "[OSQUEUE_SINK_COLUMN_TYPE] the osqueue sink's 'value' column must be binary or string, not bigint")
    // A value that looks like a slot is text, not a slot.
    assert(message(OsqueueExceptions.invalidOptionValue("path", "<queue>", "x")).contains("'path': '<queue>'; x"))
  }

  test("should keep the exception types Spark and PySpark map: bad input IllegalArgument, runtime IllegalState") {
    assert(OsqueueExceptions.missingPath().isInstanceOf[IllegalArgumentException])
    assert(OsqueueExceptions.dataLoss("x").isInstanceOf[IllegalStateException])
    assert(OsqueueExceptions.incompatibleSpark("3.5.7", "2.12.18", "x").isInstanceOf[UnsupportedOperationException])
    val bug: SparkException = OsqueueExceptions.internalError("unreachable")
    assert(bug.getCondition == "INTERNAL_ERROR" && bug.isInternalError && bug.getMessage.contains("osqueue: unreachable"))
  }

  test("should survive Java serialization (a task's failure travels to the driver)") {
    val e = OsqueueExceptions.dataLoss("entries 3 to 5 were removed")
    val bytes = new java.io.ByteArrayOutputStream()
    new java.io.ObjectOutputStream(bytes).writeObject(e)
    val back = new java.io.ObjectInputStream(new java.io.ByteArrayInputStream(bytes.toByteArray)).readObject()
      .asInstanceOf[OsqueueIllegalStateException]
    assert(back.condition == "OSQUEUE_DATA_LOSS" && back.getMessage == e.getMessage)
    assert(back.getMessageParameters.asScala == Map("reason" -> "entries 3 to 5 were removed"))
  }

  /** `throw new` outside the factory, per file; Spark's own exceptions that must stay are listed with a reason. */
  private val allowed: Map[String, (Int, String)] = Map.empty

  private def mainSources: Seq[Path] = {
    val dir = RepoFiles.root.resolve("jvm/spark/src/main")
    Files.walk(dir).iterator().asScala.filter(p => p.toString.endsWith(".scala") || p.toString.endsWith(".java")).toSeq
  }

  test("should find no throw new in jvm/spark/src/main outside the factory") {
    val sources = mainSources
    assert(sources.exists(_.getFileName.toString == "OsqueueWrite.scala"), "the scan found no connector sources")
    val found = (for {
      file <- sources if file.getFileName.toString != "OsqueueExceptions.scala"
      code = Files.readAllLines(file).asScala.map(_.split("//", 2)(0)).filterNot(_.trim.startsWith("*")).mkString("\n")
      n = "throw\\s+new\\b".r.findAllIn(code).size if n > 0
    } yield file.getFileName.toString -> n).toMap
    val unexplained = found.filter { case (f, n) => n > allowed.get(f).fold(0)(_._1) }
    assert(unexplained.isEmpty, s"throws that bypass OsqueueExceptions (add a factory method): $unexplained")
    val stale = allowed.filter { case (f, (n, _)) => found.getOrElse(f, 0) < n }
    assert(stale.isEmpty, s"allow-list entries no longer needed: ${stale.keys}")
  }
}
