// Issue 28's `jvm_spool` row (bench/harness/spool_benchmarks.py): the `spool` row's three producers
// with the JVM core's Producer, in one warm JVM. Run by `python -m bench.harness run --only jvm_spool`
// with Java's single-file source launcher and the core on the class path; nothing is added to jvm/.
//
//   java -cp <core class path> bench/jvm/SpoolProducers.java \
//        <uri> <entry bytes> <entries per call> <calls> <flush ms> <repeats> <warm-up calls> <spool parent dir> [k=v]...
//
// Per repeat, three runs one after the other, each on a fresh prefix: no spool ("off"), a spool with
// durability "local" (each produce() forced to the spool before it returns) and a spool with durability
// "queue" (the streaming path: the BATCH record's force before the batch's PUT covers the calls). A run
// times <calls> produce() calls of <entries per call> entries (built before the clock starts) as fast as
// they return, then waits for every handle and close(): its MB/s is over the whole run, as the Python
// row's. The entries are then decoded from the batch files the manifest lists (not timed) and the
// run's objects deleted (moto slows down as it holds more). First a warm-up of each mode (JIT), not
// reported. One JSON line per run on stdout.
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import osqueue.SystemClock$;
import osqueue.metrics.MetricsRegistry;
import osqueue.producer.Producer;
import osqueue.producer.ProducerConfig;
import osqueue.producer.ProducerConfig$;
import osqueue.producer.WriteHandle;
import osqueue.store.ObjectInfo;
import osqueue.store.ObjectStore;
import osqueue.store.ObjectStores;
import scala.Option;
import scala.concurrent.duration.Duration;
import scala.concurrent.duration.FiniteDuration;
import scala.jdk.javaapi.CollectionConverters;

public class SpoolProducers {
  static final String[] MODES = {"off", "local", "queue"};

  public static void main(String[] args) throws Exception {
    String uri = args[0];
    int entryBytes = Integer.parseInt(args[1]);
    int perCall = Integer.parseInt(args[2]);
    int calls = Integer.parseInt(args[3]);
    long flushMs = Long.parseLong(args[4]);
    int repeats = Integer.parseInt(args[5]);
    int warmupCalls = Integer.parseInt(args[6]);
    Path spoolParent = Paths.get(args[7]);
    HashMap<String, String> opts = new HashMap<>();
    for (int i = 8; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      opts.put(args[i].substring(0, eq), args[i].substring(eq + 1));
    }
    @SuppressWarnings("unchecked")
    scala.collection.immutable.Map<String, String> options =
        (scala.collection.immutable.Map<String, String>) scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(opts));

    // The caller's data, built once before any clock starts: every call the same entries.
    List<byte[]> entries = new ArrayList<>();
    for (int i = 0; i < perCall; i++) {
      byte[] e = new byte[entryBytes];
      Arrays.fill(e, (byte) 's');
      entries.add(e);
    }
    scala.collection.immutable.IndexedSeq<byte[]> call = CollectionConverters.asScala(entries).toIndexedSeq();

    if (warmupCalls > 0) {
      for (String mode : MODES) run(uri + "/warmup-" + mode, options, spoolParent, mode, call, warmupCalls, flushMs, -1);
    }
    for (int r = 0; r < repeats; r++) {
      for (String mode : MODES) run(uri + "/run-" + r + "-" + mode, options, spoolParent, mode, call, calls, flushMs, r);
    }
    System.exit(0);
  }

  static ProducerConfig config(long flushMs, String mode, Path spoolDir) {
    ProducerConfig$ d = ProducerConfig$.MODULE$;
    FiniteDuration flush = Duration.create(flushMs, TimeUnit.MILLISECONDS);
    Option<String> spool = mode.equals("off") ? Option.empty() : Option.apply(spoolDir.toString());
    String durability = mode.equals("off") ? "queue" : mode;
    return new ProducerConfig(
        d.apply$default$1(), d.apply$default$2(), flush, d.apply$default$4(), d.apply$default$5(),
        d.apply$default$6(), d.apply$default$7(), d.apply$default$8(), d.apply$default$9(),
        spool, durability, d.apply$default$12(), d.apply$default$13(), d.apply$default$14(),
        d.apply$default$15(), d.apply$default$16(), d.apply$default$17(), d.apply$default$18());
  }

  static void run(String uri, scala.collection.immutable.Map<String, String> options, Path spoolParent, String mode,
                  scala.collection.immutable.IndexedSeq<byte[]> call, int calls, long flushMs, int repeat) throws Exception {
    byte[] metadata = "bench".getBytes(StandardCharsets.US_ASCII);
    ObjectStore store = ObjectStores.open(uri, options);
    Path spoolDir = Files.createTempDirectory(spoolParent, "osq-bench-jvm-spool-");
    ProducerConfig config = config(flushMs, mode, spoolDir);
    FiniteDuration wait = Duration.create(10, TimeUnit.MINUTES);
    long[] returns = new long[calls];
    List<WriteHandle> handles = new ArrayList<>(calls);
    System.gc(); // the previous run's garbage is not this run's cost
    long t0 = System.nanoTime();
    Producer producer = new Producer(store, config, SystemClock$.MODULE$, new MetricsRegistry());
    for (int i = 0; i < calls; i++) {
      long c0 = System.nanoTime();
      handles.add(producer.produce(call, metadata));
      returns[i] = System.nanoTime() - c0;
    }
    long t1 = System.nanoTime();
    // Every handle durable, then close() (a close() while manifest writes are in flight can fail).
    for (WriteHandle h : handles) h.awaitDurable(wait);
    producer.close();
    long t2 = System.nanoTime();
    long decoded = decodedEntries(store);
    deleteAll(store);
    store.close();
    try (Stream<Path> walk = Files.walk(spoolDir)) {
      walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
    Arrays.sort(returns);
    long payload = (long) calls * call.size() * call.apply(0).length;
    System.out.println(String.format(java.util.Locale.ROOT,
        "{\"repeat\": %d, \"mode\": \"%s\", \"calls\": %d, \"entries\": %d, \"payload_bytes\": %d, \"elapsed_s\": %.6f, "
            + "\"calls_s\": %.6f, \"close_s\": %.6f, \"produce_p50_ms\": %.6f, \"produce_p99_ms\": %.6f, \"entries_decoded\": %d}",
        repeat, mode, calls, (long) calls * call.size(), payload, (t2 - t0) / 1e9, (t1 - t0) / 1e9, (t2 - t1) / 1e9,
        percentile(returns, 50) / 1e6, percentile(returns, 99) / 1e6, decoded));
    System.out.flush();
  }

  /** Nearest-rank percentile of sorted values. */
  static long percentile(long[] sorted, double p) {
    int rank = (int) Math.ceil(p / 100.0 * sorted.length);
    return sorted[Math.max(0, Math.min(sorted.length - 1, rank - 1))];
  }

  /** Entries decoded from the batch files the manifest lists. */
  static long decodedEntries(ObjectStore store) {
    osqueue.queue.ManifestStore ms = new osqueue.queue.ManifestStore(store, "ingest/manifest");
    long decoded = 0;
    for (osqueue.format.ManifestEntry e : CollectionConverters.asJava(ms.decode(ms.read()).entries())) {
      decoded += osqueue.format.BatchCodec.decode(store.get(e.location()).get().bytes(), e.location()).size();
    }
    return decoded;
  }

  static void deleteAll(ObjectStore store) {
    for (ObjectInfo o : CollectionConverters.asJava(store.list(""))) store.delete(o.key());
  }
}
