package osqueue.spark

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.scalatest.funsuite.AnyFunSuite

import osqueue.Durations
import osqueue.format.Compression

/** The connector's option keys and defaults per mode, as tests/golden/vocabulary.json lists them. */
class OsqueueOptionsVocabularySuite extends AnyFunSuite {
  private val root = {
    var dir = java.nio.file.Paths.get("").toAbsolutePath
    while (dir != null && !java.nio.file.Files.exists(dir.resolve("build.sbt"))) dir = dir.getParent
    dir
  }
  private val spark: JsonNode =
    new ObjectMapper().readTree(root.resolve("tests/golden/vocabulary.json").toFile).get("spark_options")
  private def keys(mode: String): Set[String] = spark.get(mode).fieldNames().asScala.toSet
  private def default(mode: String, key: String): JsonNode = spark.get(mode).get(key)
  private def duration(mode: String, key: String): FiniteDuration = Durations.parse(key, default(mode, key).asText)

  private def knownKeys(mode: String): Set[String] = {
    val e = intercept[IllegalArgumentException](OsqueueOptions.checkKnown(Map("no-such-option" -> "1"), mode))
    "known options: (.*) and fs\\.s3a\\.\\*".r.findFirstMatchIn(e.getMessage).get.group(1).split(", ").toSet
  }

  test("should know exactly the shared keys in each mode") {
    Seq("source", "batch read", "sink").foreach { mode =>
      assert(knownKeys(mode) == keys(mode).map(_.toLowerCase), mode)
    }
  }

  test("should default the source, batch read and sink options as the shared vocabulary does") {
    val path = Map("path" -> "/tmp/osqueue-vocabulary")
    val source = SourceOptions(path, Map.empty)
    assert(source.location.manifestPath == default("source", "manifestPath").asText)
    assert(source.location.dataPathPrefix == default("source", "dataPathPrefix").asText)
    assert(source.maxBatchesPerTrigger.isEmpty && default("source", "maxBatchesPerTrigger").isNull)
    assert(source.minBatchesPerTrigger.isEmpty && default("source", "minBatchesPerTrigger").isNull)
    assert(source.maxTriggerDelay == duration("source", "maxTriggerDelay"))
    assert(source.failOnDataLoss == default("source", "failOnDataLoss").asBoolean)
    assert(source.gcEnabled == default("source", "gc").asBoolean)
    assert(source.gcInterval == duration("source", "gcInterval"))
    assert(source.gcGracePeriod == duration("source", "gcGracePeriod"))
    val read = BatchReadOptions(path, Map.empty)
    assert(read.startingSequence.isEmpty && read.endingSequence.isEmpty)
    assert(read.failOnDataLoss == default("batch read", "failOnDataLoss").asBoolean)
    val sink = SinkOptions(path, Map.empty)
    assert(sink.compression == Compression.parse("compression", default("sink", "compression").asText))
    assert(sink.flushSizeBytes == default("sink", "flushSizeBytes").asLong)
    assert(sink.writerId.isEmpty && sink.writerBatchId.isEmpty)
    assert(sink.gcGracePeriod == duration("sink", "gcGracePeriod"))
    assert(sink.manifestSegmentEntries == default("sink", "manifestSegmentEntries").asInt)
  }

  test("should parse option durations with the one grammar") {
    val opts = Map("path" -> "/tmp/q")
    assert(OsqueueOptions.duration(opts + ("gcinterval" -> "5min"), "gcinterval", 1.second) == 5.minutes)
    assert(OsqueueOptions.duration(opts + ("gcinterval" -> "100us"), "gcinterval", 1.second) == 100.micros)
    val e = intercept[IllegalArgumentException](OsqueueOptions.duration(opts + ("gcinterval" -> "soon"), "gcinterval", 1.second))
    assert(e.getMessage.contains("'gcinterval'") && e.getMessage.contains("expected a duration"))
  }
}
