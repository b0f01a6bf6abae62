// A JVM producer with a small K (ProducerConfig.manifestSegmentEntries), for the cross-language
// tests of segmented manifests (integration/test_interop.py; docs/format.md §2.2). QueueTool's
// produce takes no K, so this runs with Java's single-file source launcher and the core on the
// class path:
//
//   java -cp <core and its dependencies> integration/jvm/SegmentedProduce.java <uri> <tag> <count> <K> [k=v]...
//
// Entries are "<tag>-<i>" with metadata "<tag>", one per produce() call, each awaited before the
// next (one manifest write each: many seals). Prints "produced N entries".
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.concurrent.TimeUnit;

import osqueue.SystemClock$;
import osqueue.metrics.MetricsRegistry;
import osqueue.producer.Producer;
import osqueue.producer.ProducerConfig;
import osqueue.producer.ProducerConfig$;
import osqueue.store.ObjectStore;
import osqueue.store.ObjectStores;
import scala.concurrent.duration.Duration;
import scala.jdk.javaapi.CollectionConverters;

public class SegmentedProduce {
  public static void main(String[] args) throws Exception {
    String uri = args[0];
    String tag = args[1];
    int count = Integer.parseInt(args[2]);
    int k = Integer.parseInt(args[3]);
    HashMap<String, String> opts = new HashMap<>();
    for (int i = 4; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      opts.put(args[i].substring(0, eq), args[i].substring(eq + 1));
    }
    @SuppressWarnings("unchecked")
    scala.collection.immutable.Map<String, String> options =
        (scala.collection.immutable.Map<String, String>) scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(opts));
    ObjectStore store = ObjectStores.open(uri, options);
    ProducerConfig$ d = ProducerConfig$.MODULE$;
    ProducerConfig config = new ProducerConfig(d.apply$default$1(), d.apply$default$2(),
        Duration.create(5, TimeUnit.MILLISECONDS), d.apply$default$4(), d.apply$default$5(), d.apply$default$6(),
        d.apply$default$7(), d.apply$default$8(), k);
    Producer producer = new Producer(store, config, SystemClock$.MODULE$, new MetricsRegistry());
    byte[] meta = tag.getBytes(StandardCharsets.UTF_8);
    for (int i = 0; i < count; i++) {
      List<byte[]> entries = new ArrayList<>();
      entries.add((tag + "-" + i).getBytes(StandardCharsets.UTF_8));
      producer.produce(CollectionConverters.asScala(entries).toIndexedSeq(), meta)
          .awaitDurable(Duration.create(5, TimeUnit.MINUTES));
    }
    producer.close();
    store.close();
    System.out.println("produced " + count + " entries");
    System.exit(0);
  }
}
