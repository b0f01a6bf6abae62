package osqueue.queue

import java.nio.{ByteBuffer, ByteOrder}
import java.nio.file.Files
import java.util.Base64
import java.util.concurrent.{Executors, TimeUnit}
import java.util.concurrent.atomic.AtomicBoolean

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.scalatest.funsuite.AnyFunSuite

import osqueue.{Clock, CorruptManifestException, InvalidConfigException, SystemClock}
import osqueue.format._
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.producer.ProducerConfig
import osqueue.store.{CasOutcome, InMemoryStore, ObjectStore, ObjectVersion}
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
      segmentEntries: Int = ManifestHead.DefaultSegmentEntries) =
    new QueueProducer(new ManifestStore(store, Key), Fast, clock, metrics, Grace, segmentEntries = segmentEntries,
      commitMode = CooperativeCommit.Cooperative)

  private def enqueue(qp: QueueProducer, location: String, ext: Array[Byte] = Array.emptyByteArray): (Long, String) = {
    val p = new PendingLocation(location, IndexedSeq.empty, () => fail("no re-upload expected"), ext)
    val s = qp.enqueue(p).get(60, TimeUnit.SECONDS)
    (s, p.location)
  }

  /** As if it saw a conflict just now: it announces before its first CAS (step 0 skipped). */
  private def forceCooperative(qp: QueueProducer): Unit = qp.cooperative.get.sawConflict()

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
      a.cooperative.get.drainDeletes() // deletes run off the commit's path
      assert(mem.list(Key + ".intents/").isEmpty) // the owner deleted its landed intent
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
    clock.advance(400000)
    announce(mem, W2, 0, Seq("ingest/w2-0.batch"), "01J5T4RTZ9Y8X7W6V5T4S3R2Q2")
    mem.put(Key + ".intents/not-an-intent", Array[Byte](1))
    clock.advance(200000)
    val qp = coop(mem, clock = clock)
    try {
      enqueue(qp, "ingest/first.batch") // the head: 600 s after W1's intent, 200 s after W2's
      val result = new osqueue.gc.GarbageCollector(mem, Key, "ingest", 600.seconds, clock).runOnce()
      assert(result.deleted.contains(IntentCodec.intentKey(Key, "01J5T4RTZ9Y8X7W6V5T4S3R2Q1", W1, 0, 1)))
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
}
