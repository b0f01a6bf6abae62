package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Paths}
import java.util.concurrent.atomic.AtomicBoolean

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{SystemClock, WriterFencedException}
import osqueue.format.{BatchCodec, BatchIntegrity, BatchNames, Compression, EntryTag, MetadataItem}
import osqueue.gc.GarbageCollector
import osqueue.metrics.MetricNames
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.queue.ManifestStore
import osqueue.store.{InMemoryStore, ObjectStores}

/**
 * The sink's driver commit: one manifest write per epoch, the writer state that skips replays and
 * fences older drivers, the writer-id rules, what an abort keeps and deletes, and staged re-uploads
 * of files GC deleted before the commit. The committer alone on an in-memory store, and through a
 * local Spark of this line with the connector's fault points.
 */
class OsqueueSinkCommitterSuite extends AnyFunSuite with OsqueueSinkTestUtils {
  override protected def sessionName: String = "osqueue-sink-committer-suite"

  private var n = 0
  private def paths(): (String, String, String) = {
    n += 1
    (queue(s"in-$n"), queue(s"q-$n"), queue(s"ckpt-$n"))
  }

  // --- the committer alone ---------------------------------------------------------------------

  /** A fresh in-memory queue's sink options. */
  private def memoryQueue(): SinkOptions = {
    n += 1
    SinkOptions(QueueLocation(s"memory://sink-committer-$n", manifestKey, "ingest", Map.empty), Compression.None,
      64L << 20, writerId = None, gcGracePeriod = 10.minutes)
  }

  /** Task `partition`'s commit message: `files` fresh batch files of one record each, uploaded. */
  private def taskFiles(options: SinkOptions, partition: Int, files: Int): OsqueueCommitMessage = {
    val store = OsqueueStores.open(options.location)
    OsqueueCommitMessage(partition,
      (0 until files).map { i =>
        val key = BatchNames.newKey("ingest", SystemClock.nowMillis())
        val bytes = BatchCodec.encode(Seq(s"p$partition-$i".getBytes(UTF_8)), Compression.None)
        store.put(key, bytes)
        WrittenBatch(key, IndexedSeq(MetadataItem(0, 0L, Array.emptyByteArray)), 1, bytes.length.toLong,
          Some(BatchIntegrity.crc32(bytes)))
      })
  }

  private def memoryEntries(options: SinkOptions) = {
    val manifests = new ManifestStore(OsqueueStores.open(options.location), manifestKey)
    val snapshot = manifests.read()
    if (snapshot.version.isEmpty) IndexedSeq.empty else manifests.decode(snapshot).entries
  }

  private def exists(options: SinkOptions, key: String) = OsqueueStores.open(options.location).get(key).isDefined

  test("an epoch's files of every task are appended in one manifest write, in partition order, tagged") {
    val options = memoryQueue()
    val committer = new OsqueueSinkCommitter(options, "w", "query-1")
    committer.claim()
    val messages = Seq(taskFiles(options, 2, 2), taskFiles(options, 0, 2), taskFiles(options, 1, 2))
    assert(committer.commit(0, messages, owner = Some("query-1")))
    assert(committer.metrics.counterValue(MetricNames.ManifestWrites, "role" -> "sink") == 1)
    val es = memoryEntries(options)
    assert(es.map(_.location) == messages.sortBy(_.partitionId).flatMap(_.batches.map(_.location)))
    assert(es.map(e => EntryTag.decode(e.extension).map(t => (t.writerId, t.batchId))).distinct == Seq(Some(("w", 0L))))
    assert(es.forall(e => BatchIntegrity.verifyEntry(e, "m").isDefined), "the integrity record before the sink tag")
  }

  test("a replayed batch id appends nothing, and a new driver's replay deletes its files; the next batch id appends") {
    val options = memoryQueue()
    val committer = new OsqueueSinkCommitter(options, "w", "query-1")
    committer.claim()
    assert(committer.commit(0, Seq(taskFiles(options, 0, 1)), owner = Some("query-1")))
    // this driver sent a manifest write for batch 0: it keeps the replay's files (they may be referenced)
    assert(!committer.commit(0, Seq(taskFiles(options, 0, 1)), owner = Some("query-1")), "the replay was not skipped")
    assert(memoryEntries(options).size == 1)
    // a new driver (the restarted query) skips it too, from the state in the store, and deletes its files
    val next = new OsqueueSinkCommitter(options, "w", "query-1")
    next.claim()
    val replay = taskFiles(options, 0, 1)
    assert(!next.commit(0, Seq(replay), owner = Some("query-1")))
    assert(!exists(options, replay.batches.head.location), "the skipped replay's file was left behind")
    assert(next.commit(1, Seq(taskFiles(options, 0, 1)), owner = Some("query-1")))
    assert(memoryEntries(options).size == 2)
  }

