package osqueue.producer

import java.nio.file.{Files, Path}
import java.util.concurrent.atomic.AtomicInteger

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._
import scala.util.Try

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{
  AmbiguousCommitException,
  CorruptSpoolException,
  InvalidConfigException,
  QueueFullException,
  StoreException,
  SystemClock
}
import osqueue.format.{BatchCodec, BatchIntegrity, Compression, ManifestCodec, ManifestFooter, MetadataItem}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.queue.{ManifestStore, PendingLocation, QueueProducer, RetryPolicy}
import osqueue.store._
import osqueue.testing.ForwardingStore

/**
 * The producer spool (docs/adr/0006 part 2) on the JVM, case for case as tests/python/test_spool.py:
 * torn tails, the lock, replay after a crash at each step (the log a crash leaves, written by hand),
 * truncation, the cap, an outage (in-memory store, no server). The kill -9 and the cross-language
 * replays are in integration/test_spool_interop.py.
 */
class SpoolSuite extends AnyFunSuite {
  private val Key = "ingest/manifest"
  private val Fast = RetryPolicy(baseDelayMs = 1, maxDelayMs = 10)

  private def values(store: ObjectStore): Seq[String] = store.get(Key).toSeq.flatMap { o =>
    ManifestCodec.decode(o.bytes, Key).entries.flatMap(e => BatchCodec.decode(store.get(e.location).get.bytes, "b"))
      .map(new String(_))
  }

  private def producer(store: ObjectStore, dir: Path, metrics: MetricsRegistry = new MetricsRegistry,
      config: ProducerConfig => ProducerConfig = identity): Producer =
    new Producer(store, config(ProducerConfig(flushInterval = 10.millis, retry = Fast, spoolDir = Some(dir.toString))),
      SystemClock, metrics)

  private def tmp(): Path = Files.createTempDirectory("spool")
  private def spoolWith(dir: Path, records: Seq[SpoolRecord]): Unit =
    Files.write(dir.resolve(SpoolLog.logFileName(0)), records.map(SpoolLog.encodeRecord).reduce(_ ++ _))

  /** Polls until `cond` holds, failing after `seconds`. */
  private def eventually(seconds: Double)(cond: => Boolean): Unit = {
    val deadline = System.nanoTime() + (seconds * 1e9).toLong
    while (!cond) {
      assert(System.nanoTime() < deadline, "condition not met in time")
      Thread.sleep(5)
    }
  }

  private val Samples = Seq[SpoolRecord](
    EntriesRecord(7, 1700000000000L, "meta".getBytes, Seq("a", "", "ccc").map(_.getBytes)),
    BatchRecord(3, 5, 7, 123, 0xDEADBEEFL, "ingest/01ARZ3NDEKTSV4RRFFQ69G5FAV.batch"),
    AttemptRecord(42, Seq(3L), Seq("ingest/01ARZ3NDEKTSV4RRFFQ69G5FAV.batch")),
    LandedRecord(42, Seq(3L)),
    DroppedRecord(8, 9))

  test("should cut a torn tail off at open") {
    val dir = tmp()
    val whole = SpoolLog.encodeRecord(Samples.head)
    Files.write(dir.resolve(SpoolLog.logFileName(0)), whole ++ whole.dropRight(3)) // written, never forced
    val spool = new Spool(dir, clock = SystemClock)
    try {
      assert(spool.unbatchedCalls().map(_.callNo) == Seq(7L))
      assert(Files.readAllBytes(dir.resolve(SpoolLog.logFileName(0))).sameElements(whole))
    } finally spool.close()
  }

  Seq(5, 9, 20).foreach { offset => // the length, the type, the body
    test(s"should refuse damage in the middle (byte $offset) as CorruptSpool, not a torn tail") {
      val dir = tmp()
      val data = Samples.map(SpoolLog.encodeRecord).reduce(_ ++ _)
      data(offset) = (data(offset) ^ 0x40).toByte
      val path = dir.resolve(SpoolLog.logFileName(0))
      Files.write(path, data)
      val e = intercept[CorruptSpoolException](new Spool(dir, clock = SystemClock))
      assert(e.path == path.toString && e.offset == 0 && e.getMessage.contains("move the file away"))
      assert(Files.readAllBytes(path).sameElements(data)) // nothing cut
      new Spool(dir.resolve("other"), clock = SystemClock).close()
      Files.delete(path)
      new Spool(dir, clock = SystemClock).close() // the lock was released
    }
  }

