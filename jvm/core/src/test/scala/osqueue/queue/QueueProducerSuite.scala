package osqueue.queue

import java.nio.file.Files
import java.util.concurrent.{Executors, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{AmbiguousCommitException, ConflictRetriesExhaustedException, SystemClock}
import osqueue.format.{BatchNames, DequeueReceipts, ManifestCodec, Manifest}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.{CasOutcome, InMemoryStore, LocalFileSystemStore, ObjectStore, ObjectVersion, VersionedObject}
import osqueue.testing.{FaultInjectingStore, ForwardingStore}
import osqueue.testing.FaultInjectingStore.Fault

class QueueProducerSuite extends AnyFunSuite {
  private val key = "ingest/manifest"
  private val fastRetry = RetryPolicy(baseDelayMs = 1, maxDelayMs = 20)

  private def appender(store: ObjectStore, metrics: MetricsRegistry = new MetricsRegistry, policy: RetryPolicy = fastRetry) =
    new QueueProducer(new ManifestStore(store, key), policy, SystemClock, metrics, 10.minutes.toMillis)

  private def pending(store: ObjectStore, name: String = null): PendingLocation = {
    val upload = () => { val k = BatchNames.newKey("ingest", System.currentTimeMillis()); store.put(k, Array[Byte](1)); k }
    new PendingLocation(Option(name).getOrElse(upload()), IndexedSeq.empty, upload)
  }

  private def manifestOf(store: ObjectStore): Manifest =
    store.get(key).map(o => ManifestCodec.decode(o.bytes, key)).getOrElse(Manifest.Empty)

  /** Every location exactly once, sequences contiguous from 0. */
  private def assertExactUnion(store: ObjectStore, expected: Set[String]): Unit = {
    val m = manifestOf(store)
    val locations = m.entries.map(_.location)
    assert(locations.size == locations.distinct.size, "duplicate entries")
    assert(locations.toSet == expected)
    assert(m.entries.map(_.sequence) == (0L until expected.size.toLong))
    assert(m.nextSequence == expected.size)
  }

  /**
   * `threads` independent producers (each its own appender, one shared registry) append `perThread`
   * locations each. Asserts they really contended: some manifest writes conflicted.
   */
  private def hammer(store: ObjectStore, threads: Int, perThread: Int): Set[String] = {
    val metrics = new MetricsRegistry
    val pool = Executors.newFixedThreadPool(threads)
    val start = new java.util.concurrent.CountDownLatch(1)
    val futures = (0 until threads).map { _ =>
      pool.submit(() => {
        val a = appender(store, metrics)
        start.await() // all threads start appending together
        try (0 until perThread).map { _ =>
            val p = pending(store)
            a.enqueue(p).get(60, TimeUnit.SECONDS)
            p.location
          }
        finally a.close()
      })
    }
    start.countDown()
    val all = futures.flatMap(_.get(120, TimeUnit.SECONDS)).toSet
    pool.shutdown()
    val conflicts = metrics.counterValue(MetricNames.ManifestConflicts, "role" -> "producer")
    assert(conflicts > 0, s"no manifest conflicts among $threads producers: the test did not contend")
    // Each enqueue waits for its write, so every location is one landed write (conflicts are not writes).
    assert(metrics.counterValue(MetricNames.ManifestWrites, "role" -> "producer") == threads * perThread)
    all
  }

  test("should append exactly the union of 8 contending producers in memory") {
    val store = InMemoryStore.fresh()
    assertExactUnion(store, hammer(store, threads = 8, perThread = 25))
  }

  test("should append exactly the union of 8 contending producers on the local filesystem") {
    val store = new LocalFileSystemStore(Files.createTempDirectory("osq-qp"))
    assertExactUnion(store, hammer(store, threads = 8, perThread = 15))
  }

  test("should append exactly the union of 8 contending producers on a real S3 server") {
    osqueue.testing.S3TestServer.missingReason.foreach(reason => cancel(reason))
    val server = osqueue.testing.S3TestServer.shared
    val store = osqueue.store.ObjectStores.open(s"s3a://${server.freshBucket()}/queue", server.options)
    try assertExactUnion(store, hammer(store, threads = 8, perThread = 8))
    finally store.close()
  }

  test("should group locations that become ready during a write into the next write") {
    val inner = InMemoryStore.fresh()
    val writes = new AtomicInteger()
    // A slow manifest write lets many locations pile up behind the first.
    val slow = new FaultInjectingStore(inner, (_, _) => { writes.incrementAndGet(); Thread.sleep(50); Fault.None })
    val a = appender(slow)
    val ps = (0 until 40).map(_ => pending(inner))
    val futures = ps.map { p =>
      val f = a.enqueue(p); Thread.sleep(2); f
    }
    futures.foreach(_.get(30, TimeUnit.SECONDS))
    a.close()
    assertExactUnion(inner, ps.map(_.location).toSet)
    assert(writes.get() < 10, s"${writes.get()} manifest writes for 40 locations: no group commit")
    // Readiness order is kept inside and across writes.
    assert(manifestOf(inner).entries.map(_.location) == ps.map(_.location))
  }

  /** Counts the manifest's reads and conditional writes (other keys, e.g. the prefix's owner record, are not counted). */
  private class CountingManifest(inner: ObjectStore) extends ForwardingStore(inner) {
    val reads = new AtomicInteger()
    val conditionalWrites = new AtomicInteger()
    override def get(k: String): Option[VersionedObject] = { if (k == key) reads.incrementAndGet(); inner.get(k) }
    override def putIfAbsent(k: String, bytes: Array[Byte]): CasOutcome = {
      conditionalWrites.incrementAndGet(); inner.putIfAbsent(k, bytes)
    }
    override def putIfVersionMatches(k: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
      conditionalWrites.incrementAndGet(); inner.putIfVersionMatches(k, bytes, expected)
    }
  }

  test("should write the manifest once per flush, without reading it, while no one else writes it") {
    val inner = InMemoryStore.fresh()
    val counting = new CountingManifest(inner)
    val a = appender(counting)
    val ps = (0 until 5).map(_ => pending(inner))
    assert(ps.map(p => a.enqueue(p).get(30, TimeUnit.SECONDS)) == (0L until 5L))
    a.close()
    assertExactUnion(inner, ps.map(_.location).toSet)
    // The first append reads (there was no manifest yet); each later one writes against its previous write.
    assert(counting.reads.get() == 1)
    assert(counting.conditionalWrites.get() == 5)
  }

  test("should re-read after a conflict on its own stale last write and land the group exactly once") {
    val inner = InMemoryStore.fresh()
    val counting = new CountingManifest(inner)
    val metrics = new MetricsRegistry
    val a = appender(counting, metrics)
    val first = pending(inner)
    assert(a.enqueue(first).get(30, TimeUnit.SECONDS) == 0L)
    val other = appender(inner) // another producer writes: `a`'s own last write is no longer the manifest
    val second = pending(inner)
    assert(other.enqueue(second).get(30, TimeUnit.SECONDS) == 1L)
    other.close()
    val third = pending(inner)
    assert(a.enqueue(third).get(30, TimeUnit.SECONDS) == 2L)
    a.close()
    assert(manifestOf(inner).entries.map(_.location) == Seq(first, second, third).map(_.location))
    assert(metrics.counterValue(MetricNames.ManifestConflicts, "role" -> "producer") == 1)
    assert(counting.reads.get() == 2) // the first append's, and the one after the conflict
    assert(counting.conditionalWrites.get() == 3) // the creation, the try on the stale snapshot (412), the retry
  }

  test("should read again after a write of unknown outcome instead of reusing a snapshot") {
    val inner = InMemoryStore.fresh()
    val counting = new CountingManifest(inner)
    val faulty = new FaultInjectingStore(counting, (_, n) => if (n == 1) Fault.ApplyThenError else Fault.None)
    val a = appender(faulty)
    val ps = (0 until 3).map(_ => pending(inner))
    assert(ps.map(p => a.enqueue(p).get(30, TimeUnit.SECONDS)) == (0L until 3L))
    a.close()
    assertExactUnion(inner, ps.map(_.location).toSet)
    assert(faulty.injected.get() == 1)
    // The first append's read, the look that found the lost reply's write landed, the third append's read.
    assert(counting.reads.get() == 3)
  }

  test("CasLoop should ask a step that would not write on its reused snapshot again on a fresh read") {
    val counting = new CountingManifest(InMemoryStore.fresh())
    val loop = new CasLoop(new ManifestStore(counting, key).casObject, fastRetry, SystemClock,
      CasCounters.manifest(new MetricsRegistry, "test"), reuseOwnWrite = true)
    assert(loop.run[Int]((_, _) => CasStep.Write(Array[Byte](1), () => 1)) == 1)
    val seen = scala.collection.mutable.ArrayBuffer.empty[Seq[Byte]]
    assert(loop.run[Int] { (s, _) => seen += s.raw.toSeq; CasStep.Done(2) } == 2)
    assert(seen == Seq(Seq[Byte](1), Seq[Byte](1))) // the reused snapshot, then a fresh read
    assert(counting.reads.get() == 2)
  }

  test("should resolve a write whose reply was lost (store error after applying) to exactly one entry") {
    val inner = InMemoryStore.fresh()
    val metrics = new MetricsRegistry
    val faulty = new FaultInjectingStore(inner, (_, n) => if (n % 2 == 0) Fault.ApplyThenError else Fault.None)
    val a = appender(faulty, metrics)
    val ps = (0 until 6).map(_ => pending(inner))
    val seqs = ps.map(p => a.enqueue(p).get(30, TimeUnit.SECONDS))
    a.close()
    assert(faulty.injected.get() >= 3)
    assertExactUnion(inner, ps.map(_.location).toSet)
    assert(seqs == (0L until 6L))
    assert(metrics.counterValue(MetricNames.AmbiguousWrites, "role" -> "producer") >= 3)
  }

  test("should resolve a 412 reported for a write that was applied to exactly one entry") {
    val inner = InMemoryStore.fresh()
    val faulty = new FaultInjectingStore(inner, (_, n) => if (n % 3 == 0) Fault.ApplyThenPreconditionFailed else Fault.None)
    val a = appender(faulty)
    val ps = (0 until 9).map(_ => pending(inner))
    ps.foreach(p => a.enqueue(p).get(30, TimeUnit.SECONDS))
    a.close()
    assert(faulty.injected.get() >= 3)
    assertExactUnion(inner, ps.map(_.location).toSet)
  }

  test("should report the sequences where a retried write landed, not where the first try would have") {
    val inner = InMemoryStore.fresh()
    val other = appender(inner)
    val faulty = new FaultInjectingStore(inner,
      (_, n) =>
        n match {
          case 0 =>
            other.enqueue(pending(inner)).get() // someone else takes sequence 0 meanwhile
            Fault.FailBefore
          case 1 => Fault.ApplyThenError // our retry lands at sequence 1, its reply is lost
          case _ => Fault.None
        })
    val a = appender(faulty)
    val p = pending(inner)
    assert(a.enqueue(p).get(30, TimeUnit.SECONDS) == 1L)
    a.close(); other.close()
    assert(manifestOf(inner).entries.map(_.location).last == p.location)
  }

  test("should retry a write that failed before being applied") {
    val inner = InMemoryStore.fresh()
    val faulty = new FaultInjectingStore(inner, (_, n) => if (n < 3) Fault.FailBefore else Fault.None)
    val a = appender(faulty)
    val p = pending(inner)
    assert(a.enqueue(p).get(30, TimeUnit.SECONDS) == 0L)
    a.close()
    assertExactUnion(inner, Set(p.location))
  }

  test("should retry a manifest read that fails, within the budget, in the producer and the consumer (CasLoop)") {
    val inner = InMemoryStore.fresh()
    val failingReads = new AtomicInteger(2)
    val faulty = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def get(k: String) =
        if (k == key && failingReads.getAndDecrement() > 0) throw new osqueue.StoreException("503 on GET (test)")
        else super.get(k)
    }
    val a = appender(faulty)
    val p = pending(inner)
    assert(a.enqueue(p).get(30, TimeUnit.SECONDS) == 0L)
    a.close()
    val consumer = new QueueConsumer(new ManifestStore(faulty, key), fastRetry, SystemClock, new MetricsRegistry)
    failingReads.set(2)
    consumer.initialize(None)
    failingReads.set(2)
    assert(consumer.dequeueThrough(0))
    failingReads.set(100) // more failures than the budget allows: the read's error, not a hang
    val e = intercept[osqueue.StoreException](
      new QueueConsumer(new ManifestStore(faulty, key), tinyBudget, SystemClock, new MetricsRegistry).initialize(None))
    assert(e.getMessage.contains("503 on GET"))
  }

  test("should raise AmbiguousCommit, not append twice, when the unknown write's range was already dequeued") {
    val inner = InMemoryStore.fresh()
    val first = pending(inner)
    val a0 = appender(inner); a0.enqueue(first).get(); a0.close()
    // The write lands, its reply is lost, and a consumer dequeues everything before we re-read.
    val faulty = new FaultInjectingStore(inner, (_, n) => if (n == 0) Fault.ApplyThenError else Fault.None) {
      override def putIfVersionMatches(k: String, b: Array[Byte], v: ObjectVersion): CasOutcome = {
        try super.putIfVersionMatches(k, b, v)
        catch {
          case e: osqueue.StoreException =>
            val raw = inner.get(k).get
            val dequeued = osqueue.format.ManifestEdits.dequeueThrough(raw.bytes, Long.MaxValue - 1, k).get
            inner.putIfVersionMatches(k, dequeued, raw.version)
            throw e
        }
      }
    }
    val a = appender(faulty)
    val e = intercept[java.util.concurrent.ExecutionException](a.enqueue(pending(inner)).get(30, TimeUnit.SECONDS))
    a.close()
    assert(e.getCause.isInstanceOf[AmbiguousCommitException], e.getCause)
    val m = manifestOf(inner)
    assert(m.entries.isEmpty && m.nextSequence == 2, "appended again after an ambiguous write")
  }

  test("should give up with ConflictRetriesExhausted when contention never settles") {
    val inner = InMemoryStore.fresh()
    val alwaysConflict = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def putIfAbsent(k: String, b: Array[Byte]): CasOutcome = CasOutcome.PreconditionFailed
    }
    val a = appender(alwaysConflict, policy = RetryPolicy(baseDelayMs = 1, maxDelayMs = 2, maxAttempts = 5))
    val e = intercept[java.util.concurrent.ExecutionException](a.enqueue(pending(inner)).get(30, TimeUnit.SECONDS))
    a.close()
    assert(e.getCause.isInstanceOf[ConflictRetriesExhaustedException])
    assert(e.getCause.getMessage.contains("5 conflicting attempts"))
    assert(inner.get(key).isEmpty)
  }

  private val tinyBudget = RetryPolicy(baseDelayMs = 1, maxDelayMs = 2, maxAttempts = 4)

  test("should raise AmbiguousCommit, not a plain store error, when the budget runs out after unknown outcomes") {
    val inner = InMemoryStore.fresh()
    // Every write's reply is lost before it is applied: each could still land for all the producer knows.
    val faulty = new FaultInjectingStore(inner, (_, _) => Fault.FailBefore)
    val a = appender(faulty, policy = tinyBudget)
    val e = intercept[java.util.concurrent.ExecutionException](a.enqueue(pending(inner)).get(30, TimeUnit.SECONDS))
    a.close()
    assert(e.getCause.isInstanceOf[AmbiguousCommitException], e.getCause)
    assert(e.getCause.getMessage.contains("may still land") && e.getCause.getCause.isInstanceOf[osqueue.StoreException])
    assert(faulty.injected.get() == 4 && inner.get(key).isEmpty)
  }

  test("should raise AmbiguousCommit, not the re-upload's error, when a stale re-upload fails while a write is undecided") {
    val inner = InMemoryStore.fresh()
    val clock = new osqueue.testing.ManualClock(System.currentTimeMillis())
    val faulty = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def putIfAbsent(k: String, b: Array[Byte]): CasOutcome = {
        clock.advance(301000) // a slow request: the batch is older than half the grace period now
        throw new osqueue.StoreException("injected: read timeout, not applied (yet)")
      }
    }
    val old = BatchNames.newKey("ingest", clock.nowMillis()); inner.put(old, Array[Byte](1))
    val failingReupload = () => throw new osqueue.StoreException("injected: 503 on the re-upload")
    val a = new QueueProducer(new ManifestStore(faulty, key), RetryPolicy(baseDelayMs = 1, maxDelayMs = 2, maxAttempts = 5),
      clock, new MetricsRegistry, 10.minutes.toMillis)
    val e = intercept[java.util.concurrent.ExecutionException](
      a.enqueue(new PendingLocation(old, IndexedSeq.empty, failingReupload)).get(30, TimeUnit.SECONDS))
    a.close()
    assert(e.getCause.isInstanceOf[AmbiguousCommitException], e.getCause)
    assert(e.getCause.getCause.getMessage.contains("503 on the re-upload"), e.getCause)
  }

  test("should raise AmbiguousCommit when conflicts exhaust the budget while an unknown write may still land") {
    val inner = InMemoryStore.fresh()
    val first = pending(inner)
    val a0 = appender(inner); a0.enqueue(first).get(); a0.close()
    val calls = new AtomicInteger()
    val faulty = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def putIfVersionMatches(k: String, b: Array[Byte], v: ObjectVersion): CasOutcome =
        if (calls.getAndIncrement() == 0) throw new osqueue.StoreException("injected: timeout, not applied (yet)")
        else CasOutcome.PreconditionFailed
    }
    val a = appender(faulty, policy = tinyBudget)
    val e = intercept[java.util.concurrent.ExecutionException](a.enqueue(pending(inner)).get(30, TimeUnit.SECONDS))
    a.close()
    assert(e.getCause.isInstanceOf[AmbiguousCommitException], e.getCause)
    assert(e.getCause.getMessage.contains("at sequence 1"))
    assert(manifestOf(inner).entries.map(_.location) == Seq(first.location))
  }

  test("should report the location that landed when a write sent before a re-upload lands late") {
    val inner = InMemoryStore.fresh()
    val clock = new osqueue.testing.ManualClock(System.currentTimeMillis())
    val upload = () => { val k = BatchNames.newKey("ingest", clock.nowMillis()); inner.put(k, Array[Byte](1)); k }
    val calls = new AtomicInteger()
    var delayed: () => CasOutcome = null
    val late = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def putIfAbsent(k: String, b: Array[Byte]): CasOutcome = calls.getAndIncrement() match {
        case 0 => // the request is delayed in the network; the producer times out, and time passes
          delayed = () => inner.putIfAbsent(k, b)
          clock.advance(6.minutes.toMillis)
          throw new osqueue.StoreException("injected: timeout")
        case 1 => // the delayed write lands just before the retry (carrying a fresh re-upload)
          assert(delayed().isInstanceOf[CasOutcome.Written])
          inner.putIfAbsent(k, b)
        case _ => inner.putIfAbsent(k, b)
      }
    }
    val qp = new QueueProducer(new ManifestStore(late, key), fastRetry, clock, new MetricsRegistry, 10.minutes.toMillis)
    val original = upload()
    val p = new PendingLocation(original, IndexedSeq.empty, upload)
    assert(qp.enqueue(p).get(30, TimeUnit.SECONDS) == 0L)
    qp.close()
    assert(manifestOf(inner).entries.map(_.location) == Seq(original))
    assert(p.location == original, "the reported location is not the one in the manifest")
  }

  test("should report the re-uploaded location when the retry that carried it lost its reply after landing") {
    // Issue 14 item 7: a write that failed unapplied, a re-upload (the batch went stale meanwhile),
    // and a retry whose reply is lost after it landed. The reported location must be the copy the
    // manifest holds, not the stale original (which GC may delete).
    val inner = InMemoryStore.fresh()
    val clock = new osqueue.testing.ManualClock(System.currentTimeMillis())
    val upload = () => { val k = BatchNames.newKey("ingest", clock.nowMillis()); inner.put(k, Array[Byte](1)); k }
    val calls = new AtomicInteger()
    val lossy = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def putIfAbsent(k: String, b: Array[Byte]): CasOutcome = calls.getAndIncrement() match {
        case 0 if k == key => // times out unapplied; meanwhile the batch goes stale
          clock.advance(6.minutes.toMillis)
          throw new osqueue.StoreException("injected: timeout before applying")
        case 1 if k == key => // the retry, carrying the re-upload, lands; its reply is lost
          assert(inner.putIfAbsent(k, b).isInstanceOf[CasOutcome.Written])
          throw new osqueue.StoreException("injected: reply lost after applying")
        case _ => inner.putIfAbsent(k, b)
      }
    }
    val qp = new QueueProducer(new ManifestStore(lossy, key), fastRetry, clock, new MetricsRegistry, 10.minutes.toMillis)
    val original = upload()
    val p = new PendingLocation(original, IndexedSeq.empty, upload)
    assert(qp.enqueue(p).get(30, TimeUnit.SECONDS) == 0L)
    qp.close()
    val locations = manifestOf(inner).entries.map(_.location)
    assert(locations.size == 1 && locations.head != original, "the stale original was enqueued")
    assert(p.location == locations.head, "the reported location is not the one in the manifest")
  }

  test("should re-upload a batch older than half the grace period before enqueueing it") {
    val inner = InMemoryStore.fresh()
    val old = BatchNames.newKey("ingest", System.currentTimeMillis() - 6.minutes.toMillis)
    inner.put(old, Array[Byte](7))
    val upload = () => { val k = BatchNames.newKey("ingest", System.currentTimeMillis()); inner.put(k, Array[Byte](7)); k }
    val p = new PendingLocation(old, IndexedSeq.empty, upload)
    val a = appender(inner)
    a.enqueue(p).get(30, TimeUnit.SECONDS)
    a.close()
    val locations = manifestOf(inner).entries.map(_.location)
    assert(locations == Seq(p.location) && p.location != old)
  }

  /** A store whose first manifest CAS runs `race` (with the write applied or not) and then loses its reply. */
  private def racingStore(inner: InMemoryStore, applyFirst: Boolean)(race: => Unit): ObjectStore =
    new FaultInjectingStore(inner, (_, _) => Fault.None) {
      private val calls = new AtomicInteger()
      override def putIfVersionMatches(k: String, b: Array[Byte], v: ObjectVersion): CasOutcome =
        if (k == key && calls.getAndIncrement() == 0) {
          if (applyFirst) assert(inner.putIfVersionMatches(k, b, v).isInstanceOf[CasOutcome.Written])
          race
          throw new osqueue.StoreException("injected: reply lost")
        } else super.putIfVersionMatches(k, b, v)
    }

  test("should learn from the dequeue receipts that a write the consumer already dequeued landed") {
    val inner = InMemoryStore.fresh()
    val a0 = appender(inner); a0.enqueue(pending(inner)).get(); a0.close()
    val consumer = new QueueConsumer(new ManifestStore(inner, key), fastRetry, SystemClock, new MetricsRegistry)
    consumer.initialize(None)
    val metrics = new MetricsRegistry
    val a = appender(racingStore(inner, applyFirst = true)(consumer.dequeueThrough(1)), metrics)
    val mine = pending(inner)
    assert(a.enqueue(mine).get(30, TimeUnit.SECONDS) == 1L)
    a.close()
    val m = manifestOf(inner)
    assert(m.entries.isEmpty && m.nextSequence == 2, "appended again")
    assert(metrics.counterValue(MetricNames.AmbiguitiesResolvedByReceipts) == 1)
    val receipts = DequeueReceipts.decode(inner.get(key + DequeueReceipts.Suffix).get.bytes).get
    assert(receipts.first == 0 && receipts.locationAt(1).contains(mine.location))
  }

  test("should learn from the dequeue receipts that another write took the sequence, and append") {
    val inner = InMemoryStore.fresh()
    val a0 = appender(inner); a0.enqueue(pending(inner)).get()
    val consumer = new QueueConsumer(new ManifestStore(inner, key), fastRetry, SystemClock, new MetricsRegistry)
    consumer.initialize(None)
    val other = pending(inner)
    val a = appender(racingStore(inner, applyFirst = false) {
      a0.enqueue(other).get(); consumer.dequeueThrough(1) // sequence 1 is someone else's, and gone
    })
    val mine = pending(inner)
    assert(a.enqueue(mine).get(30, TimeUnit.SECONDS) == 2L)
    a.close(); a0.close()
    assert(manifestOf(inner).entries.map(_.location) == Seq(mine.location))
  }

  test("should read and write the golden dequeue receipts") {
    val bytes = Files.readAllBytes(osqueue.testing.RepoFiles.golden.resolve("receipts_v1.bin"))
    val expected = DequeueReceipts(7, Vector("ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch", "ingest/\u00fc.batch"))
    assert(DequeueReceipts.decode(bytes).contains(expected))
    assert(expected.encode.sameElements(bytes))
    assert(DequeueReceipts.decode(bytes.dropRight(1)).isEmpty && DequeueReceipts.decode(bytes :+ 1.toByte).isEmpty)
    val r = DequeueReceipts().extended(Seq(0L -> "a", 1L -> "b")).extended(Seq(2L -> "c", 3L -> "d"), maxCount = 3)
    assert(r == DequeueReceipts(1, Vector("b", "c", "d")))
    assert(r.extended(Seq(3L -> "d", 4L -> "e"), maxCount = 10) == DequeueReceipts(1, Vector("b", "c", "d", "e")))
    assert(r.extended(Seq(9L -> "x")) == DequeueReceipts(9, Vector("x")))
    // Another incarnation (a reset): its sequences start again, so the old receipts are dropped.
    assert(r.extended(Seq(2L -> "y"), Some(5L)) == DequeueReceipts(2, Vector("y"), Some(5L)))
    val v2 = Files.readAllBytes(osqueue.testing.RepoFiles.golden.resolve("receipts_v2.bin"))
    val ofIncarnation = expected.copy(incarnation = Some(42L))
    assert(DequeueReceipts.decode(v2).contains(ofIncarnation) && ofIncarnation.encode.sameElements(v2))
    assert(DequeueReceipts.decode(v2.dropRight(1)).isEmpty && DequeueReceipts.decode(v2 :+ 1.toByte).isEmpty)
  }

  test("receipts of the queue before a reset never judge a write lost: AmbiguousCommit, not a duplicate") {
    val inner = InMemoryStore.fresh()
    val a0 = appender(inner); (0 until 3).foreach(_ => a0.enqueue(pending(inner)).get()); a0.close()
    val before = new QueueConsumer(new ManifestStore(inner, key), fastRetry, SystemClock, new MetricsRegistry)
    before.initialize(None); before.dequeueThrough(2) // receipts name other batches at 0..2
    inner.delete(key) // the reset
    val newcomer = appender(inner); newcomer.enqueue(pending(inner)).get(); newcomer.close() // the new queue's 0
    val noReceipts = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def put(k: String, b: Array[Byte]): Unit =
        if (k.endsWith(DequeueReceipts.Suffix)) throw new osqueue.StoreException("injected: receipts write failed")
        else super.put(k, b)
    }
    val after = new QueueConsumer(new ManifestStore(noReceipts, key), fastRetry, SystemClock, new MetricsRegistry)
    after.initialize(None)
    // Ours lands at 1 of the new queue, its reply is lost, and it is dequeued without receipts.
    val a = appender(racingStore(inner, applyFirst = true)(after.dequeueThrough(1)))
    val e = intercept[java.util.concurrent.ExecutionException](a.enqueue(pending(inner)).get(30, TimeUnit.SECONDS))
    a.close()
    assert(e.getCause.isInstanceOf[AmbiguousCommitException], e.getCause)
    val m = manifestOf(inner)
    assert(m.entries.isEmpty && m.nextSequence == 2, "appended twice")
  }

  test("a write sent before a reset is decided by its own incarnation's receipts, not appended into the new queue") {
    val inner = InMemoryStore.fresh()
    val a0 = appender(inner); a0.enqueue(pending(inner)).get(); a0.close()
    val consumer = new QueueConsumer(new ManifestStore(inner, key), fastRetry, SystemClock, new MetricsRegistry)
    consumer.initialize(None)
    val newcomer = appender(inner)
    val first = pending(inner)
    val a = appender(racingStore(inner, applyFirst = true) {
      consumer.dequeueThrough(1) // ours landed at 1: receipts of its incarnation
      inner.delete(key) // the reset
      newcomer.enqueue(first).get() // the new queue's next sequence is 1, our write's
    })
    assert(a.enqueue(pending(inner)).get(30, TimeUnit.SECONDS) == 1L)
    a.close(); newcomer.close()
    assert(manifestOf(inner).entries.map(_.location) == Seq(first.location), "appended into the new queue too")
  }

  test("should check a slow re-upload again and give up, enqueueing nothing, when every copy is stale") {
    val inner = InMemoryStore.fresh()
    val clock = new osqueue.testing.ManualClock(System.currentTimeMillis())
    val qp = new QueueProducer(new ManifestStore(inner, key), fastRetry, clock, new MetricsRegistry, 10.minutes.toMillis)
    /** An upload whose PUT takes `slowMs` by the producer's monotonic clock. */
    def uploadTaking(slowMs: Long) = () => {
      val k = BatchNames.newKey("ingest", clock.nowMillis()); inner.put(k, Array[Byte](7)); clock.advanceMonotonic(slowMs); k
    }
    def stalePending(reupload: () => String) = {
      val p = new PendingLocation(uploadTaking(0)(), IndexedSeq.empty, reupload, uploadStartedNanos = Some(clock.nanoTime()))
      clock.advanceMonotonic(6.minutes.toMillis) // its manifest write starts 6 minutes after its PUT did
      p
    }
    // The first re-upload takes 6 minutes: it is uploaded again; the second is quick.
    val durations = Iterator(6.minutes.toMillis, 0L)
    val reuploads = scala.collection.mutable.ArrayBuffer.empty[String]
    val slowOnce = stalePending(() => { val k = uploadTaking(durations.next())(); reuploads += k; k })
    qp.enqueue(slowOnce).get(30, TimeUnit.SECONDS)
    assert(reuploads.size == 2 && slowOnce.location == reuploads(1))
    // Every copy stale: a StoreException after MaxReuploads re-uploads, and the manifest unchanged.
    var uploads = 0
    val alwaysSlow = stalePending(() => { uploads += 1; uploadTaking(6.minutes.toMillis)() })
    val e = intercept[java.util.concurrent.ExecutionException](qp.enqueue(alwaysSlow).get(30, TimeUnit.SECONDS))
    assert(e.getCause.isInstanceOf[osqueue.StoreException] && e.getCause.getMessage.contains("half the GC grace period"))
    assert(uploads == 3)
    qp.close()
    assert(manifestOf(inner).entries.map(_.location) == Seq(slowOnce.location))
  }

  test("should jitter backoff within [0, min(max, base * 2^attempt)]") {
    val p = RetryPolicy(baseDelayMs = 10, maxDelayMs = 1000)
    assert(p.delayMs(0, () => 0.999) <= 10)
    assert(p.delayMs(3, () => 0.999) <= 80 && p.delayMs(3, () => 0.999) >= 79)
    assert(p.delayMs(20, () => 0.5) == 500)
    assert(p.delayMs(5, () => 0.0) == 0)
  }
}