  test("a driver fenced by a newer claim of its writer lands nothing and deletes its own files") {
    val options = memoryQueue()
    val old = new OsqueueSinkCommitter(options, "w", "query-1")
    assert(old.claim() == 1)
    assert(old.commit(0, Seq(taskFiles(options, 0, 1)), owner = Some("query-1")))
    val newer = new OsqueueSinkCommitter(options, "w", "query-1") // the same query's checkpoint, run again
    assert(newer.claim() == 2)
    val late = taskFiles(options, 0, 1)
    val e = intercept[WriterFencedException](old.commit(1, Seq(late), owner = Some("query-1")))
    assert(e.getMessage.contains("was fenced"), e.getMessage)
    assert(memoryEntries(options).size == 1, "a write of the fenced driver landed")
    assert(!exists(options, late.batches.head.location))
    assert(newer.commit(1, Seq(taskFiles(options, 0, 1)), owner = Some("query-1")))
    assert(memoryEntries(options).size == 2)
  }

  // --- through Spark: aborts ---------------------------------------------------------------------

  Seq("between-append-and-state", "after-append").foreach { point =>
    test(s"a streaming commit failing $point keeps the appended files; the restart lands every row once") {
      val (in, q, ckpt) = paths()
      val expected = makeInput(in, files = 2, lines = 4)
      val message = withFault("failAt", point)(failure(runSink(in, q, ckpt)))
      assert(message.contains("test fault injected"), message)
      assert(entries(q).nonEmpty, "the append did not land before the fault")
      assert(missingFiles(q).isEmpty, "the abort deleted files the manifest references")
      assert(readValues(q) == expected.take(4))
      runSink(in, q, ckpt)
      assert(readValues(q) == expected)
      assert(nativeValues(q) == expected)
    }
  }

  test("a df.write failing after the append keeps the appended files") {
    val (_, q, _) = paths()
    val message = withFault("failAt", "between-append-and-state")(failure(batchWrite(q, (0 until 6).map(i => s"r$i"))))
    assert(message.contains("test fault injected"), message)
    assert(missingFiles(q).isEmpty, "the abort deleted files the manifest references")
    assert(readValues(q) == (0 until 6).map(i => s"r$i"))
  }

  test("an abort before any manifest write deletes the epoch's files") {
    val (in, q, ckpt) = paths()
    makeInput(in, files = 1, lines = 4)
    val message = withFault("failAt", "before-append")(failure(runSink(in, q, ckpt)))
    assert(message.contains("test fault injected"), message)
    assert(entries(q).isEmpty)
    assert(batchFiles(q).isEmpty, "an aborted epoch left files behind")
  }

  test("an epoch whose files GC deleted before its commit fails; its replay stages its files and commits") {
    val (in, q, ckpt) = paths()
    // the queue's grace period is 1 s; its manifest is empty, so GC may delete every unreferenced file past 1 s
    val producer = new Producer(ObjectStores.open(q), ProducerConfig(flushInterval = 1.hour, gcGracePeriod = 1.second))
    try { producer.produce(Seq("x".getBytes(UTF_8))); producer.flush() }
    finally producer.close()
    assert(nativeValues(q) == Seq("x"))
    val expected = makeInput(in, files = 1, lines = 4)
    val store = ObjectStores.open(q)
    val gc = new GarbageCollector(store, manifestKey, "ingest", 1.millis, SystemClock)
    val running = new AtomicBoolean(true)
    // Each cycle first rewrites the manifest unchanged, as a busy queue's writers would: GC ages files
    // by the store's clock against the head's last write (docs/format.md §6).
    def touchHead(): Unit = store.get(manifestKey).foreach(o => store.putIfVersionMatches(manifestKey, o.bytes, o.version))
    val gcThread = new Thread(() => while (running.get) { touchHead(); gc.runOnce(); Thread.sleep(50) })
    gcThread.start()
    try withFault("pauseAt", "before-append:2500") {
        val message = failure(runSink(in, q, ckpt))
        assert(message.contains("OSQUEUE_SINK_FILES_EXPIRED"), message)
        assert(entries(q).isEmpty)
        runSink(in, q, ckpt) // just as slow, and GC keeps running
      }
    finally {
      running.set(false)
      gcThread.join(10000)
      store.close()
    }
    assert(missingFiles(q).isEmpty)
    assert(readValues(q) == expected)
    assert(nativeValues(q) == expected)
    assert(batchFiles(s"$q/$manifestKey.staging").isEmpty, "staged files left behind")
  }

  test("an epoch whose files outlived half the grace period enqueues fresh copies of them") {
    val (in, q, ckpt) = paths()
    val producer = new Producer(ObjectStores.open(q), ProducerConfig(flushInterval = 1.hour, gcGracePeriod = 2.seconds))
    try { producer.produce(Seq("x".getBytes(UTF_8))); producer.flush() }
    finally producer.close()
    assert(nativeValues(q) == Seq("x"))
    val expected = makeInput(in, files = 1, lines = 4)
    val before = batchFiles(q).toSet
    withFault("pauseAt", "before-append:1500")(runSink(in, q, ckpt))
    // the task's file was older than half the grace period (1 s) at the commit: a copy of it is enqueued
    val written = (batchFiles(q).toSet -- before).map(p => Paths.get(q).relativize(p).toString)
    val enqueued = entries(q).map(_.location)
    assert(written.size == 2 && enqueued.size == 1 && written.contains(enqueued.head), s"$written $enqueued")
    val original = (written - enqueued.head).head
    assert(BatchNames.ulidTimeMs(enqueued.head).get - BatchNames.ulidTimeMs(original).get >= 1000, s"$original $enqueued")
    assert(readValues(q) == expected)
  }

