package osqueue.queue

import scala.collection.mutable.ArrayBuffer
import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{AmbiguousCommitException, Clock, CorruptManifestException, StoreException, SystemClock}
import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.{BatchNames, ManifestHead, SegmentNames, SegmentRef}
import osqueue.gc.GarbageCollector
import osqueue.metrics.MetricsRegistry
import osqueue.store.{CasOutcome, InMemoryStore, ObjectInfo, ObjectStore, ObjectVersion, VersionedObject}
import osqueue.testing.{FaultInjectingStore, ForwardingStore, ManualClock}
import osqueue.testing.FaultInjectingStore.Fault

/**
 * Queues deep enough to fold segments into index objects (docs/format.md §2.2): small K, so F = 2
 * and every few seals add a level. Readers go through [[SegmentTree]]; consumers expand on dequeue;
 * GC keeps what is reachable and collects what a dequeue expanded.
 */
class SegmentTreeSuite extends AnyFunSuite {
  private val key = "ingest/manifest"
  private val fastRetry = RetryPolicy(baseDelayMs = 1, maxDelayMs = 5)
  private val grace = 10.minutes.toMillis

  private def appender(store: ObjectStore, k: Int, clock: Clock = SystemClock, policy: RetryPolicy = fastRetry) =
    new ManifestAppender(new ManifestStore(store, key), policy, clock, new MetricsRegistry, grace, segmentEntries = k)
  private def pending(store: ObjectStore, clock: Clock = SystemClock): PendingLocation = {
    val upload = () => { val k = BatchNames.newKey("ingest", clock.nowMillis()); store.put(k, Array[Byte](1)); k }
    new PendingLocation(upload(), IndexedSeq.empty, upload)
  }
  private def produce(store: ObjectStore, k: Int, n: Int, clock: Clock = SystemClock): IndexedSeq[String] = {
    val a = appender(store, k, clock)
    (0 until n).map { _ =>
      val p = pending(store, clock); a.append(IndexedSeq(p)); p.location
    }
  }
  private def head(store: ObjectStore): ManifestHead = ManifestHead.parse(store.get(key).get.bytes, key)
  private def tree(store: ObjectStore) = new SegmentTree(new ManifestStore(store, key))
  private def allLocations(store: ObjectStore): IndexedSeq[String] =
    new ManifestStore(store, key).decode(new ManifestStore(store, key).read()).entries.map(_.location)
  private def consumer(store: ObjectStore, ackBatchSize: Int = 100) =
    new Consumer(store, ConsumerConfig(runGc = false, ackBatchSize = ackBatchSize, retry = fastRetry))
  private def objects(store: ObjectStore) = store.list(SegmentNames.prefix(key)).map(_.key).toSet

  /** `inner`, running `race` once just before the first GET of `trigger` (between a reader's head read and that GET). */
  private def racing(inner: ObjectStore, trigger: String)(race: => Unit): ObjectStore = new ForwardingStore(inner) {
    private var raced = false
    override def get(k: String): Option[VersionedObject] = {
      if (k == trigger && !raced) { raced = true; race }
      inner.get(k)
    }
  }

  /** A consumer dequeues through `through`; the segments and index objects that dropped are deleted, as GC does. */
  private def dequeueAndCollect(store: ObjectStore, through: Long): Unit = {
    val before = tree(store).reachableKeys(head(store)).toOption.get
    val c = consumer(store)
    c.initialize()
    var acked = -1L
    while (acked < through) c.nextDescriptors((through - acked).toInt).foreach { d => c.ack(d.sequence); acked = d.sequence }
    c.close()
    val dropped = before -- tree(store).reachableKeys(head(store)).toOption.get
    assert(dropped.nonEmpty)
    dropped.foreach(store.delete)
  }

