package osqueue.queue

import java.util.concurrent.{CountDownLatch, TimeUnit}
import java.util.concurrent.atomic.{AtomicBoolean, AtomicInteger}

import scala.concurrent.{Await, Future}
import scala.concurrent.ExecutionContext.Implicits.global
import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{FencedException, SystemClock}
import osqueue.format.{BatchNames, ManifestHead}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.{CasOutcome, InMemoryStore, ObjectStore, ObjectVersion}
import osqueue.testing.{FaultInjectingStore, ForwardingStore}
import osqueue.testing.FaultInjectingStore.Fault

/** The dequeue off the consumer's critical path, and the dequeue's CAS against appending producers. */
class BackgroundDequeuerSuite extends AnyFunSuite {
  private val key = "ingest/manifest"
  private val fastRetry = RetryPolicy(baseDelayMs = 1, maxDelayMs = 5)

  private def appender(store: ObjectStore) =
    new ManifestAppender(new ManifestStore(store, key), fastRetry, SystemClock, new MetricsRegistry, 600000L)

  private def append(store: ObjectStore, n: Int = 1): Unit = {
    val a = appender(store)
    (1 to n).foreach { _ =>
      val k = BatchNames.newKey("ingest", SystemClock.nowMillis())
      store.put(k, Array[Byte](1))
      a.append(IndexedSeq(new PendingLocation(k, IndexedSeq.empty, () => k)))
    }
  }

  private def head(store: ObjectStore): ManifestHead = ManifestHead.parse(store.get(key).get.bytes, key)

  private def consumer(store: ObjectStore, metrics: MetricsRegistry = new MetricsRegistry,
      policy: RetryPolicy = fastRetry): QueueConsumer = {
    val c = new QueueConsumer(new ManifestStore(store, key), policy, SystemClock, metrics)
    c.initialize(None)
    c
  }

  /** Delegates to `inner`; `beforeManifestWrite` runs before every conditional write of the manifest. */
  private class Hooked(inner: ObjectStore, beforeManifestWrite: () => Unit = () => (),
      onPut: String => Unit = _ => ()) extends ForwardingStore(inner) {
    override def put(k: String, bytes: Array[Byte]): Unit = { onPut(k); inner.put(k, bytes) }
    override def putIfVersionMatches(k: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
      if (k == key) beforeManifestWrite()
      inner.putIfVersionMatches(k, bytes, expected)
    }
  }

  test("a dequeue wins its CAS although a producer appends during every receipts write") {
    // Models a producer appending every few tens of ms against 20 ms round trips: an append lands
    // while the consumer writes its dequeue receipts. Written inside each CAS attempt, the receipts
    // put every attempt's conditional write on a stale manifest, and the dequeue lost every round.
    val inner = InMemoryStore.fresh()
    append(inner, 5)
    val metrics = new MetricsRegistry
    val store = new Hooked(inner, onPut = k => if (k.endsWith(".dequeued")) append(inner))
    val c = consumer(store, metrics, RetryPolicy(baseDelayMs = 1, maxDelayMs = 5, maxAttempts = 10))
    assert(c.dequeueThrough(2))
    assert(head(inner).firstSequence == 3)
    assert(head(inner).nextSequence == 6) // the producer's append landed too
    assert(metrics.counterValue(MetricNames.ManifestConflicts, "role" -> "consumer") == 0)
  }

  test("requests return while a dequeue is in flight, coalesce, and never dequeue past the newest one") {
    val inner = InMemoryStore.fresh()
    append(inner, 10)
    val entered = new CountDownLatch(1)
    val release = new CountDownLatch(1)
    val first = new AtomicBoolean(false)
    val store = new Hooked(inner,
      beforeManifestWrite = () =>
        if (first.getAndSet(false)) { entered.countDown(); release.await(30, TimeUnit.SECONDS) })
    val d = new BackgroundDequeuer(consumer(store), "test", SystemClock)
    first.set(true) // the first dequeue write (not the consumer's takeover) is held
    try {
      d.request(0)
      assert(entered.await(30, TimeUnit.SECONDS), "the first dequeue did not start")
      // The first dequeue's write is held: later requests must not wait for it.
      Await.result(Future { d.request(2); d.request(4) }, 30.seconds)
      assert(head(inner).firstSequence == 0)
      release.countDown()
      assert(d.flush(30000))
      assert(head(inner).firstSequence == 5) // through 4: the newest request, not beyond
      assert(head(inner).nextSequence == 10)
      assert(d.dequeueRuns == 2) // through 0, then 2 and 4 in one write
    } finally { release.countDown(); d.close() }
  }

  test("under a producer appending all the time, every dequeue lands, exactly through what was asked") {
    val inner = InMemoryStore.fresh()
    append(inner, 1)
    val stop = new AtomicBoolean(false)
    val appends = new AtomicInteger()
    val producer = Future {
      while (!stop.get()) { append(inner); appends.incrementAndGet() }
    }
    val d = new BackgroundDequeuer(consumer(inner), "test", SystemClock)
    try {
      var asked = -1L
      (1 to 20).foreach { _ =>
        val next = head(inner).nextSequence
        asked = math.max(asked, next - 1)
        d.request(asked)
        SystemClock.sleepMillis(2)
      }
      assert(d.flush(30000))
      stop.set(true)
      Await.result(producer, 30.seconds)
      assert(head(inner).firstSequence == asked + 1)
      assert(head(inner).nextSequence > asked + 1, "the producer kept appending past the last request")
      assert(appends.get() > 0 && d.failedWith.isEmpty)
    } finally { stop.set(true); d.close() }
  }

  test("a fenced consumer's dequeuer stops, and the fence is raised on the next call") {
    val store = InMemoryStore.fresh()
    append(store, 5)
    val d = new BackgroundDequeuer(consumer(store), "test", SystemClock)
    try {
      consumer(store) // a newer consumer takes over
      d.request(2)
      assert(!d.flush(30000))
      assert(d.failedWith.exists(_.isInstanceOf[FencedException]))
      intercept[FencedException](d.checkFailed())
      intercept[FencedException](d.request(3))
      assert(head(store).firstSequence == 0) // nothing written by the fenced consumer
    } finally d.close()
  }

  test("a store failure leaves the entries queued and is tried again") {
    val inner = InMemoryStore.fresh()
    append(inner, 5)
    val store = new FaultInjectingStore(inner, (_, call) => if (call >= 1 && call <= 3) Fault.FailBefore else Fault.None)
    // One attempt per dequeue: the store's failures reach the dequeuer, which tries again later.
    val c = new QueueConsumer(new ManifestStore(store, key), RetryPolicy(maxAttempts = 1), SystemClock, new MetricsRegistry)
    c.initialize(None)
    val d = new BackgroundDequeuer(c, "test", SystemClock, retryDelayMs = 10)
    try {
      d.request(3)
      assert(d.flush(30000))
      assert(d.failedWith.isEmpty)
      assert(head(inner).firstSequence == 4)
      assert(store.injected.get() >= 1)
    } finally d.close()
  }

  test("flush gives up after its timeout while a dequeue cannot land") {
    val inner = InMemoryStore.fresh()
    append(inner, 3)
    val release = new CountDownLatch(1)
    val held = new AtomicBoolean(false)
    val store = new Hooked(inner, beforeManifestWrite = () => if (held.get()) { release.await(30, TimeUnit.SECONDS); () })
    val d = new BackgroundDequeuer(consumer(store), "test", SystemClock)
    held.set(true)
    try {
      d.request(1)
      assert(!d.flush(100))
      assert(head(inner).firstSequence == 0)
    } finally { release.countDown(); d.close() }
  }
}
