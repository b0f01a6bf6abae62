package osqueue.queue

import java.nio.{ByteBuffer, ByteOrder}
import java.nio.file.Files
import java.util.Base64
import java.util.concurrent.{CopyOnWriteArrayList, ExecutionException, Executors, TimeUnit}
import java.util.concurrent.atomic.AtomicBoolean

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.scalatest.funsuite.AnyFunSuite

import osqueue.{Clock, CorruptManifestException, DataLossException, InvalidConfigException, QueueFullException, SystemClock}
import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format._
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.producer.ProducerConfig
import osqueue.store.{CasOutcome, InMemoryStore, ObjectStore, ObjectVersion, VersionedObject}
import osqueue.testing.{FaultInjectingStore, ForwardingStore, ManualClock, RepoFiles}
import osqueue.testing.FaultInjectingStore.Fault

/**
 * Cooperative commit (docs/adr/0007 part 1) on the JVM: intents, writer sequences, and many writers
 * with injected CAS losses on the in-memory store. No batch may ever be appended twice. Mirrors
 * tests/python/test_cooperative_commit.py case for case.
 */
class CooperativeCommitSuite extends AnyFunSuite {
  private val Key = "ingest/manifest"
  private val Fast = RetryPolicy(baseDelayMs = 1, maxDelayMs = 5, maxAttempts = 200)
  private val W1 = WriterSequence.hex((0 until 16).map(_.toByte).toArray)
  private val W2 = WriterSequence.hex((16 until 32).map(_.toByte).toArray)
  private val Ulid = "01J5T4RTZ9Y8X7W6V5T4S3R2Q1"
  private val Grace = 10.minutes.toMillis

  private def entries(store: ObjectStore): IndexedSeq[ManifestEntry] = {
    val o = store.get(Key).get
    new ManifestStore(store, Key).decode(Snapshot(o.bytes, Some(o.version))).entries
  }
  private def writers(store: ObjectStore): Map[String, WriterRecord] =
    WriterSequence.writersOf(ManifestHead.parse(store.get(Key).get.bytes, Key).sections, Key)

  private def coop(store: ObjectStore, metrics: MetricsRegistry = new MetricsRegistry, clock: Clock = SystemClock,
      segmentEntries: Int = ManifestHead.DefaultSegmentEntries, wait: QueueFullWait = QueueFullWait()) =
    new QueueProducer(new ManifestStore(store, Key), Fast, clock, metrics, Grace, segmentEntries = segmentEntries,
      queueFullWait = wait, commitMode = CooperativeCommit.Cooperative)

  private def enqueue(qp: QueueProducer, location: String, ext: Array[Byte] = Array.emptyByteArray): (Long, String) = {
    val p = new PendingLocation(location, IndexedSeq.empty, () => fail("no re-upload expected"), ext)
    val s =
      try qp.enqueue(p).get(60, TimeUnit.SECONDS)
      catch { case e: ExecutionException => throw e.getCause }
    (s, p.location)
  }

  /** As if it saw a conflict just now: it announces before its first CAS (step 0 skipped). */
  private def forceCooperative(qp: QueueProducer): Unit = qp.cooperative.get.sawConflict()

  /**
   * As if another writer wrote the head since: its next group is announced (the writer of the head commits the
   * next round without an intent, ADR 0007 session 15).
   */
  private def notTheHeadsWriter(qp: QueueProducer): Unit = qp.cooperative.get.forgetOwnHead()

  private def counter(m: MetricsRegistry, name: String, labels: (String, String)*): Long = m.counterValue(name, labels: _*)

  // -- bytes ---------------------------------------------------------------------------------------

  test("an intent round-trips and its name matches") {
    val es = IndexedSeq(
      NewEntry("ingest/a.batch", IndexedSeq(MetadataItem(0, 5, "m".getBytes)),
        BatchIntegrity.record(10, 0xDEADBEEFL) ++ WriterSequence.sequenceRecord(WriterSequence.unhex(W1), 7)),
      NewEntry("ingest/b.batch", IndexedSeq.empty,
        BatchIntegrity.record(3, 1) ++ WriterSequence.sequenceRecord(WriterSequence.unhex(W1), 8)))
    val data = IntentCodec.encodeIntent(W1, 7, es)
    val key = IntentCodec.intentKey(Key, Ulid, W1, 7, 2)
    val name = IntentCodec.parseIntentName(Key, key)
    assert(name.map(n => (n.writerId, n.firstBatch, n.count)).contains((W1, 7L, 2)))
    val intent = IntentCodec.decodeIntent(data, key, name)
    assert(intent.writerId == W1 && intent.firstBatch == 7 && intent.lastBatch == 8)
    assert(intent.entries.map(e => (e.location, e.metadata, e.extension.toSeq)) ==
      es.map(e => (e.location, e.metadata, e.extension.toSeq)))
    assert(WriterSequence.sequenceOf(intent.entries(1).extension).contains((W1, 8L)))
  }

