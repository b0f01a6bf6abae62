package osqueue

import java.nio.file.{Files, Path}

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.testing.RepoFiles

/**
 * Determinism seams: time comes from an injected [[Clock]], randomness from an injected
 * [[RandomSource]], logs go through slf4j. A scan of the core, Spark and cloud store sources fails when a raw
 * time, random or stderr call appears outside the allow-list below, and when an allow-listed one
 * disappears (then shrink the list). Python's twin: tests/python/test_seams.py.
 */
class SeamsSuite extends AnyFunSuite {
  private val rawCalls = Seq(
    "System.currentTimeMillis", "System.nanoTime", "Thread.sleep", "Instant.now", "new SecureRandom",
    "new java.util.Random", "new Random", "ThreadLocalRandom.current", "scala.util.Random", "UUID.randomUUID",
    "System.err.print", "System.out.print")

  /** (file, call) -> (count, exact, why). `exact = false`: at most `count` (code another change is rewriting). */
  private val allowed: Map[(String, String), (Int, Boolean, String)] = Map(
    ("Clock.scala", "System.currentTimeMillis") -> ((1, true, "SystemClock: the seam itself")),
    ("Clock.scala", "System.nanoTime") -> ((1, true, "SystemClock: the seam itself")),
    ("Clock.scala", "Thread.sleep") -> ((1, true, "SystemClock: the seam itself")),
    ("RandomSource.scala", "new SecureRandom") -> ((1, true, "SystemRandomSource: the seam itself")),
    ("RandomSource.scala", "ThreadLocalRandom.current") -> ((2, true, "SystemRandomSource: the seam itself")),
    ("RandomSource.scala", "new java.util.Random") -> ((1, true, "SeededRandomSource: the seam itself")),
    ("LocalFileLock.scala", "System.nanoTime") -> ((2, true, "the lock's timeout: a real wait between processes")),
    ("LocalFileLock.scala", "Thread.sleep") -> ((1, true, "the lock's spin: a real wait between processes")),
    ("LocalFileLock.scala", "ThreadLocalRandom.current") -> ((1, true, "the lock's spin jitter")),
    ("EndpointConditions.scala", "Thread.sleep") -> ((1, true, "the conditional-write probe's backoff on a real endpoint")),
    ("S3Store.scala", "UUID.randomUUID") -> ((2, true, "the probe's scratch object names: unique, never compared")),
    ("QueueTool.scala", "System.err.print") -> ((3, true, "a command-line tool's error output")),
    ("OsqueueStores.scala", "UUID.randomUUID") -> ((1, true, "the queue id: an identity, never seeded (like an incarnation)")),
    ("GcsStore.scala", "UUID.randomUUID") -> ((1, true, "the probe's scratch object name: unique, never compared")),
    ("AzureBlobStore.scala", "UUID.randomUUID") -> ((2, true, "the probe's scratch object name and wrong ETag: never compared")))

  private def sources: Seq[Path] = Seq("jvm/core/src/main", "jvm/spark/src/main", "jvm/gcs/src/main", "jvm/azure/src/main")
    .map(RepoFiles.root.resolve).flatMap { dir =>
      Files.walk(dir).iterator().asScala.filter(_.toString.endsWith(".scala")).toSeq
    }

  private def found: Map[(String, String), Int] = {
    val counts = for {
      file <- sources
      line <- Files.readAllLines(file).asScala
      code = line.split("//", 2)(0)
      if !code.trim.startsWith("*")
      call <- rawCalls
      n = countOf(code, call)
      if n > 0
    } yield (file.getFileName.toString, call) -> n
    counts.groupMapReduce(_._1)(_._2)(_ + _)
  }

  private def countOf(code: String, call: String): Int = code.sliding(call.length).count(_ == call)

  test("should find no raw time, random or stderr call outside the seams") {
    val calls = found
    val unexplained = calls.filter { case (k, n) => n > allowed.get(k).fold(0)(_._1) }
    assert(unexplained.isEmpty,
      s"raw calls outside the seams (inject Clock / RandomSource, log with slf4j, or allow-list with a reason): $unexplained")
    val stale = allowed.filter { case (k, (n, exact, _)) => exact && calls.getOrElse(k, 0) < n }
    assert(stale.isEmpty, s"allow-list entries no longer needed (lower or remove them): ${stale.keys}")
  }

  test("should draw batch names and backoff jitter from the injected RandomSource") {
    import osqueue.format.BatchNames
    import osqueue.queue.{CasCounters, CasLoop, CasObject, CasStep, RetryPolicy}
    import osqueue.store.{CasOutcome, InMemoryStore, ObjectStore}
    import osqueue.testing.FaultInjectingStore
    def names(seed: Long) = { val r = new SeededRandomSource(seed); (1 to 3).map(_ => BatchNames.newKey("ingest", 0L, r)) }
    assert(names(7) == names(7) && names(7) != names(8))
    // A loop whose writes always conflict sleeps for the jitter its RandomSource draws.
    val draws = new java.util.concurrent.atomic.AtomicInteger()
    val half = new RandomSource {
      def nextBytes(bytes: Array[Byte]): Unit = ()
      def nextDouble(): Double = { draws.incrementAndGet(); 0.5 }
      def nextInt(bound: Int): Int = 0
      def nextLong(): Long = 0L
    }
    val slept = scala.collection.mutable.ArrayBuffer.empty[Long]
    val clock = new Clock {
      def nowMillis(): Long = 0L
      def nanoTime(): Long = 0L
      def sleepMillis(ms: Long): Unit = slept += ms
    }
    val conflicting: ObjectStore = new FaultInjectingStore(InMemoryStore.fresh(), (_, _) => FaultInjectingStore.Fault.None) {
      override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = CasOutcome.PreconditionFailed
    }
    val loop = new CasLoop(new CasObject(conflicting, "ingest/manifest"),
      RetryPolicy(baseDelayMs = 100, maxDelayMs = 1000, maxAttempts = 3), clock, CasCounters.uncounted, half)
    intercept[ConflictRetriesExhaustedException](loop.run[Unit]((_, _) => CasStep.Write(Array[Byte](1), () => ())))
    assert(draws.get == 2 && slept == Seq(50L, 100L))
  }

  test("should see a raw call where there is one") {
    assert(countOf("val t = System.currentTimeMillis() + System.currentTimeMillis()", "System.currentTimeMillis") == 2)
    assert(countOf("val t = clock.nowMillis()", "System.currentTimeMillis") == 0)
  }
}