  test("should refuse a second owner naming the first, and keep the writer id") {
    val dir = tmp()
    val first = new Spool(dir, clock = SystemClock)
    val writerId =
      try {
        val e = intercept[InvalidConfigException](new Spool(dir, clock = SystemClock))
        assert(e.option == "spoolDir" && e.getMessage.contains(s"owned by pid ${ProcessHandle.current().pid()} on"), e)
        first.writerId
      } finally first.close()
    val again = new Spool(dir, clock = SystemClock)
    assert(again.writerId == writerId && writerId.length == 32 && writerId.forall(c => Character.digit(c, 16) >= 0))
    again.close()
  }

  test("should deliver everything once with durability local and truncate the log (local store)") {
    val store = new LocalFileSystemStore(tmp())
    val p = producer(store, tmp(), config = _.copy(durability = "local"))
    val handles = (0 until 40).map(i => p.produce(Seq(s"e$i".getBytes), "m".getBytes))
    p.flush()
    assert(handles.forall(h => h.isDone && h.result().exists(_.isSuccess)))
    val spool = p.spool.get
    // the handles complete at the CAS; LANDED's force and truncation follow off the callers' path (issue 28)
    eventually(10)(spool.currentLiveBytes == 0 && spool.logFiles.size == 1)
    assert(spool.currentLiveBytes == 0)
    assert(spool.logFiles.size == 1 && Files.size(spool.logFiles.head) == 0)
    p.close()
    assert(values(store) == (0 until 40).map(i => s"e$i"))
    ManifestCodec.decode(store.get(Key).get.bytes, Key).entries.foreach { e => // each carries its integrity record
      val data = store.get(e.location).get.bytes
      assert(BatchIntegrity.of(e.extension).map(i => (i.byteLength, i.batchCrc32)) ==
        Some((data.length.toLong, SpoolUploader.crc(data))))
    }
  }

  test("should need a spool for durability local and check the spool options") {
    val dir = tmp()
    assert(intercept[InvalidConfigException](ProducerConfig(durability = "local")).option == "durability")
    assert(intercept[InvalidConfigException](ProducerConfig(spoolDir = Some(dir.toString),
        spoolFullPolicy = "newest")).option == "spoolFullPolicy")
    assert(intercept[InvalidConfigException](ProducerConfig(spoolMaxBytes = 0)).option == "spoolMaxBytes")
    new Producer(InMemoryStore.fresh(), ProducerConfig(spoolDir = Some(dir.toString))).close()
    new Producer(InMemoryStore.fresh(), ProducerConfig(spoolDir = Some(dir.toString))).close() // released
  }

  private val Calls = (0 until 3).map(i => EntriesRecord(i.toLong, 1700000000000L, Array.emptyByteArray, Seq(s"c$i".getBytes)))
  private val Loc = "ingest/01JD0000000000000000000000.batch"

  private def namedBatch(store: ObjectStore, calls: Seq[EntriesRecord], location: String): BatchRecord = {
    val data = BatchCodec.encode(calls.flatMap(_.entries), Compression.None)
    store.put(location, data)
    BatchRecord(0, calls.head.callNo, calls.last.callNo, data.length.toLong, SpoolUploader.crc(data), location)
  }

  Seq("entries", "batch", "attempt", "cas-landed").foreach { step =>
    test(s"should append every call once after a crash right after the $step step") {
      val store = InMemoryStore.fresh()
      val dir = tmp()
      var records: Seq[SpoolRecord] = Calls
      if (step != "entries") {
        records :+= namedBatch(store, Calls.take(2), Loc)
        // the landed case: the CAS went in, the process died before its LANDED record
        if (step == "attempt" || step == "cas-landed") records :+= AttemptRecord(0, Seq(0L), Seq(Loc))
        if (step == "cas-landed") {
          val q = new QueueProducer(new ManifestStore(store, Key), RetryPolicy(), SystemClock, new MetricsRegistry, 600000)
          val items = IndexedSeq(MetadataItem(0, 1700000000000L, Array.emptyByteArray),
            MetadataItem(1, 1700000000000L, Array.emptyByteArray))
          q.enqueue(new PendingLocation(Loc, items, () => Loc, uploadStartedNanos = Some(SystemClock.nanoTime()))).get()
          q.close()
        }
      }
      spoolWith(dir, records)
      val metrics = new MetricsRegistry
      val p = producer(store, dir, metrics)
      p.flush(); p.close()
      assert(values(store) == Seq("c0", "c1", "c2"))
      assert(metrics.counterValue(MetricNames.SpoolReplayedBatches) == (if (step == "entries") 0 else 1))
      val again = producer(store, dir) // settled: a second restart adds nothing
      again.flush(); again.close()
      assert(values(store) == Seq("c0", "c1", "c2"))
    }
  }

