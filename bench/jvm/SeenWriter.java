package osqueue.bench;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

/**
 * The latency benchmark's JVM sink for real-time mode: for each row ("key:produce_ns" in its
 * first column, binary) appends "key produce_ns seen_s" to seen-EPOCH-PARTITION-jvm.log in the
 * given directory, flushed per row: the same lines the Python ForeachWriter writes, without the
 * hand-over of rows to a Python worker. Compiled by bench/harness/spark_benchmarks.py.
 */
public final class SeenWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;
  private final String dir;
  private transient BufferedWriter out;

  public SeenWriter(String dir) {
    this.dir = dir;
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    Path file = Paths.get(dir, "seen-" + epochId + "-" + partitionId + "-jvm.log");
    try {
      out =
          Files.newBufferedWriter(
              file, StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return true;
  }

  @Override
  public void process(Row row) {
    Instant seen = Instant.now(); // wall clock, the same as the producer's time.time_ns()
    String[] keyAndTs = new String((byte[]) row.get(0), StandardCharsets.UTF_8).split(":");
    double seenS = seen.getEpochSecond() + seen.getNano() / 1e9;
    try {
      out.write(keyAndTs[0] + " " + keyAndTs[1] + " " + String.format("%.6f", seenS) + "\n");
      out.flush();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public void close(Throwable error) {
    try {
      if (out != null) out.close();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
