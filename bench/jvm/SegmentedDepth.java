// Issue 15's depth benchmark, JVM core: what an append and a delivered batch cost with D batches
// queued, on a segmented manifest (docs/format.md §2.2). Run by `python -m bench.harness run --only
// jvm_depth` (or directly) with Java's single-file source launcher and the core on the class path:
//
//   java -Xmx<heap> -cp <core classes and dependencies> bench/jvm/SegmentedDepth.java \
//        <store uri> <K> <appends> <deliveries> <depth>... [k=v store options]...
//
// Per depth D: the queue is built through the producers' own edit (ManifestHead.appended, which
// seals the tail into segments) in groups of K entries, then one group of K/2 (so the tail is at
// its average K/2 entries, not just after a seal), on the store given. Then:
//  - <appends> single-entry appends per queue, round-robin over the depths after 10 unmeasured
//    ones each, through ManifestAppender (GET the head, append, seal when the tail passes K,
//    conditional PUT): latency of each, and the bytes each one wrote (head, plus the segment when
//    it sealed);
//  - a Consumer (no GC) initializes and hands out <deliveries> descriptors one at a time
//    (nextDescriptors(1); acks every 1,000 with ackThrough): time per delivered descriptor (the
//    manifest work, not the batch GET: the batches do not exist), and the heap in use after a GC
//    while the consumer holds its buffer, minus the heap before it was created.
// One JSON line per depth on stdout. Locations are ULID batch names; no batch objects are written.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;

import osqueue.SystemClock$;
import osqueue.consumer.BatchDescriptor;
import osqueue.consumer.Consumer;
import osqueue.consumer.ConsumerConfig;
import osqueue.consumer.ConsumerConfig$;
import osqueue.format.BatchNames;
import osqueue.format.ManifestCodec;
import osqueue.format.ManifestHead;
import osqueue.format.MetadataItem;
import osqueue.format.NewEntry;
import osqueue.metrics.MetricsRegistry;
import osqueue.queue.ManifestAppender;
import osqueue.queue.ManifestAppender$;
import osqueue.queue.ManifestStore;
import osqueue.queue.PendingLocation;
import osqueue.queue.RetryPolicy;
import osqueue.queue.SegmentTree;
import osqueue.format.SegmentRef;
import osqueue.store.ObjectStore;
import osqueue.store.ObjectStores;
import scala.concurrent.duration.Duration;
import scala.jdk.javaapi.CollectionConverters;

public class SegmentedDepth {
  static final String MANIFEST = "ingest/manifest";
  static final long T0 = 1767225600000L;