  test("should refuse an undecidable replay as AmbiguousCommit and keep the batch spooled") {
    val store = InMemoryStore.fresh()
    // sequences 0..4 were appended and all dequeued; no receipts
    store.put(Key, ManifestCodec.encodeFooter(ManifestFooter(0, 5, 0)))
    val dir = tmp()
    spoolWith(dir, Calls.take(2) ++ Seq(namedBatch(store, Calls.take(2), Loc), AttemptRecord(0, Seq(0L), Seq(Loc))))
    val p = producer(store, dir)
    assert(intercept[AmbiguousCommitException](p.flush()).getMessage.contains("sequence 0"))
    intercept[AmbiguousCommitException](p.close())
    assert(values(store).isEmpty) // never appended on a guess
    val again = new Spool(dir, clock = SystemClock)
    assert(again.pendingBatches().map(_.batchNo) == Seq(0L))
    again.close()
  }

  /** The store is unreachable while `down` is set (every call throws StoreException). */
  private class Outage(inner: ObjectStore) extends ForwardingStore(inner) {
    @volatile var down = false
    val failed = new AtomicInteger()
    private def check(): Unit = if (down) {
      failed.incrementAndGet(); throw new StoreException("unreachable (test outage)")
    }
    override def get(key: String): Option[VersionedObject] = { check(); super.get(key) }
    override def put(key: String, bytes: Array[Byte]): Unit = { check(); super.put(key, bytes) }
    override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = { check(); super.putIfAbsent(key, bytes) }
    override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
      check(); super.putIfVersionMatches(key, bytes, expected)
    }
  }

  test("should only delay delivery during an outage") {
    val store = new Outage(InMemoryStore.fresh())
    val metrics = new MetricsRegistry
    // More calls than maxBufferedInputs wait: the spool's cap bounds them, not the in-memory buffer.
    val p = producer(store, tmp(), metrics, _.copy(durability = "local", maxBufferedInputs = 5, flushSizeBytes = 8))
    p.produce(Seq("before".getBytes)).awaitDurable(5.seconds)
    store.down = true
    val handles = (0 until 20).map(i => p.produce(Seq(s"e$i".getBytes))) // each returns: forced locally
    eventually(5)(store.failed.get >= 3)
    assert(!handles.exists(_.isDone))
    assert(metrics.gauge(MetricNames.SpoolBytes).get >= 20 * 2)
    eventually(5) { p.produce(Seq("x".getBytes)); metrics.gauge(MetricNames.SpoolOldestEntryAgeSeconds).get > 0 }
    store.down = false
    handles.foreach(_.awaitDurable(10.seconds))
    p.flush()
    eventually(10)(metrics.gauge(MetricNames.SpoolBytes).get == 0) // settled once LANDED is forced
    p.close()
    val delivered = values(store)
    assert(delivered.take(21) == Seq("before") ++ (0 until 20).map(i => s"e$i") && delivered.drop(21).forall(_ == "x"))
    assert(ManifestCodec.decode(store.get(Key).get.bytes, Key).entries.size >= 20 * 2 / 8) // batches of flushSizeBytes
  }

  test("should retry manifest writes of unknown outcome past the retry budget") {
    @volatile var down = false
    val store = new ForwardingStore(InMemoryStore.fresh()) {
      override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome =
        if (down && key == Key) throw new StoreException("timed out after the request was sent (test): outcome unknown")
        else super.putIfVersionMatches(key, bytes, expected)
    }
    val budget = RetryPolicy(baseDelayMs = 1, maxDelayMs = 5, maxElapsedMs = 100)
    val p = producer(store, tmp(), config = _.copy(durability = "local", retry = budget))
    p.produce(Seq("first".getBytes)).awaitDurable(5.seconds)
    down = true
    val handle = p.produce(Seq("second".getBytes))
    val pastBudgets = System.nanoTime() + 3 * budget.maxElapsedMs * 1000000L
    eventually(10)(System.nanoTime() >= pastBudgets && p.spool.get.attemptsOf(1).nonEmpty)
    assert(!handle.isDone) // the CAS loop gave up (AmbiguousCommit) about 3 times; the spool did not
    down = false
    handle.awaitDurable(10.seconds)
    p.close()
    assert(values(store) == Seq("first", "second"))
  }

  test("should raise QueueFull naming the spool under backpressure and drop nothing") {
    val store = new Outage(InMemoryStore.fresh())
    val dir = tmp()
    val p = producer(store, dir, config = _.copy(spoolMaxBytes = 200, spoolFullTimeout = 200.millis))
    store.down = true
    val handles = scala.collection.mutable.ArrayBuffer.empty[WriteHandle]
    val e = intercept[QueueFullException]((0 until 50).foreach(_ => handles += p.produce(Seq(Array.fill(40)('x'.toByte)))))
    assert(e.getMessage.contains(dir.toString) && e.getMessage.contains("spoolMaxBytes"), e)
    assert(handles.nonEmpty && handles.size < 50)
    store.down = false
    p.flush(); p.close()
    assert(values(store).size == handles.size)
  }

  test("should drop exactly what drop_oldest counts") {
    val store = new Outage(InMemoryStore.fresh())
    val metrics = new MetricsRegistry
    // One batch in flight at a time: the calls behind it stay unbatched, so droppable. The first call
    // alone is that batch (its PUT failing) before the others come; else a slow uploader could batch
    // every call the cap holds, leaving nothing to drop.
    val p = producer(store, tmp(), metrics, _.copy(spoolMaxBytes = 300, spoolFullPolicy = "drop_oldest"))
    store.down = true
    val first = p.produce(Seq(("000" + "x" * 37).getBytes))
    val deadline = System.nanoTime() + 10.seconds.toNanos
    while (store.failed.get() == 0 && System.nanoTime() < deadline) Thread.sleep(5)
    assert(store.failed.get() > 0, "the first batch's PUT was never tried")
    val handles = first +: (1 until 30).map(i => p.produce(Seq((f"$i%03d" + "x" * 37).getBytes)))
    store.down = false
    p.flush(); p.close()
    val dropped = handles.filter(h => h.result().exists(_.isFailure))
    val delivered = values(store)
    assert(dropped.nonEmpty && metrics.counterValue(MetricNames.SpoolDroppedEntries) == dropped.size)
    assert(delivered.size + dropped.size == 30 && delivered.distinct == delivered)
    assert(dropped.forall(h => Try(h.awaitDurable(1.second)).failed.get.isInstanceOf[QueueFullException]))
    assert(dropped.forall(h => Try(h.awaitDurable(1.second)).failed.get.getMessage.contains("dropped by drop_oldest")))
  }

  test("should start in an outage and replay when the store is back (the data prefix claimed later)") {
    // Issue 28's chaos case: a producer restarted on its spool while the store is unreachable. It used to
    // fail in its constructor (the data prefix's owner claim, a GET); it now claims from its upload thread.
    val store = new Outage(InMemoryStore.fresh())
    val dir = tmp()
    val first = producer(store, dir, config = _.copy(durability = "local"))
    first.produce(Seq("first".getBytes)).awaitDurable(5.seconds)
    first.close()
    store.down = true
    val p = producer(store, dir, config = _.copy(durability = "local"))
    val handle = p.produce(Seq("in the outage".getBytes)) // returned: forced locally
    eventually(5)(store.failed.get >= 2)
    assert(!handle.isDone)
    store.down = false
    handle.awaitDurable(10.seconds)
    p.close()
    assert(values(store) == Seq("first", "in the outage"))
  }

  /** Counts the manifest's conditional writes and the entries each added; holds them while `gate` is closed. */
  private class ManifestWrites(inner: ObjectStore) extends ForwardingStore(inner) {
    @volatile var held = new java.util.concurrent.CountDownLatch(0)
    val blocked = new java.util.concurrent.CountDownLatch(1) // a manifest write reached `held`
    val sizes = new java.util.concurrent.ConcurrentLinkedQueue[Int]()
    val batchPuts = new AtomicInteger()
    private def entries(bytes: Array[Byte]): Int = ManifestCodec.decode(bytes, Key).entries.size
    private def counted(key: String, bytes: Array[Byte])(write: => CasOutcome): CasOutcome =
      if (key != Key) write
      else {
        blocked.countDown()
        held.await(10, java.util.concurrent.TimeUnit.SECONDS)
        val before = inner.get(Key).fold(0)(o => entries(o.bytes))
        val outcome = write
        if (outcome.isInstanceOf[CasOutcome.Written]) sizes.add(entries(bytes) - before)
        outcome
      }
    override def put(key: String, bytes: Array[Byte]): Unit = {
      if (key.endsWith(".batch")) batchPuts.incrementAndGet()
      super.put(key, bytes)
    }
    override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome =
      counted(key, bytes)(super.putIfAbsent(key, bytes))
    override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome =
      counted(key, bytes)(super.putIfVersionMatches(key, bytes, expected))
  }

  private val Six = (0 until 6).map(i => EntriesRecord(i.toLong, 1700000000000L, Array.emptyByteArray, Seq(s"c$i".getBytes)))
  private val Locs = (0 until 3).map(i => f"ingest/01JD00000000000000000000$i%02d.batch")
  private def threeBatches(store: ObjectStore): Seq[BatchRecord] = (0 until 3).map { i =>
    namedBatch(store, Six.slice(2 * i, 2 * i + 2), Locs(i)).copy(batchNo = i.toLong)
  }
  private def locations(store: ObjectStore): Seq[String] =
    ManifestCodec.decode(store.get(Key).get.bytes, Key).entries.map(_.location)

  test("should replay batches PUT before a crash in one manifest write, in spool order") {
    // Issue 28: the uploader appends several batches per manifest write. A crash after three BATCH records
    // and their PUTs, before any ATTEMPT: the replay appends the three in one write, in batch order, once.
    val inner = InMemoryStore.fresh()
    val dir = tmp()
    spoolWith(dir, Six ++ threeBatches(inner))
    val store = new ManifestWrites(inner)
    val metrics = new MetricsRegistry
    val p = producer(store, dir, metrics)
    p.flush(); p.close()
    assert(store.sizes.toArray.toSeq == Seq(3))
    assert(locations(inner) == Locs)
    assert(values(inner) == (0 until 6).map(i => s"c$i"))
    assert(metrics.counterValue(MetricNames.SpoolReplayedBatches) == 3)
    val again = producer(store, dir) // settled: a second restart adds nothing
    again.flush(); again.close()
    assert(store.sizes.toArray.toSeq == Seq(3) && values(inner) == (0 until 6).map(i => s"c$i"))
  }

  Seq(true, false).foreach { landed =>
    test(s"should append each batch of a several-batch write once after a crash after its ATTEMPT (landed=$landed)") {
      // One ATTEMPT record names the three batches of one write. Whether that write landed (the process died
      // before LANDED) or not, the replay resolves the three as that one write: each batch once, in order.
      val inner = InMemoryStore.fresh()
      val dir = tmp()
      spoolWith(dir, Six ++ threeBatches(inner) :+ AttemptRecord(0, Seq(0L, 1L, 2L), Locs))
      if (landed) {
        val q = new QueueProducer(new ManifestStore(inner, Key), RetryPolicy(), SystemClock, new MetricsRegistry, 600000)
        val items = IndexedSeq(MetadataItem(0, 1700000000000L, Array.emptyByteArray),
          MetadataItem(1, 1700000000000L, Array.emptyByteArray))
        Locs.foreach(l => q.enqueue(new PendingLocation(l, items, () => l, uploadStartedNanos = Some(SystemClock.nanoTime()))).get())
        q.close()
      }
      val store = new ManifestWrites(inner)
      val p = producer(store, dir)
      p.flush(); p.close()
      assert(store.sizes.toArray.toSeq == (if (landed) Seq() else Seq(3)))
      // not landed: their ULIDs are old, so they are PUT again under fresh names (stale, docs/format.md §6)
      if (landed) assert(locations(inner) == Locs) else assert((locations(inner).toSet -- Locs).size == 3)
      assert(values(inner) == (0 until 6).map(i => s"c$i"))
      val again = new Spool(dir, clock = SystemClock)
      assert(again.pendingBatches().isEmpty && again.unbatchedCalls().isEmpty)
      again.close()
    }
  }

  test("should PUT ahead and append several spooled batches per manifest write") {
    // Issue 28: while a manifest write is in flight, the next batches are PUT and then go into the next
    // write together (as an unspooled producer's group commit does). It used to be one write per batch,
    // each waited for before the next batch's PUT.
    val inner = InMemoryStore.fresh()
    val store = new ManifestWrites(inner)
    val gate = new java.util.concurrent.CountDownLatch(1)
    store.held = gate // the first manifest write waits
    val p = producer(store, tmp(), config = _.copy(durability = "local", flushSizeBytes = 1))
    val first = p.produce(Seq("e0".getBytes))
    assert(store.blocked.await(10, java.util.concurrent.TimeUnit.SECONDS), "the first manifest write never started")
    val handles = first +: (1 until 5).map(i => p.produce(Seq(s"e$i".getBytes))) // one batch each
    val deadline = System.nanoTime() + 10000000000L
    while (store.batchPuts.get < 5 && System.nanoTime() < deadline) Thread.sleep(5)
    val putsWhileBlocked = store.batchPuts.get
    gate.countDown()
    p.flush()
    handles.foreach(_.awaitDurable(10.seconds))
    p.close()
    assert(putsWhileBlocked == 5)
    assert(store.sizes.toArray.toSeq == Seq(1, 4)) // the held write (e0 alone), then every batch PUT meanwhile
    assert(values(inner) == (0 until 5).map(i => s"e$i"))
  }
}
