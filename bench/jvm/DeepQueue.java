// Issue 15's Spark depth benchmark: builds a queue of D batches on a segmented manifest for the
// Spark source to drain (bench/harness/spark_depth.py). Run with Java's single-file source launcher
// and the core on the class path:
//
//   java -cp <core classes and dependencies> bench/jvm/DeepQueue.java <store uri> <K> <depth> \
//        <distinct batch files> <records per batch> <record bytes> [<store option>=<value> ...]
//
// (store options: fs.s3a.endpoint=..., fs.s3a.access.key=... for an s3a:// queue).
//
// Writes <distinct> real batch files (ULID names, <records> records of <bytes> each), then a
// manifest of <depth> entries whose locations cycle over those files, built through the producers'
// own edit (ManifestHead.appended, which seals the tail into segments) in groups of K entries:
// the same segments and head a producer fleet would leave, without a million batch files on disk.
// Every entry is a real batch the source fetches and decodes; the files are shared so that the
// shallow and the deep queue read the same bytes from the same (cached) files.
// Prints one JSON line: depth, segments, tail entries, head bytes, build time.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;

import osqueue.format.BatchCodec;
import osqueue.format.BatchNames;
import osqueue.format.ManifestCodec;
import osqueue.format.ManifestHead;
import osqueue.format.MetadataItem;
import osqueue.format.NewEntry;
import osqueue.queue.ManifestStore;
import osqueue.store.ObjectStore;
import osqueue.store.ObjectStores;
import scala.jdk.javaapi.CollectionConverters;

public class DeepQueue {
  static final String MANIFEST = "ingest/manifest";

  public static void main(String[] args) throws Exception {
    String uri = args[0];
    int k = Integer.parseInt(args[1]);
    long depth = Long.parseLong(args[2]);
    int distinct = Integer.parseInt(args[3]);
    int records = Integer.parseInt(args[4]);
    int recordBytes = Integer.parseInt(args[5]);
    HashMap<String, String> opts = new HashMap<>();
    for (int i = 6; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      if (eq <= 0) throw new IllegalArgumentException("expected <store option>=<value>, got '" + args[i] + "'");
      opts.put(args[i].substring(0, eq), args[i].substring(eq + 1));
    }
    @SuppressWarnings("unchecked")
    scala.collection.immutable.Map<String, String> options =
        (scala.collection.immutable.Map<String, String>) scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(opts));
    long t0 = System.nanoTime();
    ObjectStore store = ObjectStores.open(uri, options);
    ManifestStore ms = new ManifestStore(store, MANIFEST);
    long now = System.currentTimeMillis();
    String[] locations = new String[distinct];
    for (int b = 0; b < distinct; b++) {
      List<byte[]> rs = new ArrayList<>(records);
      for (int i = 0; i < records; i++) {
        byte[] r = new byte[recordBytes];
        byte[] id = (b + "-" + i).getBytes(StandardCharsets.US_ASCII);
        System.arraycopy(id, 0, r, 0, Math.min(id.length, r.length));
        rs.add(r);
      }
      locations[b] = BatchNames.newKey("ingest", now, osqueue.SystemRandomSource$.MODULE$);
      store.put(locations[b], BatchCodec.encode(CollectionConverters.asScala(rs).toSeq(), osqueue.format.Compression$.MODULE$.parse("compression", "none")));
    }
    List<MetadataItem> m = new ArrayList<>();
    m.add(new MetadataItem(0, now, "m".getBytes(StandardCharsets.US_ASCII)));
    scala.collection.immutable.IndexedSeq<MetadataItem> meta = CollectionConverters.asScala(m).toIndexedSeq();
    byte[] raw = ManifestCodec.EmptyBytes();
    long built = 0;
    while (built < depth) {
      int n = (int) Math.min(k, depth - built);
      List<NewEntry> group = new ArrayList<>(n);
      for (int i = 0; i < n; i++) group.add(new NewEntry(locations[(int) ((built + i) % distinct)], meta, new byte[0]));
      raw = ManifestHead.parse(raw, MANIFEST).appended(CollectionConverters.asScala(group).toSeq(), k,
          t -> ms.writeSegment(t, now), f -> ms.writeIndex(f, now))._1();
      built += n;
    }
    store.put(MANIFEST, raw);
    ManifestHead head = ManifestHead.parse(raw, MANIFEST);
    System.out.println(String.format("{\"depth\": %d, \"k\": %d, \"segments\": %d, \"tail\": %d, \"head_bytes\": %d, "
        + "\"distinct_batch_files\": %d, \"records_per_batch\": %d, \"build_s\": %.1f}",
        head.depth(), k, new osqueue.queue.SegmentTree(ms, 64).leaves(head, 0L, Long.MAX_VALUE).size(), head.tailSize(), raw.length, distinct, records,
        (System.nanoTime() - t0) / 1e9));
    store.close();
    System.exit(0);
  }
}
