package osqueue.queue

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{FencedException, IllegalQueueStateException, InvalidConfigException, ResumePointException, SystemClock}
import osqueue.consumer.{ConsumedBatch, Consumer, ConsumerConfig}
import osqueue.format.{HeadSections, ManifestHead, Retention}
import osqueue.metrics.MetricsRegistry
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.InMemoryStore
import osqueue.testing.FaultInjectingStore

/** Named subscriptions (docs/adr/0005) on the in-memory store: one CAS per edit, per-subscription fencing, L = slowest. */
class SubscriptionsSuite extends AnyFunSuite {
  private val Key = "ingest/manifest"

  private def produce(store: InMemoryStore, values: Seq[String]): Unit = {
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour))
    values.foreach { v => p.produce(Seq(v.getBytes)); p.flush() }
    p.close()
  }
  private def subs(store: InMemoryStore) = new Subscriptions(new ManifestStore(store, Key), RetryPolicy(), SystemClock, new MetricsRegistry)
  private def head(store: InMemoryStore) = ManifestHead.parse(store.get(Key).get.bytes, Key)
  private def consumer(store: InMemoryStore, sub: String, create: Boolean = false) =
    new Consumer(store, ConsumerConfig(runGc = false, ackBatchSize = 1, subscription = Some(sub), createSubscription = create))
  private def text(b: ConsumedBatch) = new String(b.entries.head)
  private def readAll(c: Consumer): List[ConsumedBatch] = Iterator.continually(c.nextBatch()).takeWhile(_.isDefined).flatten.toList

  test("should turn a v1 queue into v3 on create and back into the same v1 bytes on the last drop") {
    val store = InMemoryStore.fresh()
    produce(store, Seq("a", "b"))
    val v1 = store.get(Key).get.bytes
    val s = subs(store)
    val rec = s.create("reports")
    assert(rec.next == 0 && rec.incarnation >= 1 && (rec.epoch & 0xFFFFFFFFL) == 0)
    val h = head(store)
    assert(h.version == HeadSections.Version && h.subscription("reports").contains(rec) && h.depth == 2)
    assert(h.sections.unnamedReader.isEmpty, "no takeover in the footer: no unnamed reader record")
    assert(s.create("latest-one", Subscriptions.Latest).next == 2)
    assert(s.list().map(_.name) == IndexedSeq("latest-one", "reports"))
    intercept[IllegalQueueStateException](s.create("reports"))
    intercept[InvalidConfigException](s.create("no/slash"))
    assert(s.drop("latest-one") && s.drop("reports") && !s.drop("reports"))
    assert(store.get(Key).get.bytes.sameElements(v1), "a queue without subscriptions is RFC v1 byte for byte")
  }

  test("should keep the unnamed reader's entries when a queue it took over turns v3") {
    val store = InMemoryStore.fresh()
    produce(store, Seq("a", "b", "c"))
    val rfc = new Consumer(store, ConsumerConfig(runGc = false, ackBatchSize = 1))
    rfc.initialize()
    rfc.nextBatch(); rfc.ack(0)
    subs(store).create("s", Subscriptions.Latest)
    assert(head(store).sections.unnamedReader.map(_.next).contains(1L))
    // The RFC consumer goes on acking through its type-2 record; the subscription at 3 does not pin anything.
    assert(text(rfc.nextBatch().get) == "b"); rfc.ack(1)
    assert(head(store).firstSequence == 2 && head(store).sections.unnamedReader.map(_.next).contains(2L))
    rfc.close()
    // A new unnamed consumer resumes from its record, not from the queue's first entry.
    val again = new Consumer(store, ConsumerConfig(runGc = false, ackBatchSize = 1))
    again.initialize()
    assert(readAll(again).map(text) == List("c"))
    again.close()
    // Once its record is dropped, only the subscription (at 3) pins anything: entry 2 leaves.
    assert(subs(store).dropUnnamed() && !subs(store).dropUnnamed())
    assert(head(store).firstSequence == 3 && head(store).sections.unnamedReader.isEmpty)
  }

  test("JVM writers keep a retention section's queued_bytes: appends add, an ack's cut subtracts") {
    val store = InMemoryStore.fresh()
    subs(store).create("a")
    produce(store, Seq("0", "11", "222"))
    def sizeOf(h: ManifestHead) = new SegmentTree(new ManifestStore(store, Key)).bytesBetween(h, h.firstSequence, h.nextSequence)
    val h0 = head(store)
    val total = sizeOf(h0)
    assert(total > 0, "the producer writes integrity records")
    // The retention section as QueueRetention.set (Python) writes it: queued_bytes from the retained entries.
    val withRetention = h0.withReaders(h0.epoch,
      h0.sections.copy(retention = Some(Retention(0L, 1L << 20, 100L, 0, total))), _ => IndexedSeq.empty, cut = false)
    store.put(Key, withRetention)
    produce(store, Seq("3333"))
    assert(head(store).sections.retention.get.queuedBytes == sizeOf(head(store)), "the append added its bytes")
    val c = consumer(store, "a")
    c.initialize()
    readAll(c).take(2).foreach(b => c.ack(b.sequence))
    val h = head(store)
    assert(h.firstSequence == 2 && h.sections.retention.get.queuedBytes == sizeOf(h), "the cut subtracted its bytes")
    c.close()
  }

  test("two subscriptions each read every entry once; entries leave only after both passed them") {
    val store = InMemoryStore.fresh()
    val s = subs(store)
    s.create("a"); s.create("b")
    produce(store, Seq("0", "1", "2"))
    val a = consumer(store, "a"); val b = consumer(store, "b")
    a.initialize(); b.initialize()
    val seenA = scala.collection.mutable.Buffer.empty[String]
    val seenB = scala.collection.mutable.Buffer.empty[String]
    readAll(a).foreach { x => seenA += text(x); a.ack(x.sequence) }
    assert(head(store).firstSequence == 0 && head(store).depth == 3, "b has read nothing: nothing leaves")
    produce(store, Seq("3", "4")) // interleaved produce
    b.nextBatch().foreach { x => seenB += text(x); b.ack(x.sequence) }
    assert(head(store).firstSequence == 1)
    readAll(b).foreach { x => seenB += text(x); b.ack(x.sequence) }
    assert(head(store).firstSequence == 3, "a stopped at 3")
    readAll(a).foreach { x => seenA += text(x); a.ack(x.sequence) }
    assert(seenA == Seq("0", "1", "2", "3", "4") && seenB == seenA)
    assert(head(store).isEmpty && head(store).subscription("a").map(_.next).contains(5L))
    a.close(); b.close()
  }

  test("a second reader of one subscription fences the first; another subscription's reader fences nobody") {
    val store = InMemoryStore.fresh()
    produce(store, Seq("0", "1", "2"))
    subs(store).create("a"); subs(store).create("b")
    val a1 = consumer(store, "a"); a1.initialize()
    val b = consumer(store, "b"); b.initialize()
    assert(text(a1.nextBatch().get) == "0" && text(a1.nextBatch().get) == "1")
    a1.ack(0)
    val a2 = consumer(store, "a"); a2.initialize()
    assert(readAll(a2).map(text) == List("1", "2"), "the new reader resumes from the subscription's next")
    val e = intercept[FencedException](a1.ack(1)) // a fenced (zombie) reader's ack never lands
    assert(e.currentEpoch == head(store).subscription("a").get.epoch && e.ownEpoch == e.currentEpoch - 1)
    assert(head(store).subscription("a").get.next == 1)
    intercept[FencedException](a1.nextBatch()) // and it stays fenced
    assert(readAll(b).map(text) == List("0", "1", "2"), "readers of b are not fenced by a's takeover")
    b.ackThrough(2)
  }

  test("a dropped subscription fences its reader; a missing one is refused unless createSubscription") {
    val store = InMemoryStore.fresh()
    produce(store, Seq("0", "1"))
    val e = intercept[IllegalQueueStateException](consumer(store, "x").initialize())
    assert(e.getMessage.contains("no subscription 'x'"))
    val c = consumer(store, "x", create = true)
    c.initialize()
    assert(text(c.nextBatch().get) == "0")
    subs(store).drop("x")
    val f = intercept[FencedException](c.ack(0))
    assert(f.getMessage.contains("subscription 'x' was dropped"))
    assert(head(store).version == 1)
  }

  test("lost replies: create and drop settle on the write that landed, and a lost ack reply is not applied twice") {
    for (fault <- Seq(FaultInjectingStore.Fault.ApplyThenError, FaultInjectingStore.Fault.ApplyThenPreconditionFailed)) {
      val mem = InMemoryStore.fresh()
      produce(mem, Seq("0", "1", "2"))
      @volatile var armed = true
      val store = new FaultInjectingStore(mem,
        (k, _) =>
          if (armed && k == Key) { armed = false; fault }
          else FaultInjectingStore.Fault.None)
      val s = new Subscriptions(new ManifestStore(store, Key), RetryPolicy(), SystemClock, new MetricsRegistry)
      val rec = s.create("a") // lands, its reply lost: not "exists"
      assert(s.list() == IndexedSeq(rec), fault)
      s.create("b")
      val c = new Consumer(store, ConsumerConfig(runGc = false, ackBatchSize = 1, subscription = Some("a")))
      c.initialize()
      c.nextBatch(); c.nextBatch()
      armed = true
      c.ackThrough(1)
      assert(head(mem).subscription("a").map(_.next).contains(2L) && head(mem).firstSequence == 0, fault)
      armed = true
      assert(s.drop("b"), s"$fault: a drop whose reply was lost still reports the drop")
      assert(head(mem).firstSequence == 2 && s.list().map(_.name) == IndexedSeq("a"), fault)
    }
  }

  test("a resume point moves the subscription's next, and one of another incarnation is refused") {
    val store = InMemoryStore.fresh()
    produce(store, Seq("0", "1", "2"))
    val inc = subs(store).create("a").incarnation
    subs(store).create("b")
    val c = consumer(store, "a")
    c.initialize(Some(1L), Some(inc))
    assert(readAll(c).map(text) == List("2"))
    assert(head(store).subscription("a").get.next == 2 && head(store).firstSequence == 0)
    intercept[ResumePointException](consumer(store, "a").initialize(Some(1L), Some(inc + 1)))
    intercept[ResumePointException](consumer(store, "a").initialize(Some(3L), Some(inc)))
  }
}
