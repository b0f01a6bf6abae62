package osqueue

import java.nio.file.Files

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.scalatest.funsuite.AnyFunSuite

import osqueue.consumer.ConsumerConfig
import osqueue.format.Compression
import osqueue.metrics.MetricNames
import osqueue.producer.ProducerConfig
import osqueue.queue.RetryPolicy
import osqueue.testing.RepoFiles

/**
 * The shared vocabulary (tests/golden/vocabulary.json), written once for both languages: the
 * duration grammar, metric names, error conditions with their kinds, option defaults. Python
 * reads the same file (tests/python/test_vocabulary.py).
 */
class VocabularySuite extends AnyFunSuite {
  private val vocabulary: JsonNode = new ObjectMapper().readTree(RepoFiles.golden.resolve("vocabulary.json").toFile)
  private def list(node: JsonNode): Seq[JsonNode] = node.elements().asScala.toSeq

  test("should parse every duration of the shared grammar, and refuse the invalid ones naming the option") {
    list(vocabulary.at("/durations/valid")).foreach { pair =>
      val (text, ms) = (pair.get(0).asText, pair.get(1).asDouble)
      assert(Durations.parse("opt", text).toNanos == math.round(ms * 1e6), text)
    }
    vocabulary.at("/durations/units_ms").fields().asScala.foreach { e =>
      assert(Durations.parse("opt", s"3${e.getKey}").toNanos == math.round(3 * e.getValue.asDouble * 1e6), e.getKey)
    }
    list(vocabulary.at("/durations/invalid")).map(_.asText).foreach { text =>
      val e = intercept[InvalidConfigException](Durations.parse("some.option", text))
      assert(e.option == "some.option" && e.getMessage.contains("expected a duration"), text)
    }
  }

  test("should name every metric as the shared vocabulary does") {
    val jvm = MetricNames.getClass.getDeclaredMethods.toSeq
      .filter(m => m.getParameterCount == 0 && m.getReturnType == classOf[String])
      .map(_.invoke(MetricNames).asInstanceOf[String]).toSet
    assert(jvm == list(vocabulary.get("metrics")).map(_.asText).toSet)
  }

  test("should have exactly the shared error conditions, each of its kind") {
    val samples: Map[String, OsqueueException] = Map(
      "InvalidConfig" -> new InvalidConfigException("o", "v", "h"),
      "InvalidObjectKey" -> new InvalidObjectKeyException("k", "r"),
      "CorruptManifest" -> new CorruptManifestException("k", "d"),
      "CorruptBatch" -> new CorruptBatchException("k", "d"),
      "UnsupportedFormatVersion" -> new UnsupportedFormatVersionException("k", "manifest", 9),
      "BatchNotFound" -> new BatchNotFoundException("k", 1),
      "Fenced" -> new FencedException(1, 2),
      "WriterFenced" -> new WriterFencedException("w", 1, 2),
      "ResumePoint" -> new ResumePointException("m"),
      "ConflictRetriesExhausted" -> new ConflictRetriesExhaustedException("k", 1, 2),
      "AmbiguousCommit" -> new AmbiguousCommitException("m"),
      "Store" -> new StoreException("m"),
      "CorruptSpool" -> new CorruptSpoolException("p", 1, "d"),
      "QueueFull" -> new QueueFullException("m"),
      "DataLoss" -> new DataLossException(Some("s"), 1, 2),
      "ConditionalWritesNotHonoured" -> new ConditionalWritesNotHonouredException("http://x", "d"),
      "IllegalQueueState" -> new IllegalQueueStateException("m"))
    // Every exception class declared in errors.scala (the sealed hierarchy) has a sample above.
    val declared = """final class (\w+)Exception\b""".r
      .findAllMatchIn(Files.readString(RepoFiles.root.resolve("jvm/core/src/main/scala/osqueue/errors.scala")))
      .map(_.group(1)).toSet
    assert(declared == samples.keySet)
    val shared = list(vocabulary.get("errors")).map(e => e.get("condition").asText -> e.get("kind").asText).toMap
    assert(samples.keySet == shared.keySet)
    // GCS and Azure raise it too: the message names the endpoint, not one store's.
    val refused = new ConditionalWritesNotHonouredException("https://storage.test", "ifGenerationMatch=0 replaced it")
    assert(refused.getMessage.startsWith("the object store endpoint https://storage.test does not honour"), refused)
    assert(!refused.getMessage.contains("S3"), refused)
    samples.foreach { case (condition, e) =>
      assert(e.getClass.getSimpleName == condition + "Exception")
      assert(e.kind.name == shared(condition), condition)
    }
  }

  test("should default every option as the shared vocabulary does") {
    def fields(p: Product): Map[String, Any] = p.productElementNames.zip(p.productIterator).toMap
    val owners = Map("producer" -> fields(ProducerConfig()), "consumer" -> fields(ConsumerConfig()),
      "retry" -> fields(RetryPolicy()))
    list(vocabulary.get("options")).foreach { option =>
      val name = option.get("name").asText
      if (!option.has("python_only")) { // not built on the JVM yet (vocabulary.json says why)
        val default = option.get("default")
        list(option.get("of")).map(_.asText).foreach { of =>
          val values = owners(of)
          val actual = values.getOrElse(name,
            values.getOrElse(name + "Ms",
              fail(s"$of has no option $name (nor ${name}Ms)")))
          val expected: Any =
            if (name == "compression") Compression.parse(name, default.asText)
            else if (values.contains(name + "Ms")) Durations.parse(name, default.asText).toMillis
            else if (actual.isInstanceOf[FiniteDuration]) Durations.parse(name, default.asText)
            else if (default.isNull) None
            else if (default.isBoolean) default.asBoolean
            else if (default.isNumber && actual.isInstanceOf[Int]) default.asInt
            else if (default.isNumber) default.asLong
            else default.asText
          assert(actual == expected, s"$of.$name")
        }
      }
    }
  }
}