  for (damage <- Seq("bad_crc", "bad_magic", "count_zero", "name_mismatch", "trailing"))
    test(s"an intent that does not decode exactly is rejected: $damage") {
      val data = IntentCodec.encodeIntent(W1, 0, Seq(NewEntry("ingest/a.batch", IndexedSeq.empty, BatchIntegrity.record(1, 2))))
      var name = IntentCodec.parseIntentName(Key, IntentCodec.intentKey(Key, Ulid, W1, 0, 1))
      def recrc(b: Array[Byte]): Array[Byte] = {
        val body = b.dropRight(4)
        body ++ ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(BatchIntegrity.crc32(body).toInt).array()
      }
      val raw = damage match {
        case "bad_crc" => val d = data.clone(); d(d.length - 1) = (d(d.length - 1) ^ 1).toByte; d
        case "bad_magic" => val d = data.clone(); "OSQX".getBytes.copyToArray(d, 0); recrc(d)
        case "count_zero" => val d = data.clone(); d(29) = 0; d(30) = 0; recrc(d)
        case "trailing" => recrc(data.dropRight(4) ++ "x".getBytes ++ new Array[Byte](4))
        case _ => name = IntentCodec.parseIntentName(Key, IntentCodec.intentKey(Key, Ulid, W2, 0, 1)); data
      }
      intercept[CorruptManifestException](IntentCodec.decodeIntent(raw, "k", name))
    }

  test("the writers section round-trips and rejects unsorted ids") {
    val recs = Seq(WriterRecord(W2, 3, 10), WriterRecord(W1, 0, 20))
    val body = WriterSequence.encodeWriters(recs)
    assert(WriterSequence.decodeWriters(body, Key) == Map(W1 -> recs(1), W2 -> recs(0)))
    val swapped = body.take(4) ++ body.drop(4 + 32) ++ body.slice(4, 4 + 32)
    val e = intercept[CorruptManifestException](WriterSequence.decodeWriters(swapped, Key))
    assert(e.getMessage.contains("increase"))
  }

  test("commitMode is validated") {
    val e1 = intercept[InvalidConfigException](coopMode("broker", ManifestHead.DefaultSegmentEntries))
    assert(e1.getMessage.contains("commitMode"))
    val e2 = intercept[InvalidConfigException](coopMode("cooperative", Int.MaxValue))
    assert(e2.getMessage.contains("RFC v1"))
    val e3 = intercept[InvalidConfigException](ProducerConfig(commitMode = "cooperative", spoolDir = Some("/tmp/x")))
    assert(e3.getMessage.contains("commitMode") && e3.getMessage.contains("spool"))
    assert(ProducerConfig(commitMode = "cooperative").commitMode == "cooperative")
  }

  private def coopMode(mode: String, k: Int) =
    new QueueProducer(new ManifestStore(InMemoryStore.fresh(), Key), Fast, SystemClock, new MetricsRegistry, Grace,
      segmentEntries = k, commitMode = mode)

  // -- the protocol --------------------------------------------------------------------------------

