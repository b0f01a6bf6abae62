package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.atomic.{AtomicInteger, AtomicLong}

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{Clock, CorruptManifestException, FencedException, SystemClock}
import osqueue.format.{EntryTag, Incarnation, ManifestHead}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.{ConditionalRead, InMemoryStore, ObjectStore, ObjectVersion, VersionedObject}
import osqueue.testing.ForwardingStore

/**
 * The driver's handle on its queue, on an in-memory store: takeover on first read, the idle-poll
 * backoff (an injected monotonic clock), dequeues only on commit, the end-of-run dequeue of the last
 * committed batch, commits that must ack nothing, and fencing by a second reader.
 */
class DriverQueueSuite extends AnyFunSuite {
  private val location = QueueLocation("memory://driver-queue", "ingest/manifest", "ingest", Map.empty)

  /** Wall time real, monotonic time set by the test. */
  private final class StepClock extends Clock {
    val nanos = new AtomicLong(1000000000L)
    def advanceMs(ms: Long): Unit = { val _ = nanos.addAndGet(ms * 1000000L) }
    override def nowMillis(): Long = SystemClock.nowMillis()
    override def nanoTime(): Long = nanos.get()
    override def sleepMillis(ms: Long): Unit = SystemClock.sleepMillis(ms)
  }

