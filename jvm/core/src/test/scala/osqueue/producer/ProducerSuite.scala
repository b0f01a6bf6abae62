package osqueue.producer

import java.nio.file.Files
import java.util.concurrent.{CountDownLatch, Executors, TimeUnit}

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{IllegalQueueStateException, InvalidConfigException, StoreException}
import osqueue.format.{BatchCodec, Compression, ManifestCodec}
import osqueue.store._

class ProducerSuite extends AnyFunSuite {
  private def manifest(store: ObjectStore) = ManifestCodec.decode(store.get("ingest/manifest").get.bytes, "m")

  test("should put many produce() calls into one batch with one metadata item each") {
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour))
    val h1 = p.produce(Seq("a", "b").map(_.getBytes), "m1".getBytes)
    val h2 = p.produce(Seq("c").map(_.getBytes), "m2".getBytes)
    assert(h1.result().isEmpty, "durable before any flush")
    p.flush()
    val d1 = h1.awaitDurable(5.seconds); val d2 = h2.awaitDurable(5.seconds)
    assert(d1.sequence == 0 && d2.sequence == 0 && d1.location == d2.location && d2.firstIndex == 2)
    val entry = { val es = manifest(store).entries; assert(es.size == 1); es.head }
    assert(entry.metadata.map(m => (m.startIndex, new String(m.payload))) == Seq((0, "m1"), (2, "m2")))
    assert(BatchCodec.decode(store.get(entry.location).get.bytes, "b").map(new String(_)) == Seq("a", "b", "c"))
    p.close()
  }

  test("should flush by interval") {
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = 50.millis))
    val d = p.produce(Seq("x".getBytes)).awaitDurable(10.seconds)
    assert(d.sequence == 0)
    p.close()
  }

  test("should flush at once with a linger (flushInterval) of 0, batching what arrived meanwhile") {
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = Duration.Zero))
    val handles = (1 to 20).map(i => p.produce(Seq(s"e$i".getBytes)))
    val durable = handles.map(_.awaitDurable(10.seconds))
    assert(durable.map(_.sequence) == durable.map(_.sequence).sorted)
    val all = durable.groupBy(_.location).toSeq.sortBy(_._2.head.sequence)
      .flatMap { case (loc, _) => BatchCodec.decode(store.get(loc).get.bytes, "b").map(new String(_)) }
    assert(all == (1 to 20).map(i => s"e$i"))
    p.close()
  }

  test("should send a lone produce() at once with eagerFlush, without waiting out the linger") {
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour, eagerFlush = true))
    val d = p.produce(Seq("a".getBytes)).awaitDurable(10.seconds) // an hour's linger, no flush(): nothing was in flight
    assert(BatchCodec.decode(store.get(d.location).get.bytes, "b").map(new String(_)) == Seq("a"))
    p.close()
  }

  test("should batch with eagerFlush what arrives while a batch is in flight, and send it when that one lands") {
    val inFlight = new CountDownLatch(1)
    val release = new CountDownLatch(1)
    @volatile var armed = false
    val store = new osqueue.testing.ForwardingStore(InMemoryStore.fresh()) {
      private def held[A](write: => A): A = {
        if (armed && inFlight.getCount > 0) { // the first batch's manifest write waits until the test lets it go
          inFlight.countDown()
          assert(release.await(10, TimeUnit.SECONDS))
        }
        write
      }
      override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = held(super.putIfAbsent(key, bytes))
      override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome =
        held(super.putIfVersionMatches(key, bytes, expected))
    }
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour, eagerFlush = true))
    armed = true // after the constructor's claim of the data prefix
    val first = p.produce(Seq("a".getBytes))
    assert(inFlight.await(10, TimeUnit.SECONDS))
    val later = Seq("b", "c").map(v => p.produce(Seq(v.getBytes))) // the first is in flight: these linger together
    Thread.sleep(100)
    assert(later.forall(_.result().isEmpty), "sent while a batch was in flight")
    release.countDown() // the first lands: nothing in flight, so the lingering batch goes at once
    val a = first.awaitDurable(10.seconds)
    val Seq(b, c) = later.map(_.awaitDurable(10.seconds))
    assert(a.location != b.location && b.location == c.location && (b.firstIndex, c.firstIndex) == (0, 1))
    assert(manifest(store).entries.map(e => BatchCodec.decode(store.get(e.location).get.bytes, "b").size) == Seq(1, 2))
    p.close()
  }

  test("should keep the linger for a lone produce() without eagerFlush (the default)") {
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour))
    val h = p.produce(Seq("a".getBytes))
    Thread.sleep(200)
    assert(h.result().isEmpty && store.get("ingest/manifest").forall(_ => manifest(store).entries.isEmpty))
    p.close()
  }

  test("should flush by size, before the interval") {
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour, flushSizeBytes = 1000, compression = Compression.Zstd))
    val handles = (0 until 5).map(_ => p.produce(Seq(new Array[Byte](300))))
    handles.take(4).foreach(_.awaitDurable(10.seconds))
    assert(handles(4).result().isEmpty, "the fifth input sits in a new, unflushed batch")
    assert(manifest(store).entries.size == 1)
    val batch = store.get(manifest(store).entries.head.location).get.bytes
    assert(batch(batch.length - 7) == Compression.Zstd.id)
    p.close()
    assert(manifest(store).entries.size == 2, "close() flushes the open batch")
  }

  test("should block produce() when max_buffered_inputs are waiting (backpressure)") {
    val inner = InMemoryStore.fresh()
    val gate = new CountDownLatch(1)
    val blocking = new osqueue.testing.FaultInjectingStore(inner, (_, _) => osqueue.testing.FaultInjectingStore.Fault.None) {
      override def put(key: String, bytes: Array[Byte]): Unit = { gate.await(); super.put(key, bytes) }
    }
    val p = new Producer(blocking, ProducerConfig(flushInterval = 1.hour, flushSizeBytes = 1, maxBufferedInputs = 2))
    p.produce(Seq("first".getBytes)) // taken by the flush thread, which then blocks uploading
    Thread.sleep(100)
    p.produce(Seq("2".getBytes)); p.produce(Seq("3".getBytes)) // fill the 2 slots
    val pool = Executors.newSingleThreadExecutor()
    val blocked = pool.submit(() => p.produce(Seq("4".getBytes)))
    Thread.sleep(300)
    assert(!blocked.isDone, "produce() did not block on a full buffer")
    gate.countDown()
    blocked.get(10, TimeUnit.SECONDS).awaitDurable(10.seconds)
    p.close()
    pool.shutdown()
    assert(manifest(inner).entries.size == 4)
  }

  test("should start when the store fails the owner record's create, before or after applying it") {
    import osqueue.testing.FaultInjectingStore.Fault
    for (fault <- Seq(Fault.FailBefore, Fault.ApplyThenError)) {
      val inner = InMemoryStore.fresh()
      val store = new osqueue.testing.FaultInjectingStore(inner,
        (key, n) =>
          if (key.endsWith("/osqueue.owner") && n == 0) fault else Fault.None)
      val p = new Producer(store, ProducerConfig(flushInterval = 1.hour))
      assert(store.injected.get == 1, fault)
      assert(new String(inner.get("ingest/osqueue.owner").get.bytes).contains("\"manifest\":\"ingest/manifest\""), fault)
      val h = p.produce(Seq("a".getBytes))
      p.flush()
      assert(h.awaitDurable(5.seconds).sequence == 0, fault)
      p.close()
    }
  }

  test("should fail every handle of a batch whose upload failed, and keep working afterwards") {
    val inner = InMemoryStore.fresh()
    @volatile var failing = true
    val flaky = new osqueue.testing.FaultInjectingStore(inner, (_, _) => osqueue.testing.FaultInjectingStore.Fault.None) {
      override def put(key: String, bytes: Array[Byte]): Unit =
        if (failing) throw new StoreException(s"injected upload failure for '$key'") else super.put(key, bytes)
    }
    val p = new Producer(flaky, ProducerConfig(flushInterval = 1.hour))
    val hs = Seq(p.produce(Seq("a".getBytes)), p.produce(Seq("b".getBytes)))
    p.flush()
    hs.foreach { h =>
      val e = intercept[StoreException](h.awaitDurable(5.seconds))
      assert(e.getMessage.contains("injected upload failure"))
      assert(h.result().exists(_.isFailure))
    }
    failing = false
    val c = p.produce(Seq("c".getBytes))
    p.flush()
    assert(c.awaitDurable(10.seconds).sequence == 0, "the failed batch must not be enqueued")
    p.close()
    assert(manifest(inner).entries.size == 1)
  }

  test("should let close() wait for manifest writes still in flight after the flush thread ended") {
    val inner = InMemoryStore.fresh()
    val slowManifest = new osqueue.testing.FaultInjectingStore(inner, (_, _) => osqueue.testing.FaultInjectingStore.Fault.None) {
      override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = { Thread.sleep(300); super.putIfAbsent(key, bytes) }
      override def putIfVersionMatches(key: String, bytes: Array[Byte], v: ObjectVersion): CasOutcome = {
        Thread.sleep(300); super.putIfVersionMatches(key, bytes, v)
      }
    }
    val p = new Producer(slowManifest, ProducerConfig(flushInterval = 1.hour))
    val handles = (0 until 3).map(i => p.produce(Seq(s"e$i".getBytes)))
    p.close() // the flush thread hands the last batch to the committer and ends before it is written
    assert(handles.forall(_.result().exists(_.isSuccess)), "close() returned before the writes were durable")
    assert(manifest(inner).entries.size == 1)
    intercept[IllegalQueueStateException](p.flush())
  }

  test("should refuse produce() after close() and empty entry lists") {
    val p = new Producer(InMemoryStore.fresh())
    intercept[InvalidConfigException](p.produce(Seq.empty))
    p.close()
    p.close() // idempotent
    intercept[IllegalQueueStateException](p.produce(Seq("x".getBytes)))
  }

  test("should validate its configuration, naming the option") {
    val e = intercept[InvalidConfigException](ProducerConfig(maxBufferedInputs = 0))
    assert(e.getMessage.contains("maxBufferedInputs"))
    intercept[InvalidConfigException](ProducerConfig(flushSizeBytes = -1))
    assert(intercept[InvalidConfigException](ProducerConfig(flushInterval = -1.millis)).getMessage.contains("flushInterval"))
  }

  test("should let several processes produce into one local queue exactly") {
    val root = Files.createTempDirectory("osq-procs")
    // The JVM running this suite (not whatever `java` is on PATH), output kept for the failure message.
    val javaBin = java.nio.file.Paths.get(System.getProperty("java.home"), "bin", "java").toString
    val procs = (0 until 2).map { i =>
      val log = Files.createTempFile("osq-produce", ".log").toFile
      val proc = new ProcessBuilder(javaBin, "-cp", System.getProperty("java.class.path"),
        "osqueue.producer.ProduceMain", root.toString, s"p$i", "40").redirectErrorStream(true).redirectOutput(log).start()
      (proc, log)
    }
    // This JVM produces concurrently too.
    val store = new LocalFileSystemStore(root)
    val p = new Producer(store, ProducerConfig(flushInterval = 5.millis))
    (0 until 40).map(i => p.produce(Seq(s"local-$i".getBytes))).foreach(_.awaitDurable(60.seconds))
    p.close()
    procs.foreach { case (proc, log) =>
      val finished = proc.waitFor(180, TimeUnit.SECONDS)
      if (!finished) proc.destroyForcibly()
      def output = new String(Files.readAllBytes(log.toPath)).take(3000)
      assert(finished && proc.exitValue() == 0, s"producer process failed (finished=$finished): $output")
    }
    val m = manifest(store)
    val records = m.entries.flatMap(e => BatchCodec.decode(store.get(e.location).get.bytes, e.location)).map(new String(_))
    val expected = (0 until 40).map(i => s"local-$i") ++ (0 until 2).flatMap(pi => (0 until 40).map(i => s"p$pi-$i"))
    assert(records.sorted == expected.sorted, "lost or duplicated entries")
    assert(m.entries.map(_.sequence) == m.entries.indices.map(_.toLong))
    assert(m.entries.map(_.location).distinct.size == m.entries.size)
  }

  test("should keep at most 8 uploaded batches waiting for their manifest write, as the Python producer does") {
    val inner = InMemoryStore.fresh()
    val release = new CountDownLatch(1)
    val batchPuts = new java.util.concurrent.atomic.AtomicInteger()
    val store = new osqueue.testing.FaultInjectingStore(inner, (_, _) => osqueue.testing.FaultInjectingStore.Fault.None) {
      override def put(k: String, b: Array[Byte]): Unit = { if (k.endsWith(".batch")) batchPuts.incrementAndGet(); super.put(k, b) }
      override def putIfAbsent(k: String, b: Array[Byte]): CasOutcome =
        if (k == "ingest/manifest") { release.await(30, TimeUnit.SECONDS); super.putIfAbsent(k, b) }
        else super.putIfAbsent(k, b)
    }
    val p = new Producer(store, ProducerConfig(flushSizeBytes = 1, flushInterval = 1.hour))
    val handles = (0 until 20).map(i => p.produce(Seq(s"e$i".getBytes)))
    Thread.sleep(500) // the manifest write hangs: the flush thread must pause, not upload all 20
    assert(batchPuts.get() == 8, s"${batchPuts.get()} batches uploaded while the manifest write hung")
    release.countDown()
    handles.foreach(_.awaitDurable(30.seconds))
    p.close()
    assert(manifest(inner).entries.size == 20 && batchPuts.get() == 20)
  }
}

/** A producer in its own JVM for the cross-process test: `ProduceMain <root> <tag> <count>`. */
object ProduceMain {
  def main(args: Array[String]): Unit = {
    val Array(root, tag, count) = args
    val p = new Producer(new LocalFileSystemStore(java.nio.file.Paths.get(root)), ProducerConfig(flushInterval = 5.millis))
    (0 until count.toInt).map(i => p.produce(Seq(s"$tag-$i".getBytes))).foreach(_.awaitDurable(60.seconds))
    p.close()
  }

}
