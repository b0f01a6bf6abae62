package osqueue.producer

import java.nio.file.{Files, Path}
import java.util.concurrent.{ConcurrentHashMap, CountDownLatch, TimeUnit}

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import org.scalatest.BeforeAndAfterEach
import org.scalatest.funsuite.AnyFunSuite

import osqueue.SystemClock
import osqueue.format.{BatchCodec, ManifestCodec}
import osqueue.metrics.MetricsRegistry
import osqueue.queue.RetryPolicy
import osqueue.store._
import osqueue.testing.ForwardingStore

/**
 * The spool uploader's tail (issue 28), case for case as tests/python/test_spool_tail.py: the crash
 * windows its shorter force order opens, by power loss (the spool files cut back to what was forced when
 * the crash point was reached, taken at the `SpoolLog.beforeForce` seam: what a force is about to make
 * durable is at least what was written before it). The crashed producer's manifest writes hang; a fresh
 * producer replays the crash image against the same in-memory store.
 */
class SpoolTailSuite extends AnyFunSuite with BeforeAndAfterEach {
  private val Key = "ingest/manifest"
  private val Fast = RetryPolicy(baseDelayMs = 1, maxDelayMs = 10)

  override def afterEach(): Unit = SpoolLog.beforeForce = null

  private def manifest(store: ObjectStore): Seq[(String, Seq[String])] = store.get(Key).toSeq.flatMap { o =>
    ManifestCodec.decode(o.bytes, Key).entries.map(e =>
      (e.location, BatchCodec.decode(store.get(e.location).get.bytes, "b").map(new String(_))))
  }
  private def values(store: ObjectStore): Seq[String] = manifest(store).flatMap(_._2)

  private def producer(store: ObjectStore, dir: Path, durability: String, flushInterval: FiniteDuration,
      flushSizeBytes: Option[Long] = None): Producer = {
    val base = ProducerConfig(flushInterval = flushInterval, retry = Fast, spoolDir = Some(dir.toString),
      durability = durability)
    new Producer(store, flushSizeBytes.fold(base)(n => base.copy(flushSizeBytes = n)), SystemClock, new MetricsRegistry)
  }

  /** What of a spool directory's log files is on disk: each file's bytes as of the start of its last force. */
  private final class PowerLoss(dir: Path) {
    val synced = new ConcurrentHashMap[Path, Array[Byte]]()
    @volatile var freeze = false // once set, the directory's forces never return (a crash is coming)
    SpoolLog.beforeForce = path =>
      if (path.getParent == dir) {
        if (freeze) new CountDownLatch(1).await() // the process dies before this force returns
        synced.put(path, Files.readAllBytes(path))
      }

    /** Writes the crash image of the log files into `into`; the kinds of its records. */
    def image(into: Path): Seq[String] = synchronized {
      Files.createDirectories(into)
      val logs = Files.list(dir).iterator().asScala.filter(_.toString.endsWith(".log")).toSeq.sortBy(_.toString)
      logs.flatMap { p =>
        val data = Option(synced.get(p)).getOrElse(Array.emptyByteArray)
        Files.write(into.resolve(p.getFileName), data)
        SpoolLog.decodeRecords(data, p.toString)._1.map(_.getClass.getSimpleName)
      }
    }
  }

  /** Hangs the producer's manifest writes once `dead` (the process is gone). */
  private final class Crashing(inner: ObjectStore) extends ForwardingStore(inner) {
    val dead = new CountDownLatch(1)
    @volatile var onCas: (() => CasOutcome) => CasOutcome = w => w()
    @volatile var onBatchPut: String => Unit = _ => ()
    private def cas(key: String)(write: => CasOutcome): CasOutcome = {
      if (dead.getCount == 0) new CountDownLatch(1).await()
      if (key == Key) onCas(() => write) else write
    }
    override def put(key: String, bytes: Array[Byte]): Unit = {
      if (key.endsWith(".batch")) onBatchPut(key)
      super.put(key, bytes)
    }
    override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = cas(key)(super.putIfAbsent(key, bytes))
    override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome =
      cas(key)(super.putIfVersionMatches(key, bytes, expected))
  }

  private def restart(store: ObjectStore, dir: Path): Unit = {
    val p = producer(store, dir, "queue", 10.millis)
    p.flush()
    p.close()
  }

