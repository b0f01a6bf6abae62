// Benchmark 1 of issue 7 (bench/README.md): the JVM producer's MB/s against raw PUTs of objects of
// the same sizes through the same store (osqueue.store.S3Store: the AWS SDK v2 client the producer
// uses), timed inside one warm JVM. Run by `python -m bench.harness run --only raw_put` with Java's single-file
// source launcher and the connector jar on the class path; nothing is added to jvm/.
//
//   java -cp <connector jar>:<pyspark>/jars/* bench/jvm/ProducerVsRawPut.java \
//        <s3a://bucket/prefix> <entry bytes> <total bytes> <entries per call> <flush ms> <repeats> <warm-up bytes> [k=v]...
//
// Per repeat: (a) a Producer (flushInterval <flush ms>, defaults otherwise) gets <total bytes> of
// entries in produce() calls of <entries per call> entries (the entries are built before the clock
// starts), timed from the first produce() to close() (every batch uploaded and in the manifest);
// (b) the sizes of the batch files it wrote are listed and the same number of objects of exactly
// those sizes are PUT one after the other from one thread (the producer uploads from one flush
// thread too), timed from the first PUT to the last. The order of (a) and (b) alternates between
// repeats; each phase deletes its objects before the other starts (moto slows down as it holds
// more), and each timed phase starts after a System.gc(). One JSON line per repeat on stdout.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import osqueue.SystemClock$;
import osqueue.producer.Producer;
import osqueue.producer.ProducerConfig;
import osqueue.producer.ProducerConfig$;
import osqueue.producer.WriteHandle;
import osqueue.store.ObjectInfo;
import osqueue.store.ObjectStore;
import osqueue.store.ObjectStores;
import osqueue.metrics.MetricsRegistry;
import scala.concurrent.duration.Duration;
import scala.concurrent.duration.FiniteDuration;
import scala.jdk.javaapi.CollectionConverters;

public class ProducerVsRawPut {
  public static void main(String[] args) throws Exception {
    String uri = args[0];
    int entryBytes = Integer.parseInt(args[1]);
    long totalBytes = Long.parseLong(args[2]);
    int perCall = Integer.parseInt(args[3]);
    long flushMs = Long.parseLong(args[4]);
    int repeats = Integer.parseInt(args[5]);
    long warmupBytes = Long.parseLong(args[6]);
    HashMap<String, String> opts = new HashMap<>();
    for (int i = 7; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      opts.put(args[i].substring(0, eq), args[i].substring(eq + 1));
    }
    @SuppressWarnings("unchecked")
    scala.collection.immutable.Map<String, String> options =
        (scala.collection.immutable.Map<String, String>) scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(opts));

