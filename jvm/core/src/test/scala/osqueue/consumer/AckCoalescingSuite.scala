package osqueue.consumer

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{FencedException, InvalidConfigException, SystemClock}
import osqueue.format.ManifestHead
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.queue.{ManifestStore, RetryPolicy, Subscriptions}
import osqueue.store.InMemoryStore
import osqueue.testing.ManualClock

/**
 * Ack coalescing (docs/adr/0005, "Ack coalescing"): with `ackInterval` a consumer acking every batch
 * writes the manifest at most once per interval; a read writes acks left pending once it passed;
 * flush/close write at once; `buffer.ack_writes` / `buffer.consumer_lag_entries` per subscription.
 * Python: tests/python/test_ack_coalescing.py. The interval is an hour and the test moves the
 * monotonic clock, so real time never triggers a write.
 */
class AckCoalescingSuite extends AnyFunSuite {
  private val Key = "ingest/manifest"
  private val Hour = 3600000L

  private def produce(store: InMemoryStore, n: Int): Unit = {
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour))
    (0 until n).foreach { i => p.produce(Seq(s"r$i".getBytes)); p.flush() }
    p.close()
  }
  private def next(store: InMemoryStore, name: String): Long =
    ManifestHead.parse(store.get(Key).get.bytes, Key).subscription(name).get.next
  private def writes(m: MetricsRegistry, sub: String): Long = m.counterValue(MetricNames.AckWrites, "subscription" -> sub)

  private def setup(n: Int): InMemoryStore = {
    val store = InMemoryStore.fresh()
    produce(store, n)
    new Subscriptions(new ManifestStore(store, Key), RetryPolicy(), SystemClock, new MetricsRegistry).create("a")
    store
  }

  test("acks per batch make at most one manifest write per interval; close writes the rest") {
    val store = setup(50)
    val clock = new ManualClock(0L)
    val m = new MetricsRegistry
    val c = new Consumer(store, ConsumerConfig(runGc = false, subscription = Some("a"), ackInterval = 1.hour), clock, m)
    c.initialize()
    val before = m.counterValue(MetricNames.ManifestWrites, "role" -> "consumer")
    (0 until 50).foreach { i =>
      val b = c.nextBatch().get
      if (i == 0) assert(m.snapshot()("buffer.consumer_lag_entries{subscription=a}") == 50.0)
      c.ack(b.sequence)
      if (i % 10 == 9) clock.advanceMonotonic(Hour / 10 * 3) // 0.3 h per 10 acks
    }
    // one write, at 1.2 h: the read of i = 40 wrote the acks through 39 (the first read past the interval)
    assert(writes(m, "a") == 1)
    assert(m.counterValue(MetricNames.ManifestWrites, "role" -> "consumer") - before == 1)
    assert(m.counterValue(MetricNames.Acks) == 50)
    assert(next(store, "a") == 40, "the write carried every ack before it")
    assert(c.nextBatch().isEmpty) // re-reads the head: nothing left to read, no write (0.3 h since the last)
    assert(writes(m, "a") == 1 && m.snapshot()("buffer.consumer_lag_entries{subscription=a}") == 0.0)
    c.close()
    assert(next(store, "a") == 50 && writes(m, "a") == 2)
  }

  test("a read writes the acks left pending once the interval passed; ackThrough coalesces; flush writes") {
    val store = setup(6)
    val clock = new ManualClock(0L)
    val m = new MetricsRegistry
    val c = new Consumer(store, ConsumerConfig(runGc = false, subscription = Some("a"), ackInterval = 1.hour), clock, m)
    c.initialize()
    val ds = c.nextDescriptors(3)
    c.ackThrough(ds(1).sequence)
    c.ackThrough(ds(2).sequence)
    assert(writes(m, "a") == 0 && next(store, "a") == 0)
    assert(c.nextDescriptors(3).size == 3) // inside the interval: no write
    assert(writes(m, "a") == 0)
    clock.advanceMonotonic(Hour)
    assert(c.nextDescriptors(3).isEmpty) // the first read after it writes the pending acks
    assert(writes(m, "a") == 1 && next(store, "a") == 3)
    c.ackThrough(5)
    c.flush()
    assert(writes(m, "a") == 2 && next(store, "a") == 6)
    c.close()
    assert(writes(m, "a") == 2)
  }

  test("a fenced reader learns it at its coalesced write, which lands nothing") {
    val store = setup(4)
    val clock = new ManualClock(0L)
    val old = new Consumer(store, ConsumerConfig(runGc = false, subscription = Some("a"), ackInterval = 1.hour), clock)
    old.initialize()
    old.ack(old.nextBatch().get.sequence)
    val rival = new Consumer(store, ConsumerConfig(runGc = false, subscription = Some("a")), clock)
    rival.initialize()
    clock.advanceMonotonic(Hour)
    intercept[FencedException](old.nextBatch())
    assert(next(store, "a") == 0)
    rival.close()
  }

  test("a negative ackInterval is refused, naming the option") {
    val e = intercept[InvalidConfigException](ConsumerConfig(ackInterval = -1.second))
    assert(e.getMessage.contains("ackInterval"))
  }
}