  private def flushInBackground(p: Producer): Unit = {
    val t = new Thread(() => p.flush(), "flush") // names the batch, PUT, ATTEMPT, CAS; never returns
    t.setDaemon(true)
    t.start()
  }

  test("a crash after a batch PUT, before the ATTEMPT force, replays under a fresh name") {
    // (a) The BATCH record is no longer forced before its PUT. Power lost once the PUT went out, before any
    // ATTEMPT: the name may be lost with the record; the call is re-batched under a fresh name and the
    // orphan file is never appended (GC deletes it after its grace).
    val inner = InMemoryStore.fresh()
    val store = new Crashing(inner)
    val root = Files.createTempDirectory("spooltail")
    val power = new PowerLoss(root.resolve("spool"))
    @volatile var image = Seq.empty[String]
    @volatile var orphan = ""
    store.onBatchPut = key =>
      if (store.dead.getCount != 0) {
        orphan = key; image = power.image(root.resolve("image")); store.dead.countDown()
      }
    val p = producer(store, root.resolve("spool"), "local", 1.hour)
    p.produce(Seq("e0".getBytes)) // returned: its ENTRIES record is on disk
    flushInBackground(p)
    assert(store.dead.await(10, TimeUnit.SECONDS), "the batch's PUT never started")
    assert(image == Seq("EntriesRecord"), "the BATCH record was forced before its PUT")
    val deadline = System.nanoTime() + 10000000000L
    while (inner.get(orphan).isEmpty && System.nanoTime() < deadline) Thread.sleep(5)
    restart(inner, root.resolve("image"))
    assert(values(inner) == Seq("e0"))
    assert(!manifest(inner).map(_._1).contains(orphan))
    assert(inner.get(orphan).isDefined) // the orphan: unreferenced, left to GC
  }

  Seq("local", "queue").foreach { durability =>
    test(s"a crash at the CAS finds the ATTEMPT on disk and appends each entry once ($durability)") {
      // (a) The ATTEMPT force makes the batch names (and with durability queue the calls) durable: it must
      // precede the CAS. The crash image is what was on disk when the CAS was sent; the CAS lands; replay
      // must find it landed (a CAS ahead of that force would replay the calls again: twice).
      val inner = InMemoryStore.fresh()
      val store = new Crashing(inner)
      val root = Files.createTempDirectory("spooltail")
      val power = new PowerLoss(root.resolve("spool"))
      @volatile var image = Seq.empty[String]
      store.onCas = write => {
        image = power.image(root.resolve("image"))
        val outcome = write()
        store.dead.countDown()
        outcome
      }
      val p = producer(store, root.resolve("spool"), durability, 1.hour)
      p.produce(Seq("e0".getBytes))
      flushInBackground(p)
      assert(store.dead.await(10, TimeUnit.SECONDS), "no manifest write")
      assert(values(inner) == Seq("e0"))
      assert(image == Seq("EntriesRecord", "BatchRecord", "AttemptRecord"))
      restart(inner, root.resolve("image"))
      assert(values(inner) == Seq("e0")) // found landed: nothing appended again
    }

    test(s"handles complete before LANDED is forced and replay appends nothing ($durability)") {
      // (b) Once the CAS landed, the spool's forces hang (the process is about to die): the handle must still
      // complete (it no longer waits for LANDED's force), and only with its entries in the manifest. Replay
      // of what is on disk (ATTEMPT, no LANDED) finds the write landed and appends nothing.
      val inner = InMemoryStore.fresh()
      val store = new Crashing(inner)
      val root = Files.createTempDirectory("spooltail")
      val power = new PowerLoss(root.resolve("spool"))
      store.onCas = write => { val outcome = write(); power.freeze = true; outcome }
      val p = producer(store, root.resolve("spool"), durability, 10.millis, flushSizeBytes = Some(1L))
      p.produce(Seq("e0".getBytes, "e1".getBytes)).awaitDurable(10.seconds) // throws if it waited for LANDED
      assert(values(inner) == Seq("e0", "e1")) // completed only once the CAS landed
      store.dead.countDown()
      assert(power.image(root.resolve("image")) == Seq("EntriesRecord", "BatchRecord", "AttemptRecord"))
      restart(inner, root.resolve("image"))
      assert(values(inner) == Seq("e0", "e1"))
    }
  }
}