  test("entriesFollowing goes on from the head read again past a segment or index object dequeued and collected meanwhile") {
    for (gone <- Seq(0, 1)) { // the first segment (0-1), or the index object (2-5) of two segments
      val inner = InMemoryStore.fresh()
      val locations = produce(inner, 2, 9)
      val h = head(inner)
      assert(h.refs.map(_.level) == Seq(0, 1, 0))
      val store = racing(inner, h.refs(gone).key)(dequeueAndCollect(inner, 3))
      val manifests = new ManifestStore(store, key)
      val got = new SegmentTree(manifests).entriesFollowing(h, 0, _ => Some(manifests.head(manifests.read())))
        .map(_.location).toIndexedSeq
      assert(inner.get(h.refs(gone).key).isEmpty, "the race happened")
      assert(got == (if (gone == 0) Nil else locations.take(2)) ++ locations.drop(4), s"gone: ref $gone")
    }
  }

  test("entriesFollowing: an object the head read again still lists is corrupt; a reset ends the walk; a fence propagates") {
    val store = InMemoryStore.fresh()
    produce(store, 2, 9)
    val h = head(store)
    store.delete(h.refs(2).key)
    val e = intercept[CorruptManifestException](tree(store).entriesFollowing(h, 0, _ => Some(head(store))).toList)
    assert(e.key == h.refs(2).key && e.getMessage.contains("segment of") && e.getMessage.contains("listed but missing"))
    assert(tree(store).entriesFollowing(h, 0, _ => None).map(_.sequence).toList == (0L to 5L).toList)
    val fenced = new osqueue.FencedException(h.epoch, h.epoch + 1)
    assert(intercept[osqueue.FencedException](tree(store).entriesFollowing(h, 0, _ => throw fenced).toList) eq fenced)
  }

  test("leaves and leafFor walk index objects: every segment once, in order, and the one holding each sequence") {
    val store = InMemoryStore.fresh()
    produce(store, 2, 41) // 20 segments, tail 40
    val h = head(store)
    assert(h.refs.exists(_.level >= 3), h.refs.map(_.level))
    val t = tree(store)
    val all = t.leaves(h, 0, Long.MaxValue).toIndexedSeq
    assert(all.map(r => (r.firstSequence, r.lastSequence)) == (0L until 40L by 2).map(s => (s, s + 1)))
    assert(all.forall(_.level == 0))
    assert(t.leaves(h, 7, 12).map(_.firstSequence).toSeq == Seq(6L, 8L, 10L))
    assert(t.leaves(h, 7, 7).isEmpty && t.leaves(h, 40, 41).isEmpty)
    for (s <- 0L until 40L) assert(t.leafFor(h, s).map(_.firstSequence).contains(s / 2 * 2), s"sequence $s")
    assert(t.leafFor(h, 40).isEmpty)
  }