  public static void main(String[] args) throws Exception {
    String uri = args[0];
    int k = Integer.parseInt(args[1]);
    int appends = Integer.parseInt(args[2]);
    int deliveries = Integer.parseInt(args[3]);
    List<Long> depths = new ArrayList<>();
    HashMap<String, String> opts = new HashMap<>();
    for (int i = 4; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      if (eq > 0) opts.put(args[i].substring(0, eq), args[i].substring(eq + 1));
      else depths.add(Long.parseLong(args[i]));
    }
    @SuppressWarnings("unchecked")
    scala.collection.immutable.Map<String, String> options =
        (scala.collection.immutable.Map<String, String>) scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(opts));
    List<Queue> queues = new ArrayList<>();
    for (long depth : depths) queues.add(build(uri + "/depth-" + depth + "-" + System.nanoTime(), k, depth, options));
    // Appends round-robin over the depths (load drift and JIT warm-up hit every depth alike),
    // after WARMUP unmeasured appends to each queue.
    for (int i = -WARMUP; i < appends; i++) for (Queue q : queues) q.append(i, appends);
    for (Queue q : queues) q.consume(deliveries);
    for (Queue q : queues) q.report(appends);
    System.exit(0);
  }

  static final int WARMUP = 10;

  static scala.collection.immutable.IndexedSeq<MetadataItem> meta() {
    List<MetadataItem> m = new ArrayList<>();
    m.add(new MetadataItem(0, T0, "m".getBytes(StandardCharsets.US_ASCII)));
    return CollectionConverters.asScala(m).toIndexedSeq();
  }

  /** Appends `n` entries in ONE edit through the producers' code path (sealing as a producer does). */
  static byte[] appendGroup(ManifestStore ms, byte[] raw, int n, int k, long now) {
    List<NewEntry> group = new ArrayList<>(n);
    for (int i = 0; i < n; i++) group.add(new NewEntry(BatchNames.newKey("ingest", now, osqueue.SystemRandomSource$.MODULE$), meta(), new byte[0]));
    scala.Tuple2<byte[], Object> r = ManifestHead.parse(raw, MANIFEST).appended(
        CollectionConverters.asScala(group).toSeq(), k, t -> ms.writeSegment(t, now), f -> ms.writeIndex(f, now));
    ms.store().put(MANIFEST, r._1());
    return r._1();
  }

  static Queue build(String uri, int k, long depth, scala.collection.immutable.Map<String, String> options) {
    ObjectStore store = ObjectStores.open(uri, options);
    ManifestStore ms = new ManifestStore(store, MANIFEST);
    long now = System.currentTimeMillis();
    long buildStart = System.nanoTime();
    byte[] raw = ManifestCodec.EmptyBytes();
    long built = 0;
    // Above K: whole groups of K (each seals the one before), then K/2 more: the tail sits at its
    // average K/2 entries (a depth of D rounded down to K * n + K/2).
    long target = depth > k ? (depth - k / 2) / k * k : depth;
    while (built < target) {
      int n = (int) Math.min(k, target - built);
      raw = appendGroup(ms, raw, n, k, now);
      built += n;
    }
    if (depth > k) { raw = appendGroup(ms, raw, k / 2, k, now); built += k / 2; }
    Queue q = new Queue();
    q.store = store; q.ms = ms; q.k = k; q.depth = built; q.head = ManifestHead.parse(raw, MANIFEST);
    q.buildS = (System.nanoTime() - buildStart) / 1e9;
    q.appender = new ManifestAppender(ms, new RetryPolicy(10, 1000, 1000, 30000), SystemClock$.MODULE$,
        new MetricsRegistry(), 600000L, "producer", () -> scala.runtime.BoxedUnit.UNIT,
        osqueue.SystemRandomSource$.MODULE$, k, ManifestAppender$.MODULE$.$lessinit$greater$default$10(),
        ManifestAppender$.MODULE$.$lessinit$greater$default$11(), ManifestAppender$.MODULE$.$lessinit$greater$default$12());
    return q;
  }

  static final class Queue {
    ObjectStore store; ManifestStore ms; ManifestAppender appender; ManifestHead head;
    int k; long depth; double buildS;
    double[] latMs; long[] written; int seals;
    long delivered; double consumeS; double initMs; long heapHeld;

    void append(int i, int appends) {
      if (latMs == null) { latMs = new double[appends]; written = new long[appends]; }
      String loc = BatchNames.newKey("ingest", System.currentTimeMillis(), osqueue.SystemRandomSource$.MODULE$);
      PendingLocation p = new PendingLocation(loc, meta(), () -> { throw new IllegalStateException("no re-upload"); }, new byte[0],
          scala.Option.apply(System.nanoTime()));
      ManifestHead before = ManifestHead.parse(store.get(MANIFEST).get().bytes(), MANIFEST);
      List<PendingLocation> g = new ArrayList<>();
      g.add(p);
      long t = System.nanoTime();
      appender.append(CollectionConverters.asScala(g).toIndexedSeq());
      double ms = (System.nanoTime() - t) / 1e6;
      if (i < 0) return; // warm-up
      latMs[i] = ms;
      ManifestHead after = ManifestHead.parse(store.get(MANIFEST).get().bytes(), MANIFEST);
      written[i] = after.raw().length;
      if (after.tailSize() <= before.tailSize()) { // it sealed: add the segment and any index objects it folded into
        seals++;
        java.util.Set<String> old = new java.util.HashSet<>();
        for (SegmentRef r : CollectionConverters.asJava(before.refs())) old.add(r.key());
        for (SegmentRef r : CollectionConverters.asJava(after.refs())) written[i] += newBytes(r, old);
      }
    }

    /** The bytes of `r` and of the objects below it that `old` (the keys listed before) does not hold. */
    long newBytes(SegmentRef r, java.util.Set<String> old) {
      if (old.contains(r.key())) return 0;
      long n = r.byteLength();
      if (r.isIndex()) for (SegmentRef c : CollectionConverters.asJava(new SegmentTree(ms, 64).children(r))) n += newBytes(c, old);
      return n;
    }

    void consume(int deliveries) throws Exception {
      System.gc();
      Thread.sleep(200);
      long heapBefore = usedHeap();
      Consumer c = new Consumer(store, new ConsumerConfig(MANIFEST, "ingest", 100, false,
          Duration.create(5, java.util.concurrent.TimeUnit.MINUTES), Duration.create(10, java.util.concurrent.TimeUnit.MINUTES),
          new RetryPolicy(10, 1000, 1000, 30000), scala.Option.empty(), false,
          scala.concurrent.duration.Duration.Zero(), ConsumerConfig$.MODULE$.apply$default$11(),
          ConsumerConfig$.MODULE$.apply$default$12()), SystemClock$.MODULE$, new MetricsRegistry());
      long t0 = System.nanoTime();
      c.initialize(scala.Option.empty(), scala.Option.empty());
      initMs = (System.nanoTime() - t0) / 1e6;
      long n = Math.min(deliveries, depth);
      long t = System.nanoTime();
      long last = -1;
      while (delivered < n) {
        scala.collection.immutable.IndexedSeq<BatchDescriptor> ds = c.nextDescriptors(1);
        if (ds.isEmpty()) break;
        last = ds.head().sequence();
        delivered++;
        if (delivered % 1000 == 0) c.ackThrough(last);
      }
      consumeS = (System.nanoTime() - t) / 1e9;
      System.gc();
      Thread.sleep(200);
      heapHeld = usedHeap() - heapBefore;
      if (last < 0) throw new IllegalStateException("nothing delivered");
      c.close();
    }

    void report(int appends) {
      double[] sorted = latMs.clone();
      Arrays.sort(sorted);
      long sumWritten = 0;
      for (long w : written) sumWritten += w;
      // the segments through the index objects (one GET per index); the levels the head's refs reach
      List<SegmentRef> segments = CollectionConverters.asJava(
          new SegmentTree(ms, 64).leaves(head, 0L, Long.MAX_VALUE).toSeq());
      int levels = 0;
      for (SegmentRef r : CollectionConverters.asJava(head.refs())) levels = Math.max(levels, r.level());
      System.out.println(String.format(
          "{\"depth\": %d, \"k\": %d, \"segments\": %d, \"refs\": %d, \"levels\": %d, \"tail\": %d, \"head_bytes\": %d, \"build_s\": %.1f, "
              + "\"append_latency_ms_median\": %.2f, \"append_latency_ms_p90\": %.2f, \"append_latency_ms_max\": %.2f, "
              + "\"appends\": %d, \"seals\": %d, \"bytes_written_per_append_mean\": %d, \"bytes_written_per_append_max\": %d, "
              + "\"consumer_initialize_ms\": %.1f, \"delivered\": %d, \"consumer_us_per_delivered\": %.2f, "
              + "\"consumer_heap_held_mb\": %.1f, \"max_heap_mb\": %d, \"seal_bytes_per_append_amortized\": %d}",
          depth, k, segments.size(), head.refs().size(), levels, head.tailSize(), head.raw().length, buildS,
          sorted[appends / 2], sorted[(int) (appends * 0.9)], sorted[appends - 1], appends, seals,
          sumWritten / appends, Arrays.stream(written).max().getAsLong(),
          initMs, delivered, consumeS * 1e6 / Math.max(1, delivered), heapHeld / 1048576.0,
          Runtime.getRuntime().maxMemory() >> 20,
          // a seal writes one segment of ~K entries every ~K appends (none of the measured ones may seal)
          segments.isEmpty() ? 0 : segments.get(segments.size() - 1).byteLength() / k));
    }
  }

  static long usedHeap() {
    Runtime r = Runtime.getRuntime();
    return r.totalMemory() - r.freeMemory();
  }
}