  private def produce(store: ObjectStore, batches: Int): Unit = {
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour))
    try (0 until batches).foreach { b => p.produce(Seq(s"v$b".getBytes(UTF_8))); p.flush() }
    finally p.close()
  }

  private def head(store: ObjectStore): ManifestHead =
    ManifestHead.parse(store.get(location.manifestPath).get.bytes, location.manifestPath)

  private def driverQueue(store: ObjectStore, clock: Clock = SystemClock, failOnDataLoss: Boolean = true,
      onTakeOver: Long => Unit = _ => ()): (DriverQueue, DataLossReporter) = {
    val dataLoss = new DataLossReporter(location.identity, failOnDataLoss)
    (new DriverQueue(store, location, 50.millis, 400.millis, dataLoss, clock, onTakeOver), dataLoss)
  }

  private def end(next: Long, m: ManifestHead, incarnation: Option[Long] = None) =
    OsqueueSourceOffset(location.identity, "id", next, incarnation = incarnation.orElse(Some(Incarnation.of(m.epoch))))

  test("the first read takes the queue over (epoch bump, onTakeOver once); peek does not") {
    val store = InMemoryStore.fresh()
    produce(store, 2)
    val before = head(store).epoch
    val takeovers = new AtomicInteger()
    val (q, _) = driverQueue(store, onTakeOver = _ => { val _ = takeovers.incrementAndGet() })
    assert(q.peek().nextSequence == 2 && q.ownEpoch.isEmpty && head(store).epoch == before)
    val m = q.read()
    assert(m.epoch == before + 1 && q.epoch == m.epoch && q.ownEpoch.contains(m.epoch))
    q.read()
    assert(takeovers.get() == 1 && head(store).epoch == before + 1)
    assert(q.last.map(_.nextSequence).contains(2L))
    q.stop(() => None)
  }

  /** Counts the reads of the manifest key. */
  private final class CountingStore(inner: ObjectStore, key: String) extends ForwardingStore(inner) {
    val reads = new AtomicInteger()
    private def count(k: String): Unit = if (k == key) { val _ = reads.incrementAndGet() }
    override def get(k: String): Option[VersionedObject] = { count(k); inner.get(k) }
    override def getIfChanged(k: String, known: ObjectVersion): ConditionalRead = { count(k); inner.getIfChanged(k, known) }
  }

  test("poll: an unchanged manifest puts the next read off by pollInterval, doubling up to maxPollInterval; a change reads at once") {
    val inner = InMemoryStore.fresh()
    produce(inner, 1)
    val store = new CountingStore(inner, location.manifestPath)
    val clock = new StepClock
    val (q, _) = driverQueue(store, clock)
    q.read() // takes over: the reads poll counts start after it
    for (wait <- Seq(50L, 100L, 200L, 400L, 400L)) {
      val before = store.reads.get()
      assert(q.poll(always = false).nextSequence == 1)
      assert(store.reads.get() == before + 1, "a due poll did not read")
      clock.advanceMs(wait - 1)
      q.poll(always = false)
      assert(store.reads.get() == before + 1, s"read before the $wait ms wait ended")
      clock.advanceMs(1)
    }
    val waiting = store.reads.get()
    q.poll(always = false) // due: reads, unchanged, waits 400 ms
    assert(q.poll(always = true).nextSequence == 1 && store.reads.get() == waiting + 2, "AvailableNow reads whatever the backoff")
    produce(inner, 1)
    clock.advanceMs(400)
    assert(q.poll(always = false).nextSequence == 2, "the change was not read")
    q.poll(always = false)
    assert(store.reads.get() == waiting + 4, "a read that found a change must not put the next one off")
    q.stop(() => None)
  }

  test("nothing is dequeued before a commit; a commit dequeues through its end - 1 in the background, and stop flushes it") {
    val store = InMemoryStore.fresh()
    produce(store, 3)
    val (q, _) = driverQueue(store)
    val m = q.read()
    assert(head(store).firstSequence == 0)
    q.commit(end(2, m))
    q.stop(() => None)
    assert(head(store).firstSequence == 2 && head(store).nextSequence == 3)
  }

  test("stop dequeues through the end of the last committed batch, and not past it") {
    val store = InMemoryStore.fresh()
    produce(store, 4)
    val (q, _) = driverQueue(store)
    val m = q.read()
    q.commit(end(1, m))
    q.stop(() => Some(end(3, m)))
    assert(head(store).firstSequence == 3, "the last committed batch [1, 3) is dequeued at the end, the rest stays")
  }

  test("stop acks nothing for a reader that never took over, and a failing commit-log read leaves the batch queued") {
    val store = InMemoryStore.fresh()
    produce(store, 2)
    val (idle, _) = driverQueue(store)
    idle.peek()
    idle.stop(() => fail("a reader that never took over read the commit log"))
    val (q, _) = driverQueue(store)
    q.read()
    q.stop(() => throw new java.io.IOException("the checkpoint is gone")) // logged, not thrown over the query's end
    assert(head(store).firstSequence == 0)
  }

  test("a commit of a position found ahead of a reset queue acks nothing, once; one from another incarnation never") {
    val store = InMemoryStore.fresh()
    produce(store, 4)
    val (q, _) = driverQueue(store)
    val m = q.read()
    q.ignoreCommitOf(2)
    q.commit(end(2, m))
    q.commit(end(3, m, incarnation = Some(Incarnation.of(m.epoch) + 1)))
    q.stop(() => None)
    assert(head(store).firstSequence == 0)
    val (again, _) = driverQueue(store)
    val m2 = again.read()
    again.ignoreCommitOf(2)
    again.commit(end(2, m2))
    again.commit(end(2, m2)) // the reset queue reached sequence 2 itself: this one acks
    again.stop(() => None)
    assert(head(store).firstSequence == 2)
  }

  test("a commit ahead of the queue is data loss: an error, or counted and nothing dequeued") {
    val store = InMemoryStore.fresh()
    produce(store, 2)
    val (strict, _) = driverQueue(store)
    val m = strict.read()
    val e = intercept[Exception](strict.commit(end(5, m)))
    assert(e.getMessage.contains("OSQUEUE_DATA_LOSS") && e.getMessage.contains("has only assigned up to 1"))
    strict.stop(() => None)
    val (lenient, dataLoss) = driverQueue(store, failOnDataLoss = false)
    val m2 = lenient.read()
    lenient.commit(end(5, m2))
    lenient.stop(() => None)
    assert(dataLoss.count == 1 && head(store).firstSequence == 0)
  }

  test("a second reader fences the first: its next read fails with the fence error naming both epochs") {
    val store = InMemoryStore.fresh()
    produce(store, 2)
    val (first, _) = driverQueue(store)
    val e1 = first.read().epoch
    val (second, _) = driverQueue(store)
    assert(second.read().epoch == e1 + 1)
    val e = intercept[FencedException](first.read())
    assert(e.getMessage.contains(s"consumer with epoch $e1 was fenced") && e.getMessage.contains(s"now at epoch ${e1 + 1}"))
    first.stop(() => None)
    second.stop(() => None)
  }

  test("entryAt finds a queued entry of the tail, and nothing past the queue") {
    val store = InMemoryStore.fresh()
    produce(store, 3)
    val (q, _) = driverQueue(store)
    val m = q.read()
    assert(q.entryAt(m, 1).map(_.sequence).contains(1L))
    assert(q.entryAt(m, 3).isEmpty)
    q.stop(() => None)
  }

  test("a flipped byte in the head or in an index object fails the driver naming the object, before anything is planned") {
    // docs/adr/0006 items 1 and 3 (issue 28): the segmented head carries head_crc32, an index object
    // is checked against its ref's SHA-256. K = 2 (F = 2): 12 one-entry batches make index objects.
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour, manifestSegmentEntries = 2))
    try (0 until 12).foreach { b => p.produce(Seq(s"v$b".getBytes(UTF_8))); p.flush() }
    finally p.close()
    val key = location.manifestPath
    val good = store.get(key).get.bytes
    val m = head(store)
    val index = m.refs.find(_.isIndex).get
    def flipped(bytes: Array[Byte], at: Int) = { val b = bytes.clone(); b(at) = (b(at) ^ 1).toByte; b }
    for (at <- Seq(21, good.length - 10)) { // a ref's oldest_batch_ms, the footer's epoch: no other check sees them
      store.put(key, flipped(good, at))
      val (q, _) = driverQueue(store)
      val e = intercept[CorruptManifestException](q.peek())
      assert(e.key == key && e.getMessage.contains("head_crc32"))
      assert(intercept[CorruptManifestException](q.read()).key == key)
    }
    store.put(key, good)
    val indexBytes = store.get(index.key).get.bytes
    store.put(index.key, flipped(indexBytes, indexBytes.length / 2))
    val (q, _) = driverQueue(store)
    val e = intercept[CorruptManifestException](
      q.plan(q.peek(), index.firstSequence, index.lastSequence + 1, EntryTag.Delivered.Empty, failOnDataLoss = false, 0))
    assert(e.key == index.key)
  }
}