  test("leaves reads the index objects it reaches only: a range at the back reads none of the front's") {
    val inner = InMemoryStore.fresh()
    produce(inner, 2, 41)
    val reads = ArrayBuffer.empty[String]
    val store = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def get(k: String): Option[VersionedObject] = { reads += k; super.get(k) }
    }
    val h = head(inner)
    val t = tree(store)
    // refs: s0, an index of level 4 over sequences 2 to 33, one of level 1, a segment
    assert(h.refs.map(_.level) == Seq(0, 4, 1, 0))
    assert(t.leaves(h, 20, 22).map(_.firstSequence).toList == List(20L))
    // the walk down to [20, 21]: one index object per level on its path (4, 3, 2, 1), no segment
    assert(reads.forall(_.endsWith(".index")) && reads.size == 4, reads)
    reads.clear()
    assert(t.leaves(h, 38, 40).map(_.firstSequence).toList == List(38L) && reads.isEmpty)
  }

  test("a cached index object serves only a ref with its SHA-256: another ref of the same key is checked") {
    val store = InMemoryStore.fresh()
    produce(store, 2, 41)
    val t = tree(store)
    val index = head(store).refs.find(_.isIndex).get
    assert(t.children(index).nonEmpty) // decoded and cached
    val other = index.copy(sha256 = Array.fill[Byte](32)(7))
    val e = intercept[CorruptManifestException](t.children(other))
    assert(e.getMessage.contains(index.key) && e.getMessage.contains("SHA-256"), e.getMessage)
    assert(t.children(index).nonEmpty, "the right ref still reads")
  }

  test("a native consumer delivers every entry exactly once, in order, across index objects, with restarts (F = 2)") {
    val store = InMemoryStore.fresh()
    val produced = produce(store, 4, 4 * 2 * 2 * 5 + 3) // > F^2 K entries
    assert(head(store).refs.map(_.level).max >= 2)
    val delivered = ArrayBuffer.empty[(Long, String)]
    var lastAcked = Option.empty[Long]
    var incarnation = Option.empty[Long]
    var rounds = 0
    while (delivered.size < produced.size) {
      val c = consumer(store, ackBatchSize = 3)
      c.initialize(lastAcked, lastAcked.flatMap(_ => incarnation))
      incarnation = c.incarnation
      // read a few, ack them, restart: the dequeues expand the index objects they reach
      (0 until 7).foreach { _ =>
        c.nextDescriptors(1).foreach { d => delivered += (d.sequence -> d.location); c.ack(d.sequence); lastAcked = Some(d.sequence) }
      }
      c.close()
      val h = head(store)
      assert(!h.isSegmented || h.refs.head.level == 0)
      rounds += 1
    }
    assert(delivered.map(_._1) == produced.indices.map(_.toLong))
    assert(delivered.map(_._2) == produced)
    assert(rounds > 5 && head(store).isEmpty && !head(store).isSegmented)
  }

  test("a write whose reply was lost and that was folded into an index object since is found there (no duplicate)") {
    val inner = InMemoryStore.fresh()
    val other = appender(inner, 2)
    @volatile var armed = false
    // Applies the write, lets another producer append until it is sealed and folded, then loses the reply.
    val store = new ObjectStore {
      def uri: String = inner.uri
      def get(k: String): Option[VersionedObject] = inner.get(k)
      def put(k: String, b: Array[Byte]): Unit = inner.put(k, b)
      def putIfAbsent(k: String, b: Array[Byte]): CasOutcome = inner.putIfAbsent(k, b)
      def list(p: String): Seq[ObjectInfo] = inner.list(p)
      def delete(k: String): Unit = inner.delete(k)
      def putIfVersionMatches(k: String, b: Array[Byte], v: ObjectVersion): CasOutcome = {
        val outcome = inner.putIfVersionMatches(k, b, v)
        if (armed && k == key && outcome.isInstanceOf[CasOutcome.Written]) {
          armed = false
          (0 until 2).foreach(_ => other.append(IndexedSeq(pending(inner))))
          throw new StoreException("injected: reply lost")
        }
        outcome
      }
    }
    val a = appender(store, 2)
    (0 until 4).foreach(_ => a.append(IndexedSeq(pending(inner)))) // segment [0, 1], tail 2, 3
    val mine = pending(inner)
    armed = true
    assert(a.append(IndexedSeq(mine)) == IndexedSeq(4L))
    val h = head(inner)
    assert(h.refs.size == 2 && h.refs(1).isIndex && h.refs(1).contains(4), "sequence 4 sits in a segment under an index")
    val all = allLocations(inner)
    assert(all.count(_ == mine.location) == 1 && all.size == 7 && all(4) == mine.location)
  }

  test("GC keeps every reachable segment and index object, collects an index a dequeue expanded, and reads no segment") {
    val t0 = 1767225600000L
    val clock = new ManualClock(t0)
    val inner = InMemoryStore.fresh(clock)
    produce(inner, 2, 9, clock) // segments [0,1] [2,3] [4,5] [6,7], tail 8: s0, an index of level 1, s3
    val before = head(inner)
    assert(before.refs.map(_.level) == Seq(0, 1, 0))
    val store = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def get(k: String): Option[VersionedObject] =
        if (k.endsWith(".segment")) throw new StoreException("no segment reads") else super.get(k)
    }
    def gc() = new GarbageCollector(store, key, "ingest", grace.millis, clock).runOnce()
    clock.advance(grace + 1)
    val reachable = objects(inner)
    assert(reachable.size == 5)
    val kept = gc()
    assert(kept.deleted.isEmpty && objects(inner) == reachable && kept.missingIndex.isEmpty)
    // a consumer acks through 2: s0 is dropped, the index expanded into its two segments (one CAS)
    val c = consumer(inner)
    c.initialize(None)
    assert(c.nextDescriptors(100).map(_.sequence) == Seq(0L, 1L) && c.nextDescriptors(100).map(_.sequence) == Seq(2L, 3L))
    c.ackThrough(2)
    val after = head(inner)
    assert(after.refs.map(_.level) == Seq(0, 0, 0) && after.lowWater == 3)
    val r = gc()
    assert(r.deleted.toSet == Set(before.refs(0).key, before.refs(1).key), "s0 and the expanded index object")
    assert(objects(inner) == after.refs.map(_.key).toSet)
    assert(Iterator.continually(c.nextDescriptors(100)).takeWhile(_.nonEmpty).flatten.map(_.sequence).toSeq == (4L to 8L))
  }

  test("GC deletes no segment or index object in a cycle that finds an index object of its head missing") {
    val t0 = 1767225600000L
    val clock = new ManualClock(t0)
    val store = InMemoryStore.fresh(clock)
    produce(store, 2, 9, clock)
    val orphan = SegmentNames.newKey(key, t0 - 1)
    store.put(orphan, Array[Byte](1))
    val index = head(store).refs(1)
    store.delete(index.key) // as if a newer head expanded it and another GC collected it
    clock.advance(grace + 1)
    appender(store, 2, clock).append(IndexedSeq(pending(store, clock))) // the orphan is old by the head's time
    val r = new GarbageCollector(store, key, "ingest", grace.millis, clock).runOnce()
    assert(r.missingIndex.contains(index.key))
    assert(r.deleted.isEmpty && store.get(orphan).isDefined)
    // readers are told, never skip
    val e = intercept[CorruptManifestException](allLocations(store))
    assert(e.getMessage.contains(index.key) && e.getMessage.contains("listed but missing"))
  }

  test("a crash between the index object's write and the head CAS leaves orphans only; nothing lost or doubled") {
    val clock = new ManualClock(System.currentTimeMillis())
    val inner = InMemoryStore.fresh(clock)
    // K = 2: the 7th append seals the third segment and folds it with the second; its CAS fails
    val store = new FaultInjectingStore(inner, (k, n) => if (k == key && n == 6) Fault.FailBefore else Fault.None)
    val dying = appender(store, 2, clock, RetryPolicy(baseDelayMs = 1, maxDelayMs = 1, maxAttempts = 1))
    val first = IndexedSeq.fill(6)(pending(inner, clock))
    first.foreach(p => dying.append(IndexedSeq(p)))
    val seventh = pending(inner, clock)
    intercept[AmbiguousCommitException](dying.append(IndexedSeq(seventh)))
    val orphans = objects(inner) -- head(inner).refs.map(_.key)
    assert(orphans.size == 2 && orphans.exists(_.endsWith(".index")) && !head(inner).refs.exists(_.isIndex))
    appender(inner, 2, clock).append(IndexedSeq(seventh))
    assert(head(inner).refs.exists(_.isIndex))
    assert(allLocations(inner) == (first :+ seventh).map(_.location))
    clock.advance(grace + 1)
    val eighth = pending(inner, clock)
    appender(inner, 2, clock).append(IndexedSeq(eighth)) // GC ages files against a head written since
    val r = new GarbageCollector(inner, key, "ingest", grace.millis, clock).runOnce()
    assert(r.deleted.toSet == orphans)
    assert(allLocations(inner) == (first :+ seventh :+ eighth).map(_.location))
  }

  test("a dequeue whose expansion CAS conflicts with a producer's append is made again on the new head") {
    val inner = InMemoryStore.fresh()
    val produced = produce(inner, 2, 9)
    val other = appender(inner, 2)
    var conflicts = 0
    val store = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def putIfVersionMatches(k: String, b: Array[Byte], v: ObjectVersion): CasOutcome = {
        // the consumer's first dequeue CAS: a producer appends (and seals) in between
        if (k == key && conflicts == 0 && ManifestHead.parse(b, key).lowWater == 3) {
          conflicts += 1
          other.append(IndexedSeq(pending(inner)))
          other.append(IndexedSeq(pending(inner)))
        }
        super.putIfVersionMatches(k, b, v)
      }
    }
    val c = consumer(store)
    c.initialize(None)
    assert(c.nextDescriptors(3).map(_.sequence) == Seq(0L, 1L))
    assert(c.nextDescriptors(3).map(_.sequence) == Seq(2L, 3L))
    c.ackThrough(2)
    assert(conflicts == 1)
    val h = head(inner)
    assert(h.refs.head.level == 0 && h.lowWater == 3 && h.nextSequence == 11)
    assert(allLocations(inner).size == 8 && allLocations(inner).take(6) == produced.drop(3))
  }

  test("a seal and fold whose names went half a grace period stale during slow PUTs are made again under fresh names") {
    val clock = new ManualClock(1767225600000L)
    val inner = InMemoryStore.fresh()
    var slowPuts = 0 // segment PUTs that take `slowBy`
    var slowBy = grace / 2
    val store = new FaultInjectingStore(inner, (_, _) => Fault.None) {
      override def put(k: String, b: Array[Byte]): Unit = {
        super.put(k, b)
        if (k.endsWith(".segment") && slowPuts > 0) { slowPuts -= 1; clock.advance(slowBy); clock.advanceMonotonic(slowBy) }
      }
    }
    val a = appender(store, 2, clock)
    val first = (0 until 6).map { _ =>
      val p = pending(inner, clock); a.append(IndexedSeq(p)); p.location
    }
    // the 7th append seals [4, 5] and folds it with [2, 3]; its segment PUT is slow once
    slowPuts = 1
    val named = clock.nowMillis()
    val seventh = pending(inner, clock)
    a.append(IndexedSeq(seventh))
    val h = head(inner)
    val reachable = tree(inner).reachableKeys(h).toOption.get
    val orphans = objects(inner) -- reachable
    assert(orphans.size == 2 && orphans.exists(_.endsWith(".index")), "the stale segment and index are left unlisted")
    // the first try's segment was named before its slow PUT; what the head reaches now was named after it
    assert(orphans.filter(_.endsWith(".segment")).map(SegmentNames.ulidTimeMs(key, _).get) == Set(named))
    assert(h.refs.last.isIndex && SegmentNames.ulidTimeMs(key, h.refs.last.key).get >= named + grace / 2)
    assert(
      tree(inner).children(h.refs.last).forall(r => r.firstSequence < 4 || SegmentNames.ulidTimeMs(key, r.key).get >= named + grace / 2))
    assert(allLocations(inner) == first :+ seventh.location)
    // a batch that was fresh when the append began but aged past half the grace period during a
    // seal whose own objects stayed fresh is uploaded again before the CAS (§6)
    (0 until 1).foreach(_ => a.append(IndexedSeq(pending(inner, clock)))) // tail [6, 7]: the next append seals
    val ninth = pending(inner, clock)
    val uploaded = ninth.location
    clock.advance(grace / 4 + 1000)
    slowPuts = 1
    slowBy = grace / 4
    a.append(IndexedSeq(ninth))
    assert(ninth.location != uploaded && BatchNames.ulidTimeMs(ninth.location).get >= named + grace / 2)
    assert(allLocations(inner).last == ninth.location)
    // always slow: the append fails with StoreException and writes no head
    slowPuts = 100
    slowBy = grace / 2
    a.append(IndexedSeq(pending(inner, clock))) // tail [8, 9]: no seal
    val stuck = inner.get(key).get.bytes
    val e = intercept[StoreException](a.append(IndexedSeq(pending(inner, clock))))
    assert(e.getMessage.contains("half the GC grace period"))
    assert(inner.get(key).get.bytes.sameElements(stuck), "nothing appended")
  }

  test("the appender folds at F = max(2, K / 32): K = 96 folds three segments into one index object") {
    val store = InMemoryStore.fresh()
    val a = appender(store, 96)
    (0 until 4).foreach(_ => a.append(IndexedSeq.fill(96)(pending(store))))
    val h = head(store)
    assert(h.refs.map(_.level) == Seq(0, 0, 0)) // s0, s1, s2: no fold yet (s0 is never folded)
    a.append(IndexedSeq.fill(96)(pending(store)))
    assert(head(store).refs.map(_.level) == Seq(0, 1))
    assert(tree(store).children(head(store).refs(1)).size == 3)
  }
}