    if (warmupBytes > 0) run(uri + "/warmup", entryBytes, warmupBytes, perCall, flushMs, options, -1, true);
    for (int r = 0; r < repeats; r++) run(uri + "/run-" + r, entryBytes, totalBytes, perCall, flushMs, options, r, r % 2 == 0);
    System.exit(0);
  }

  static void run(String uri, int entryBytes, long totalBytes, int perCall, long flushMs,
                  scala.collection.immutable.Map<String, String> options, int repeat, boolean producerFirst) throws Exception {
    int count = (int) (totalBytes / entryBytes);
    // The caller's data, built before the clock starts: printable bytes, a counter in front.
    byte[] filler = new byte[entryBytes];
    Random rnd = new Random(repeat + 7);
    for (int i = 0; i < entryBytes; i++) filler[i] = (byte) ('a' + rnd.nextInt(26));
    List<scala.collection.immutable.IndexedSeq<byte[]>> calls = new ArrayList<>();
    for (int start = 0; start < count; start += perCall) {
      List<byte[]> entries = new ArrayList<>();
      for (int i = start; i < Math.min(start + perCall, count); i++) {
        byte[] e = Arrays.copyOf(filler, entryBytes);
        byte[] n = String.format("%010d", i).getBytes(StandardCharsets.US_ASCII);
        System.arraycopy(n, 0, e, 0, Math.min(n.length, e.length));
        entries.add(e);
      }
      calls.add(CollectionConverters.asScala(entries).toIndexedSeq());
    }
    byte[] metadata = "bench".getBytes(StandardCharsets.US_ASCII);
    long payload = (long) count * entryBytes;

    ObjectStore producerStore = ObjectStores.open(uri + "/producer", options);
    ObjectStore rawStore = ObjectStores.open(uri + "/raw", options);
    double producerS = 0, rawS = 0;
    List<Long> sizes = null;
    List<Long> producerSizes = null;
    long[] verified = null;
    // Each phase deletes what it wrote before the other starts: both see the same (empty) server.
    for (int phase = 0; phase < 2; phase++) {
      boolean producerPhase = (phase == 0) == producerFirst;
      if (producerPhase) {
        producerS = produce(producerStore, calls, metadata, flushMs);
        producerSizes = batchSizes(producerStore);
        verified = verify(producerStore);
        deleteAll(producerStore);
        if (sizes == null) sizes = producerSizes;
      } else {
        if (sizes == null) {
          // Raw first: the sizes come from a producer run made for that purpose (not timed).
          ObjectStore probe = ObjectStores.open(uri + "/probe", options);
          produce(probe, calls, metadata, flushMs);
          sizes = batchSizes(probe);
          deleteAll(probe);
          probe.close();
        }
        rawS = rawPuts(rawStore, sizes, repeat);
        deleteAll(rawStore);
      }
    }
    long batchBytes = 0;
    for (long s : producerSizes) batchBytes += s;
    long rawBytes = 0;
    for (long s : sizes) rawBytes += s;
    double encodeS = encodeOnly(calls, producerSizes.size());
    producerStore.close();
    rawStore.close();
    System.out.println(String.format(java.util.Locale.ROOT,
        "{\"repeat\": %d, \"producer_first\": %b, \"entries\": %d, \"payload_bytes\": %d, \"producer_s\": %.6f, "
            + "\"batches\": %d, \"batch_bytes\": %d, \"manifest_entries\": %d, \"entries_decoded\": %d, \"raw_objects\": %d, \"raw_bytes\": %d, \"raw_s\": %.6f, \"encode_s\": %.6f}",
        repeat, producerFirst, count, payload, producerS, producerSizes.size(), batchBytes, verified[0], verified[1], sizes.size(), rawBytes, rawS, encodeS));
    System.out.flush();
  }

  static double produce(ObjectStore store, List<scala.collection.immutable.IndexedSeq<byte[]>> calls, byte[] metadata, long flushMs) {
    FiniteDuration flush = Duration.create(flushMs, TimeUnit.MILLISECONDS);
    ProducerConfig config = new ProducerConfig(
        ProducerConfig$.MODULE$.apply$default$1(), ProducerConfig$.MODULE$.apply$default$2(), flush,
        ProducerConfig$.MODULE$.apply$default$4(), ProducerConfig$.MODULE$.apply$default$5(),
        ProducerConfig$.MODULE$.apply$default$6(), ProducerConfig$.MODULE$.apply$default$7(),
        ProducerConfig$.MODULE$.apply$default$8(), ProducerConfig$.MODULE$.apply$default$9(),
        ProducerConfig$.MODULE$.apply$default$10(), ProducerConfig$.MODULE$.apply$default$11(),
        ProducerConfig$.MODULE$.apply$default$12(), ProducerConfig$.MODULE$.apply$default$13(),
        ProducerConfig$.MODULE$.apply$default$14(), ProducerConfig$.MODULE$.apply$default$15(),
        ProducerConfig$.MODULE$.apply$default$16(), ProducerConfig$.MODULE$.apply$default$17(),
        ProducerConfig$.MODULE$.apply$default$18());
    FiniteDuration wait = Duration.create(10, TimeUnit.MINUTES);
    System.gc(); // the previous phase's garbage is not this phase's cost
    long t0 = System.nanoTime();
    Producer producer = new Producer(store, config, SystemClock$.MODULE$, new MetricsRegistry());
    List<WriteHandle> handles = new ArrayList<>(calls.size());
    for (scala.collection.immutable.IndexedSeq<byte[]> call : calls) handles.add(producer.produce(call, metadata));
    // Every handle durable (its batch uploaded and in the manifest), then close() (as QueueTool
    // does: a close() while manifest writes are still in flight can fail with "producer flush
    // thread is not running", because the flush thread exits before they complete).
    for (WriteHandle h : handles) h.awaitDurable(wait);
    long t1 = System.nanoTime();
    producer.close();
    return (t1 - t0) / 1e9;
  }

  static List<Long> batchSizes(ObjectStore store) {
    List<Long> sizes = new ArrayList<>();
    for (ObjectInfo o : CollectionConverters.asJava(store.list("ingest/"))) {
      if (o.key().endsWith(".batch")) sizes.add(o.size());
    }
    return sizes;
  }

  /** Entries in the manifest's footer and in the batch files it lists (decoded): both must equal the entries produced. */
  static long[] verify(ObjectStore store) {
    scala.Option<osqueue.store.VersionedObject> raw = store.get("ingest/manifest");
    if (raw.isEmpty()) return new long[] {0, 0};
    long manifestEntries = osqueue.format.ManifestCodec.decodeFooter(raw.get().bytes(), "ingest/manifest",
        osqueue.format.ManifestCodec.decodeFooter$default$3()).entryCount(); // Scala's default: version 1
    long decoded = 0;
    for (ObjectInfo o : CollectionConverters.asJava(store.list("ingest/"))) {
      if (!o.key().endsWith(".batch")) continue;
      decoded += osqueue.format.BatchCodec.decode(store.get(o.key()).get().bytes(), o.key()).size();
    }
    return new long[] {manifestEntries, decoded};
  }

  /** CPU time of BatchCodec.encode alone (no I/O) for the same entries cut into as many batches as the producer made. */
  static double encodeOnly(List<scala.collection.immutable.IndexedSeq<byte[]>> calls, int batches) {
    List<byte[]> all = new ArrayList<>();
    for (scala.collection.immutable.IndexedSeq<byte[]> c : calls) all.addAll(CollectionConverters.asJava(c));
    int per = (all.size() + Math.max(batches, 1) - 1) / Math.max(batches, 1);
    long t0 = System.nanoTime();
    for (int start = 0; start < all.size(); start += per) {
      List<byte[]> chunk = all.subList(start, Math.min(start + per, all.size()));
      osqueue.format.BatchCodec.encode(CollectionConverters.asScala(chunk).toIndexedSeq(), osqueue.format.Compression.None$.MODULE$);
    }
    return (System.nanoTime() - t0) / 1e9;
  }

  static double rawPuts(ObjectStore store, List<Long> sizes, int repeat) {
    List<byte[]> objects = new ArrayList<>();
    Random rnd = new Random(repeat + 11);
    for (long s : sizes) {
      byte[] b = new byte[(int) s];
      rnd.nextBytes(b);
      objects.add(b);
    }
    System.gc(); // the previous phase's garbage is not this phase's cost
    long t0 = System.nanoTime();
    for (int i = 0; i < objects.size(); i++) store.put(String.format("raw/%08d.bin", i), objects.get(i));
    return (System.nanoTime() - t0) / 1e9;
  }

  static void deleteAll(ObjectStore store) {
    for (ObjectInfo o : CollectionConverters.asJava(store.list(""))) store.delete(o.key());
  }
}