  /** Runs `hook` once, right before the first conditional write of the manifest through it. */
  private final class HookedStore(inner: ObjectStore, hook: () => Unit) extends ForwardingStore(inner) {
    private val fired = new AtomicBoolean()
    private def maybe(key: String): Unit = if (key == Key && fired.compareAndSet(false, true)) hook()
    override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = { maybe(key); super.putIfAbsent(key, bytes) }
    override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
      maybe(key); super.putIfVersionMatches(key, bytes, expected)
    }
  }

  test("a loser finds its batch already appended by the winner") {
    val mem = InMemoryStore.fresh()
    val (ma, mb) = (new MetricsRegistry, new MetricsRegistry)
    var b: QueueProducer = null
    // A's intent is written: B's round lists it and appends it with its own.
    val sa = new HookedStore(mem, () => enqueue(b, "ingest/b.batch"))
    val a = coop(sa, ma)
    b = coop(new ForwardingStore(mem), mb)
    try {
      enqueue(b, "ingest/first.batch") // the manifest exists
      forceCooperative(a); forceCooperative(b)
      val (seq, loc) = enqueue(a, "ingest/a.batch")
      assert(entries(mem).map(_.location) == Seq("ingest/first.batch", "ingest/b.batch", "ingest/a.batch"))
      assert(seq == 2 && loc == "ingest/a.batch")
      assert(counter(mb, MetricNames.IntentsAppendedForOthers) == 1)
      assert(counter(ma, MetricNames.ManifestWrites, "role" -> "producer") == 0) // A never landed a write of its own
      assert(counter(ma, MetricNames.IntentsAnnounced) == 1)
      val ids = entries(mem).map(e => WriterSequence.sequenceOf(e.extension).get._1).toSet
      assert(ids.size == 2 && writers(mem).keySet == ids)
      a.cooperative.get.drainDeletes(); b.cooperative.get.drainDeletes() // deletes run off the commit's path
      assert(mem.list(Key + ".intents/").isEmpty) // the committer deleted the intent it appended
    } finally { a.close(); b.close() }
  }

  test("a waiter sends no CAS while an older intent has its committer") {
    // Only the producer with the oldest appendable intent commits a round (the designated committer); a younger
    // one reads the head until its group is in or the committer stalls. Before, every waiting producer read every
    // intent and sent a CAS each round: N-1 sure conflicts per landed write.
    val mem = InMemoryStore.fresh()
    val (ma, mb) = (new MetricsRegistry, new MetricsRegistry)
    val bLists = new java.util.concurrent.atomic.AtomicInteger()
    val bConditionals = new java.util.concurrent.atomic.AtomicInteger()
    val sb = new ForwardingStore(mem) {
      override def list(prefix: String): Seq[osqueue.store.ObjectInfo] = { bLists.incrementAndGet(); super.list(prefix) }
      override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
        bConditionals.incrementAndGet(); super.putIfVersionMatches(key, bytes, expected)
      }
    }
    var b: QueueProducer = null
    var bThread: Thread = null
    var bCasWhileAPending = -1
    // A's intent is out and its CAS built: B announces (younger) and waits.
    val sa = new HookedStore(mem,
      { () =>
        bThread = new Thread(() => enqueue(b, "ingest/b.batch"))
        bThread.start()
        val deadline = System.nanoTime() + 5000000000L
        while (bLists.get() == 0 && System.nanoTime() < deadline) Thread.sleep(5)
        Thread.sleep(200) // B LISTed at the 0.2 s takeover; it commits regardless only at 0.8 s
        bCasWhileAPending = bConditionals.get()
      })
    val a = coop(sa, ma)
    b = coop(sb, mb)
    try {
      enqueue(b, "ingest/first.batch") // the manifest exists (created, not a version-matched write)
      forceCooperative(a); forceCooperative(b)
      enqueue(a, "ingest/a.batch")
      bThread.join(10000)
      assert(bLists.get() > 0, "B never listed the intents")
      assert(bCasWhileAPending == 0, "B sent a CAS while A's older intent had its committer")
      assert(entries(mem).map(_.location) == Seq("ingest/first.batch", "ingest/a.batch", "ingest/b.batch"))
      // A's CAS was built before B announced, so B committed its own group once A's landed: no conflict anywhere.
      assert(counter(mb, MetricNames.ManifestConflicts, "role" -> "producer") == 0)
      assert(counter(ma, MetricNames.ManifestConflicts, "role" -> "producer") == 0)
    } finally { a.close(); b.close() }
  }

  /** The in-memory store with a bulk delete (as S3's DeleteObjects), counting its requests. */
  private final class BulkDeletes(inner: ObjectStore) extends ForwardingStore(inner) {
    val bulk = new CopyOnWriteArrayList[Seq[String]]()
    val single = new CopyOnWriteArrayList[String]()
    val puts = new CopyOnWriteArrayList[String]()
    override def deleteMany(keys: Seq[String]): Unit = { bulk.add(keys); keys.foreach(inner.delete) }
    override def delete(key: String): Unit = { single.add(key); super.delete(key) }
    override def put(key: String, bytes: Array[Byte]): Unit = { puts.add(key); super.put(key, bytes) }
  }

  test("the head's writer commits the next round without an intent and deletes what it appended at once") {
    // ADR 0007 session 15: the writer of the head is the next round's committer. Its group needs no intent (it
    // writes it itself), and it deletes the intents its CAS appended in one request; their owners delete nothing.
    // Before: it announced its own group (one PUT) and every owner deleted its own intent (one DELETE each).
    val mem = new BulkDeletes(InMemoryStore.fresh())
    val qp = coop(mem)
    try {
      enqueue(qp, "ingest/first.batch") // its CAS wrote the head
      announce(mem, W1, 0, Seq("ingest/w1-0.batch"))
      announce(mem, W2, 0, Seq("ingest/w2-0.batch"), "01J5T4RTZ9Y8X7W6V5T4S3R2Q2")
      forceCooperative(qp)
      mem.puts.clear()
      enqueue(qp, "ingest/mine.batch")
      qp.cooperative.get.drainDeletes()
      assert(entries(mem).map(_.location) ==
        Seq("ingest/first.batch", "ingest/mine.batch", "ingest/w1-0.batch", "ingest/w2-0.batch"))
      assert(!mem.puts.asScala.exists(_.contains(".intents/"))) // no intent of its own
      assert(mem.single.isEmpty && mem.bulk.size == 1 && mem.bulk.get(0).size == 2)
      assert(mem.list(Key + ".intents/").isEmpty)
    } finally qp.close()
  }

  test("a waiter whose group another appended leaves its intent to that committer") {
    // The owner of a group another writer's CAS appended deletes no intent (the committer does, in one request);
    // a group it committed itself it deletes with the rest of that round's intents.
    val mem = new BulkDeletes(InMemoryStore.fresh())
    val (a, b) = (coop(mem), coop(mem))
    try {
      enqueue(b, "ingest/first.batch")
      forceCooperative(a); forceCooperative(b)
      notTheHeadsWriter(b)
      val bDone = Executors.newSingleThreadExecutor().submit(() => enqueue(b, "ingest/b.batch"))
      val deadline = System.nanoTime() + 5000000000L
      while (!mem.puts.asScala.exists(_.contains(".intents/")) && System.nanoTime() < deadline) Thread.sleep(5)
      enqueue(a, "ingest/a.batch") // not the head's writer either: waits, then one of them commits both
      bDone.get(10, TimeUnit.SECONDS)
      a.cooperative.get.drainDeletes(); b.cooperative.get.drainDeletes()
      assert(entries(mem).map(_.location).sorted.take(2) == Seq("ingest/a.batch", "ingest/b.batch"))
      assert(mem.single.isEmpty)
      assert(mem.list(Key + ".intents/").isEmpty)
    } finally { a.close(); b.close() }
  }

  test("a waiter announces its next group and one head read confirms both") {
    // ADR 0007 session 15: a producer whose group waits announces the batches queued since as its next group (an
    // intent from last_batch + 1), so one committer's CAS appends both, in order, and one head read confirms both.
    // Before: the next group waited for the first to land, missing the round (a read more each).
    val mem = InMemoryStore.fresh()
    val bGets = new java.util.concurrent.atomic.AtomicInteger()
    val sb = new ForwardingStore(mem) {
      override def get(key: String): Option[VersionedObject] = { bGets.incrementAndGet(); super.get(key) }
    }
    val (ma, mb) = (new MetricsRegistry, new MetricsRegistry)
    val (a, b) = (coop(mem, ma), coop(sb, mb))
    try {
      enqueue(b, "ingest/b0.batch") // B has a record (batch 0)
      enqueue(a, "ingest/first.batch") // A wrote the head: it commits the next round
      forceCooperative(a); forceCooperative(b)
      b.cooperative.get.takeoverFloorMs = 30000L // B never takes over: A commits the round
      val wb = b.cooperative.get.writerId
      def bIntents: Set[Long] = mem.list(IntentCodec.intentsPrefix(Key))
        .flatMap(o => IntentCodec.parseIntentName(Key, o.key)).filter(_.writerId == wb).map(_.firstBatch).toSet
      def waitFor(batch: Long): Boolean = {
        val deadline = System.nanoTime() + 5000000000L
        while (!bIntents(batch) && System.nanoTime() < deadline) Thread.sleep(5)
        bIntents(batch)
      }
      def pending(loc: String) = new PendingLocation(loc, IndexedSeq.empty, () => fail("no re-upload expected"))
      val f1 = b.enqueue(pending("ingest/b1.batch"))
      assert(waitFor(1))
      val f2 = b.enqueue(pending("ingest/b2.batch"))
      assert(waitFor(2), "B did not announce its next group while the previous one waited")
      assert(!f1.isDone)
      val writesB = counter(mb, MetricNames.ManifestWrites, "role" -> "producer")
      enqueue(a, "ingest/a.batch") // one CAS: A's group, then B's run 1..2
      val gets = bGets.get()
      val (r1, r2) = (f1.get(10, TimeUnit.SECONDS), f2.get(10, TimeUnit.SECONDS))
      assert(bGets.get() - gets <= 1, "more than one head read to confirm both groups")
      assert(entries(mem).map(_.location).takeRight(3) == Seq("ingest/a.batch", "ingest/b1.batch", "ingest/b2.batch"))
      assert((r1, r2) == ((3L, 4L)))
      assert(counter(ma, MetricNames.IntentsAppendedForOthers) == 2)
      assert(counter(mb, MetricNames.ManifestWrites, "role" -> "producer") == writesB)
      assert(writers(mem)(wb).lastBatch == 2)
    } finally { a.close(); b.close() }
  }

  for (fault <- Seq("none", "lost_reply", "lying_precondition"))
    test(s"many cooperative writers with injected losses never append twice: $fault") {
      val mem = InMemoryStore.fresh()
      val rng = new scala.util.Random(11)
      def flaky(): Boolean = rng.synchronized(rng.nextDouble() < 0.25)
      val (nWriters, perWriter) = (8, 10)
      val pool = Executors.newFixedThreadPool(nWriters)
      val futures = (0 until nWriters).map { t =>
        pool.submit(new java.util.concurrent.Callable[Unit] {
          def call(): Unit = {
            // One committer each: they race on the CAS as processes do.
            val store = new FaultInjectingStore(mem,
              (key, _) =>
                if (key != Key || fault == "none" || !flaky()) Fault.None
                else if (fault == "lost_reply") Fault.ApplyThenError
                else Fault.ApplyThenPreconditionFailed)
            val qp = coop(store, segmentEntries = 16)
            try (0 until perWriter).foreach(i => enqueue(qp, s"ingest/t$t-$i.batch"))
            finally qp.close()
          }
        })
      }
      try futures.foreach(_.get(120, TimeUnit.SECONDS))
      finally pool.shutdownNow()
      val es = entries(mem)
      val locations = es.map(_.location)
      assert(locations.distinct.size == locations.size, "a location appended twice")
      assert(locations.sorted == (for (t <- 0 until nWriters; i <- 0 until perWriter) yield s"ingest/t$t-$i.batch").sorted)
      assert(es.map(_.sequence) == es.indices.map(_.toLong + es.head.sequence))
      val seqs = es.map(e => WriterSequence.sequenceOf(e.extension))
      assert(!seqs.contains(None) && seqs.distinct.size == seqs.size) // each (writer, batch_no) once
      val byWriter = seqs.flatten.groupBy(_._1).map { case (w, ns) => w -> ns.map(_._2) }
      assert(byWriter.values.forall(_ == (0L until perWriter))) // in batch order, no gap
      assert(writers(mem).map { case (w, r) => w -> r.lastBatch } == byWriter.map { case (w, _) => w -> (perWriter - 1L) })
      (0 until nWriters).foreach { t => // each writer's own entries in its order
        assert(locations.filter(_.startsWith(s"ingest/t$t-")) == (0 until perWriter).map(i => s"ingest/t$t-$i.batch"))
      }
    }

  private def announce(mem: ObjectStore, wid: String, first: Long, locs: Seq[String], ulid: String = Ulid): Unit = {
    val es = locs.zipWithIndex.map { case (l, i) =>
      NewEntry(l, IndexedSeq.empty, BatchIntegrity.record(1, 1) ++ WriterSequence.sequenceRecord(WriterSequence.unhex(wid), first + i))
    }
    mem.put(IntentCodec.intentKey(Key, ulid, wid, first, locs.size), IntentCodec.encodeIntent(wid, first, es))
  }

  test("a gap stops a writer's run and a stale intent is never appended") {
    val clock = new ManualClock(1767225600000L)
    val mem = InMemoryStore.fresh(clock)
    val qp = coop(mem, clock = clock)
    try {
      announce(mem, W2, 0, Seq("ingest/w2-0.batch"))
      // W2's intent is a quarter grace period (600 s / 4) older than the head, by the store's clock.
      clock.advance(200000)
      announce(mem, W1, 0, Seq("ingest/w1-0.batch"), "01J5T4RTZ9Y8X7W6V5T4S3R2Q1")
      announce(mem, W1, 2, Seq("ingest/w1-2.batch"), "01J5T4RTZ9Y8X7W6V5T4S3R2Q2") // batch 1 missing
      enqueue(qp, "ingest/first.batch") // solo: the head, written now
      forceCooperative(qp)
      enqueue(qp, "ingest/mine.batch")
      assert(entries(mem).map(_.location) == Seq("ingest/first.batch", "ingest/mine.batch", "ingest/w1-0.batch"))
      assert(writers(mem)(W1).lastBatch == 0 && !writers(mem).contains(W2))
    } finally qp.close()
  }

  test("a rejected intent is counted and skipped") {
    val mem = InMemoryStore.fresh()
    val metrics = new MetricsRegistry
    val qp = coop(mem, metrics)
    try {
      enqueue(qp, "ingest/first.batch")
      mem.put(IntentCodec.intentKey(Key, Ulid, W1, 0, 1), "OSQI not an intent".getBytes)
      forceCooperative(qp)
      enqueue(qp, "ingest/mine.batch")
      assert(entries(mem).map(_.location) == Seq("ingest/first.batch", "ingest/mine.batch"))
      assert(counter(metrics, MetricNames.IntentsRejected) == 1)
    } finally qp.close()
  }

  test("entries carry a checked integrity record at their sequence") {
    val mem = InMemoryStore.fresh()
    val qp = coop(mem)
    try {
      announce(mem, W1, 0, Seq("ingest/w1-0.batch"))
      enqueue(qp, "ingest/first.batch", BatchIntegrity.record(1, 1)) // creates the manifest (solo)
      forceCooperative(qp)
      enqueue(qp, "ingest/mine.batch", BatchIntegrity.record(2, 2))
      val es = entries(mem)
      es.foreach(e => assert(BatchIntegrity.verifyEntry(e, Key).isDefined)) // throws on a wrong entry_crc32
      assert(es.last.location == "ingest/w1-0.batch")
      assert(es.map(e => WriterSequence.sequenceOf(e.extension).map(_._2)) == Seq(Some(0L), Some(1L), Some(0L)))
    } finally qp.close()
  }

  test("a solo queue producer writes no writers section (byte for byte as before)") {
    val mem = InMemoryStore.fresh()
    val qp = new QueueProducer(new ManifestStore(mem, Key), Fast, SystemClock, new MetricsRegistry, Grace)
    try {
      enqueue(qp, "ingest/first.batch")
      val head = ManifestHead.parse(mem.get(Key).get.bytes, Key)
      assert(head.version == 1 && head.sections.isEmpty)
    } finally qp.close()
  }

  test("GC deletes intents a grace period old and keeps younger ones") {
    val clock = new ManualClock(1767225600000L)
    val mem = InMemoryStore.fresh(clock)
    announce(mem, W1, 0, Seq("ingest/w1-0.batch"), "01J5T4RTZ9Y8X7W6V5T4S3R2Q1") // a dead owner's
    val inKey = IntentCodec.inKeyIntentKey(Key, "01J5T4RTZ9Y8X7W6V5T4S3R2Q3", W1, 1, inKeyEntries(W1, 1, 1)).get
    mem.put(inKey, Array.emptyByteArray) // a dead owner's, in-key
    clock.advance(400000)
    announce(mem, W2, 0, Seq("ingest/w2-0.batch"), "01J5T4RTZ9Y8X7W6V5T4S3R2Q2")
    mem.put(Key + ".intents/not-an-intent", Array[Byte](1))
    clock.advance(200000)
    val qp = coop(mem, clock = clock)
    try {
      enqueue(qp, "ingest/first.batch") // the head: 600 s after W1's intent, 200 s after W2's
      val result = new osqueue.gc.GarbageCollector(mem, Key, "ingest", 600.seconds, clock).runOnce()
      assert(result.deleted.contains(IntentCodec.intentKey(Key, "01J5T4RTZ9Y8X7W6V5T4S3R2Q1", W1, 0, 1)))
      assert(result.deleted.contains(inKey))
      assert(mem.list(Key + ".intents/").map(_.key).toSet ==
        Set(IntentCodec.intentKey(Key, "01J5T4RTZ9Y8X7W6V5T4S3R2Q2", W2, 0, 1), Key + ".intents/not-an-intent"))
    } finally qp.close()
  }

  // -- golden vectors (tests/golden/intents.json, written by tests/golden/make_vectors.py) ----------

  private val spec = new ObjectMapper().readTree(RepoFiles.golden.resolve("intents.json").toFile)

  for (file <- spec.fieldNames().asScala.toSeq.filter(_.startsWith("intent_")).sorted)
    test(s"intent golden vector $file") {
      val s = spec.get(file)
      val data = Files.readAllBytes(RepoFiles.golden.resolve(file))
      val keyName = s.get("name").asText
      val name = IntentCodec.parseIntentName(Key, keyName)
      assert(name.isDefined)
      if (s.has("error")) intercept[CorruptManifestException](IntentCodec.decodeIntent(data, keyName, name))
      else {
        val intent = IntentCodec.decodeIntent(data, keyName, name)
        assert(intent.writerId == s.get("writer_id").asText && intent.firstBatch == s.get("first_batch").asLong)
        val expected = s.get("entries").asScala.toSeq.map { e =>
          (e.get("location").asText,
            e.get("metadata").asScala.toSeq.map(x =>
              (x.get("start_index").asInt, x.get("ingestion_time_ms").asLong, Base64.getDecoder.decode(x.get("payload_b64").asText).toSeq)),
            Base64.getDecoder.decode(e.get("extension_b64").asText).toSeq)
        }
        assert(intent.entries.map(e =>
          (e.location, e.metadata.map(x => (x.startIndex, x.ingestionTimeMs, x.payload.toSeq)),
            e.extension.toSeq)) == expected)
        // Encoding it again gives the same bytes.
        assert(IntentCodec.encodeIntent(intent.writerId, intent.firstBatch, intent.entries).toSeq == data.toSeq)
      }
    }

  test("the in-key golden name announces the intent_v1 batches") {
    val s = spec.get("intent_v1.bin")
    val keyName = s.get("name").asText
    val intent = IntentCodec.decodeIntent(Files.readAllBytes(RepoFiles.golden.resolve("intent_v1.bin")), keyName,
      IntentCodec.parseIntentName(Key, keyName))
    val inKey = s.get("in_key_name").asText
    val name = IntentCodec.parseIntentName(Key, inKey)
    assert(name.exists(_.payload.isDefined))
    val fromKey = IntentCodec.decodeInKeyIntent(name.get, inKey)
    assert(fromKey.writerId == intent.writerId && fromKey.firstBatch == intent.firstBatch)
    def rows(i: Intent) =
      i.entries.map(e => (e.location, e.metadata.map(x => (x.startIndex, x.ingestionTimeMs, x.payload.toSeq)), e.extension.toSeq))
    assert(rows(fromKey) == rows(intent))
    assert(IntentCodec.inKeyIntentKey(Key, Ulid, W1, 7, intent.entries).contains(inKey))
  }

  // -- in-key intents (docs/format.md §2.4 "In-key intents") --

  private def inKeyEntries(wid: String, first: Long, n: Int, items: Int = 10): IndexedSeq[NewEntry] = {
    val t0 = 1767225600000L
    (0 until n).map { i =>
      NewEntry(f"ingest/01J5T4R3KXBMZ7QV9N2WG8Y$i%03d.batch",
        (0 until items).map(j =>
          MetadataItem(j, t0 + 10 * j - (if (j == 4) 3 else 0), if (j % 3 != 0) Array.emptyByteArray else "app".getBytes)),
        BatchIntegrity.record(100L + i, 0xFFFFFFF0L + i) ++ WriterSequence.sequenceRecord(WriterSequence.unhex(wid), first + i))
    }
  }

  test("an in-key intent round-trips and falls back when it does not fit") {
    val es = inKeyEntries(W1, 5, 3)
    val key = IntentCodec.inKeyIntentKey(Key, Ulid, W1, 5, es)
    assert(key.exists(_.length <= 1024))
    val name = IntentCodec.parseIntentName(Key, key.get).get
    assert((name.writerId, name.firstBatch, name.count) == ((W1, 5L, 3)))
    val got = IntentCodec.decodeInKeyIntent(name, key.get)
    def rows(x: Seq[NewEntry]) =
      x.map(e => (e.location, e.metadata.map(m => (m.startIndex, m.ingestionTimeMs, m.payload.toSeq)), e.extension.toSeq))
    assert(rows(got.entries) == rows(es))
    assert(IntentCodec.inKeyIntentKey(Key, Ulid, W1, 5, inKeyEntries(W1, 5, 12)).isEmpty) // past 1,024 bytes
    assert(IntentCodec.inKeyIntentKey(Key, Ulid, W1, 5, es, IntentCodec.MaxFileNameBytes).isEmpty) // a local file name
    val one = inKeyEntries(W1, 5, 1, items = 1)
    assert(IntentCodec.inKeyIntentKey(Key, Ulid, W1, 5, one, IntentCodec.MaxFileNameBytes).isDefined)
    // Not the shape: a sink tag or another record after the writer record, or a record of another batch number.
    assert(IntentCodec.inKeyIntentKey(Key, Ulid, W1, 5, Seq(one(0).copy(extension = one(0).extension ++ "OSQ1\u0001".getBytes))).isEmpty)
    assert(IntentCodec.inKeyIntentKey(Key, Ulid, W1, 6, one).isEmpty)
  }

  for (damage <- Seq("count", "trailing", "truncated", "not_canonical"))
    test(s"an in-key intent that does not decode exactly is rejected: $damage") {
      val key = IntentCodec.inKeyIntentKey(Key, Ulid, W1, 5, inKeyEntries(W1, 5, 2)).get
      val cut = key.stripSuffix(".intent")
      var head = cut.substring(0, cut.lastIndexOf('-'))
      var payload = cut.substring(cut.lastIndexOf('-') + 1)
      damage match {
        case "count" => head = head.replace("-5-2", "-5-3")
        case "trailing" => payload += "AA"
        case "truncated" => payload = payload.dropRight(8)
        case _ => // unused low bits set in the last character, or a length base64 cannot have
          val alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
          if (payload.length % 4 == 2 || payload.length % 4 == 3)
            payload = payload.dropRight(1) + alphabet(alphabet.indexOf(payload.last.toInt) ^ 1)
          else payload += "A"
      }
      val bad = s"$head-$payload.intent"
      val name = IntentCodec.parseIntentName(Key, bad)
      assert(name.isDefined)
      intercept[CorruptManifestException](IntentCodec.decodeInKeyIntent(name.get, bad))
    }

  test("a round reads no in-key intent and still gets an old-format one") {
    val mem = InMemoryStore.fresh()
    val gets = new CopyOnWriteArrayList[String]()
    val store = new ForwardingStore(mem) {
      override def get(key: String): Option[VersionedObject] = { gets.add(key); super.get(key) }
      override def getBytes(key: String): Option[Array[Byte]] = { gets.add(key); mem.getBytes(key) }
    }
    val metrics = new MetricsRegistry
    val qp = coop(store, metrics)
    try {
      enqueue(qp, "ingest/first.batch")
      val inKey = IntentCodec.inKeyIntentKey(Key, Ulid, W1, 0, inKeyEntries(W1, 0, 2)).get
      mem.put(inKey, "its body is never read".getBytes) // a GET would reject it (not an intent)
      announce(mem, W2, 0, Seq("ingest/w2-0.batch"), "01J5T4RTZ9Y8X7W6V5T4S3R2Q2") // today's form: read by GET
      forceCooperative(qp)
      enqueue(qp, "ingest/mine.batch")
      assert(entries(mem).map(_.location) == Seq("ingest/first.batch", "ingest/mine.batch",
        "ingest/01J5T4R3KXBMZ7QV9N2WG8Y000.batch", "ingest/01J5T4R3KXBMZ7QV9N2WG8Y001.batch", "ingest/w2-0.batch"))
      assert(gets.asScala.filter(_.startsWith(Key + ".intents/")).toSeq ==
        Seq(IntentCodec.intentKey(Key, "01J5T4RTZ9Y8X7W6V5T4S3R2Q2", W2, 0, 1)))
      assert(counter(metrics, MetricNames.IntentsRejected) == 0)
      assert(writers(mem)(W1).lastBatch == 1 && writers(mem)(W2).lastBatch == 0)
      assert(qp.cooperative.get.cachedIntents == 2)
      forceCooperative(qp)
      enqueue(qp, "ingest/next.batch") // both appended: the next round forgets them
      assert(qp.cooperative.get.cachedIntents == 0)
    } finally qp.close()
  }

  test("a cooperative producer announces in the key when its group fits") {
    val mem = InMemoryStore.fresh()
    val announced = new CopyOnWriteArrayList[String]()
    val store = new ForwardingStore(mem) {
      override def put(key: String, bytes: Array[Byte]): Unit = {
        if (key.contains(".intents/")) announced.add(key)
        super.put(key, bytes)
      }
    }
    val qp = coop(store)
    try {
      enqueue(qp, "ingest/first.batch")
      forceCooperative(qp)
      notTheHeadsWriter(qp)
      enqueue(qp, "ingest/mine.batch")
      assert(announced.size == 1)
      val name = IntentCodec.parseIntentName(Key, announced.get(0))
      assert(name.exists(_.payload.isDefined))
      assert(IntentCodec.decodeInKeyIntent(name.get, announced.get(0)).entries.head.location ==
        "ingest/mine.batch")
    } finally qp.close()
  }

  test("head with a writers section golden vector") {
    val s = spec.get("head_v3_writers.bin")
    val data = Files.readAllBytes(RepoFiles.golden.resolve("head_v3_writers.bin"))
    val head = ManifestHead.parse(data, s.get("manifest").asText)
    assert((head.nextSequence, head.epoch, head.lowWater) ==
      ((s.get("next_sequence").asLong, s.get("epoch").asLong, s.get("low_water").asLong)))
    def unsealed(ext: Array[Byte]): Seq[Byte] = { val c = ext.clone(); (15 until 19).foreach(c(_) = 0); c.toSeq }
    assert(head.tailEntries.map(e => (e.sequence, e.location, unsealed(e.extension))) ==
      s.get("tail").asScala.toSeq.map(t =>
        (t.get("sequence").asLong, t.get("location").asText, Base64.getDecoder.decode(t.get("extension_b64").asText).toSeq)))
    head.tailEntries.foreach(e => BatchIntegrity.verifyEntry(e, Key))
    assert(head.tailEntries.map(e => WriterSequence.sequenceOf(e.extension)) == Seq(Some((W1, 7L)), Some((W1, 8L))))
    val ws = WriterSequence.writersOf(head.sections, Key)
    assert(ws.values.toSeq.sortBy(_.writerId).map(r => (r.writerId, r.lastBatch, r.lastAppendMs)) ==
      s.get("writers").asScala.toSeq.map(x => (x.get("writer_id").asText, x.get("last_batch").asLong, x.get("last_append_ms").asLong)))
    // The writers section as this codec writes it is the vector's, byte for byte.
    assert(WriterSequence.encodeWriters(ws.values).toSeq == head.sections.opaque.head.body.toSeq)
    assert(WriterSequence.withWriters(head.sections, ws, s.get("writers").get(0).get("last_append_ms").asLong) == head.sections)
  }

  // -- the queue's size caps (docs/format.md §2.3), case for case as test_cooperative_commit.py ----------

  private val AtOnce = QueueFullWait(0L, 1L)
  private def setRetention(mem: ObjectStore, maxEntries: Long, policy: String = "backpressure"): Unit =
    new QueueRetention(new ManifestStore(mem, Key)).set(maxEntries = maxEntries, policy = policy)

  /** A real batch holding one row, `name`, with its integrity record; its row. */
  private def putRow(mem: ObjectStore, name: String): (String, Array[Byte], String) = {
    val data = BatchCodec.encode(Seq(name.getBytes), Compression.None)
    mem.put(s"ingest/$name.batch", data)
    (s"ingest/$name.batch", BatchIntegrity.record(data), name)
  }

  test("a cooperative producer is refused past a backpressure cap and other runs wait") {
    val mem = InMemoryStore.fresh()
    val qp = coop(mem, wait = AtOnce)
    try {
      enqueue(qp, "ingest/first.batch")
      setRetention(mem, 3)
      announce(mem, W1, 0, Seq("ingest/w1-0.batch", "ingest/w1-1.batch")) // fits only without the own batches
      forceCooperative(qp)
      enqueue(qp, "ingest/a.batch") // fits; W1's run would not: it stays announced for W1
      enqueue(qp, "ingest/b.batch")
      notTheHeadsWriter(qp) // so that it announces c (the head's own writer commits without an intent)
      val full = intercept[QueueFullException](enqueue(qp, "ingest/c.batch"))
      assert(full.getMessage.contains("max_entries 3"))
      assert(entries(mem).map(_.location) == Seq("ingest/first.batch", "ingest/a.batch", "ingest/b.batch"))
      val ws = writers(mem)
      assert(!ws.contains(W1) && mem.list(Key + ".intents/").exists(_.key.contains(W1)))
      // The refused group was announced: its record is set past it, so no other committer can still append it.
      assert(ws(qp.cooperative.get.writerId).lastBatch == 3)
    } finally qp.close()
  }

  test("cooperative producers under backpressure drop nothing and never pass the cap") {
    val mem = InMemoryStore.fresh()
    val first = coop(mem)
    try enqueue(first, "ingest/first.batch")
    finally first.close()
    setRetention(mem, 12)
    val ok = new CopyOnWriteArrayList[String]()
    val full = new java.util.concurrent.atomic.AtomicInteger()
    val pool = Executors.newFixedThreadPool(4)
    val futures = (0 until 4).map { p =>
      pool.submit(new java.util.concurrent.Callable[Unit] {
        def call(): Unit = {
          val qp = coop(new ForwardingStore(mem), wait = AtOnce)
          forceCooperative(qp) // every group announced: the writers append each other's runs
          try (0 until 6).foreach { i =>
              try { enqueue(qp, s"ingest/p$p-$i.batch"); ok.add(s"ingest/p$p-$i.batch") }
              catch { case _: QueueFullException => full.incrementAndGet() }
            }
          finally qp.close()
        }
      })
    }
    try futures.foreach(_.get(120, TimeUnit.SECONDS))
    finally pool.shutdownNow()
    val locations = entries(mem).map(_.location)
    assert(locations.size == 12 && ok.size == 11 && full.get == 24 - 11)
    assert(locations.toSet == ok.asScala.toSet + "ingest/first.batch") // refused: not in; none twice
  }

  test("drop_oldest cuts for a cooperative write and tells a lagging subscription exactly") {
    val mem = InMemoryStore.fresh()
    val metrics = new MetricsRegistry
    val qp = coop(mem, metrics)
    def produce(name: String): String = {
      val (loc, ext, row) = putRow(mem, name)
      enqueue(qp, loc, ext)
      row
    }
    def consumer(sub: String, config: ConsumerConfig => ConsumerConfig = identity): Consumer = {
      val c = new Consumer(mem, config(ConsumerConfig(runGc = false, subscription = Some(sub))), SystemClock, new MetricsRegistry)
      c.initialize()
      c
    }
    def readAll(c: Consumer): Seq[String] = {
      val out = scala.collection.mutable.ArrayBuffer.empty[String]
      Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.foreach { b =>
        out ++= b.entries.map(new String(_)); c.ack(b.sequence)
      }
      c.flush()
      out.toSeq
    }
    try {
      val rows = scala.collection.mutable.ArrayBuffer(produce("b0"), produce("b1"))
      val subs = new Subscriptions(new ManifestStore(mem, Key), RetryPolicy(), SystemClock, new MetricsRegistry)
      subs.create("fast")
      subs.create("slow")
      setRetention(mem, 4, "drop_oldest")
      val losses = new CopyOnWriteArrayList[DataLossException]()
      val slow = consumer("slow", _.copy(failOnDataLoss = false, onDataLoss = { e => losses.add(e); () }))
      val fast = consumer("fast")
      val gotFast = scala.collection.mutable.ArrayBuffer.empty[String] ++ readAll(fast)
      val b = slow.nextBatch().get // slow reads 0 (and 1 in its read-ahead), then lags
      assert(b.sequence == 0)
      slow.ack(0)
      slow.flush()
      forceCooperative(qp)
      val w1 = Seq("w1-0", "w1-1").map(putRow(mem, _))
      mem.put(IntentCodec.intentKey(Key, Ulid, W1, 0, 2),
        IntentCodec.encodeIntent(W1, 0,
          w1.zipWithIndex.map {
            case ((loc, ext, _), i) => NewEntry(loc, IndexedSeq.empty, ext ++ WriterSequence.sequenceRecord(WriterSequence.unhex(W1), i))
          }.toIndexedSeq))
      (2 until 12).foreach { i =>
        rows += produce(s"b$i")
        if (i == 2) rows ++= w1.map(_._3) // appended by this write, after its own batch (sequences 3, 4)
        assert(ManifestHead.parse(mem.get(Key).get.bytes, Key).depth <= 4) // the cap holds after every write
        gotFast ++= readAll(fast)
      }
      assert(gotFast == rows) // fast keeps up: nothing lost for it
      val h = ManifestHead.parse(mem.get(Key).get.bytes, Key)
      assert(h.firstSequence == 10 && h.depth == 4 && writers(mem)(W1).lastBatch == 1)
      assert(counter(metrics, MetricNames.EntriesDropped) == 9) // 1..9: slow's next was 1
      val rest = readAll(slow)
      assert(losses.asScala.map(e => (e.subscription, e.first, e.count)).toList == List((Some("slow"), 2L, 8L)))
      assert(rest == Seq(rows(1)) ++ rows.drop(10)) // 1 was in its read-ahead; nothing else lost
      fast.close()
      slow.close()
    } finally qp.close()
  }
}
