package osqueue.metrics

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.BatchNames
import osqueue.gc.GarbageCollector
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.InMemoryStore
import osqueue.testing.ManualClock

/** The RFC 0002 names (`buffer.*`, see the reference digest §5) carry what a produce → consume → GC run did. */
class MetricsSuite extends AnyFunSuite {

  test("should report the RFC 0002 metrics of a produce, consume and GC run with plausible values") {
    val clock = new ManualClock(System.currentTimeMillis())
    val store = InMemoryStore.fresh(clock)
    val metrics = new MetricsRegistry
    val entries = Seq("a" * 10, "b" * 20).map(_.getBytes)
    val entryBytes = entries.map(_.length).sum

    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour), clock, metrics)
    (0 until 3).foreach { _ => p.produce(entries, "m".getBytes); p.flush() }
    p.close()
    val batchObjects = store.list("ingest/").filter(o => BatchNames.ulidTimeMs(o.key).isDefined)
    val s1 = metrics.snapshot()
    assert(s1("buffer.batches_flushed") == 3 && s1("buffer.entries_flushed") == 6)
    assert(s1("buffer.bytes_flushed") == 3 * (entryBytes + "m".length)) // records + metadata, as Python
    assert(s1("buffer.bytes_written") == batchObjects.map(o => store.get(o.key).get.bytes.length).sum)
    assert(s1("buffer.flush_duration_seconds_count") == 3 && s1("buffer.flush_duration_seconds_sum") > 0)
    // One flush = one landed manifest write, none contended.
    assert(s1("buffer.manifest_writes{role=producer}") == 3 && s1("buffer.manifest_conflicts{role=producer}") == 0)

    clock.advance(5000) // the consumer reads 5 s after ingestion
    val c = new Consumer(store, ConsumerConfig(runGc = false), clock, metrics)
    c.initialize()
    val batches = Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.toList
    val s2 = metrics.snapshot()
    assert(batches.size == 3)
    assert(s2("buffer.batches_collected") == 3 && s2("buffer.entries_collected") == 6)
    assert(s2("buffer.bytes_collected") == 3 * entryBytes)
    assert(s2("buffer.fetch_duration_seconds_count") == 3)
    assert(s2("buffer.consumer_lag_seconds") == 5)
    assert(s2("buffer.queue_length") == 3, "no entry was dequeued yet")
    batches.foreach(b => c.ack(b.sequence))
    c.flush()
    assert(c.nextBatch().isEmpty)
    val s3 = metrics.snapshot()
    assert(s3("buffer.acks") == 3 && s3("buffer.queue_length") == 0)
    // initialize (the epoch bump) and one dequeue; the producers' count is untouched.
    assert(s3("buffer.manifest_writes{role=consumer}") == 2 && s3("buffer.manifest_conflicts{role=consumer}") == 0)
    assert(s3("buffer.manifest_writes{role=producer}") == 3)
    c.close()

    clock.advance(1.hour.toMillis)
    // GC ages files against the head's store time: a head written an hour later lets the 3 go.
    val later = new Producer(store, ProducerConfig(flushInterval = 1.hour), clock, new MetricsRegistry)
    later.produce(entries); later.flush(); later.close()
    val gc = new GarbageCollector(store, "ingest/manifest", "ingest", 10.minutes, clock, metrics)
    assert(gc.runOnce().deleted.size == 3)
    val s4 = metrics.snapshot()
    assert(s4("buffer.gc_files_deleted") == 3 && s4("buffer.gc_files_failed") == 0)
    assert(s4("buffer.gc_duration_seconds_count") == 1 && s4("buffer.gc_duration_seconds_sum") >= 0)
    assert(s4.keys.forall(_.startsWith("buffer.")), s4.keys)
  }
}