  // --- through Spark: writer ids -----------------------------------------------------------------

  test("df.writes with a writerId are deduplicated by writerBatchId") {
    val (_, q, _) = paths()
    def write(values: Seq[String], batchId: Int) = batchWrite(q, values, Map("writerId" -> "daily", "writerBatchId" -> s"$batchId"))
    write(Seq("a0", "a1"), 1)
    write(Seq("a0", "a1"), 1) // a retry of the same write
    write(Seq("b0"), 2) // the next write
    write(Seq("a0", "a1"), 1) // a late retry of an older one
    assert(readValues(q) == Seq("a0", "a1", "b0"))
    assert(entries(q).size == 2, "a retried write was appended again")
    assert(batchFiles(q).size == 2, "skipped writes left files behind")
    val state = writerState(q, "daily").get
    assert(state.lastCommittedBatch == 2 && state.owner.contains("df.write"))
  }

  test("a one-off df.write adds no tags and no writer state, only the entry-integrity record of its file") {
    val (_, q, _) = paths()
    batchWrite(q, Seq("x", "y"))
    val es = entries(q)
    assert(es.map(e => EntryTag.decode(e.extension)) == Seq(None))
    // The task's length and CRC-32 of its file, written by the driver (docs/format.md §2.1).
    val file = Files.readAllBytes(Paths.get(q).resolve(es.head.location))
    val rec = BatchIntegrity.verifyEntry(es.head, "m").get
    assert(rec.byteLength == file.length && rec.batchCrc32 == BatchIntegrity.crc32(file))
    assert(writerStateCount(q) == 0)
    assert(readValues(q) == Seq("x", "y"))
  }

  test("a writerId reused by a query of another checkpoint fails loudly and appends nothing") {
    val (in, q, ckptA) = paths()
    val first = makeInput(in, files = 2, lines = 3)
    runSink(in, q, ckptA, Map("writerId" -> "enrich"))
    val landed = nextSequence(q)
    val message = failure(runSink(in, q, queue(s"ckpt-b-$n"), Map("writerId" -> "enrich")))
    assert(message.contains("OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY") && message.contains("sink writer 'enrich'"), message)
    assert(message.contains("new 'writerid'") && message.contains("original query"), message)
    assert(nextSequence(q) == landed, "the refused query appended entries")
    val more = makeInput(in, files = 1, lines = 3, firstFile = 2)
    runSink(in, q, ckptA, Map("writerId" -> "enrich")) // the original checkpoint still works
    runSink(in, q, queue(s"ckpt-c-$n"), Map("writerId" -> "enrich-2")) // a new writer id: all rows again
    assert(readValues(q) == first ++ more ++ first ++ more)
  }

  test("df.writes and a stream cannot share a writerId") {
    val (in, q, ckpt) = paths()
    makeInput(in, files = 1, lines = 2)
    batchWrite(q, Seq("x"), Map("writerId" -> "mixed", "writerBatchId" -> "0"))
    val refused = failure(runSink(in, q, ckpt, Map("writerId" -> "mixed")))
    assert(refused.contains("sink writer 'mixed' belongs to batch writes (df.write)"), refused)
    runSink(in, q, queue(s"ckpt-2-$n"), Map("writerId" -> "streamed"))
    val refusedBatch = failure(batchWrite(q, Seq("y"), Map("writerId" -> "streamed", "writerBatchId" -> "5")))
    assert(refusedBatch.contains("sink writer 'streamed' belongs to streaming query"), refusedBatch)
    assert(readValues(q) == Seq("x", "f0-line0", "f0-line1"))
  }

  test("a writer state written before owners and generations loads, and gains both") {
    val (in, q, ckpt) = paths()
    val expected = makeInput(in, files = 2, lines = 3)
    val key = Paths.get(q).resolve(OsqueueSinkCommitter.stateKey(manifestKey, "old"))
    Files.createDirectories(key.getParent)
    Files.write(key, """{"version":1,"writerId":"old","lastCommittedBatch":-1}""".getBytes(UTF_8))
    val query = runSink(in, q, ckpt, Map("writerId" -> "old"))
    assert(readValues(q) == expected)
    val state = writerState(q, "old").get
    assert(state.owner.contains(query.id.toString) && state.generation == 1 && state.lastCommittedBatch == 1)
  }

  override def afterAll(): Unit =
    try { (1 to n).foreach(i => InMemoryStore.drop(s"sink-committer-$i")) }
    finally super.afterAll()
}
