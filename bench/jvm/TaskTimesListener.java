package osqueue.bench;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.AccumulableInfo;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart;

/**
 * The latency benchmark's view into a micro-batch's addBatch: one JSON line per SQL execution
 * start and end, job start and end, stage submitted and completed, and task end (its launch and
 * finish times, deserialization, run, result serialization and getting-result times, and its
 * accumulators whose name starts with "osqueue:"), appended to the given file. The harness groups
 * them by the streaming batch id Spark sets on each job. Compiled by
 * bench/harness/spark_benchmarks.py beside SeenWriter.
 */
public final class TaskTimesListener extends SparkListener {
  private final BufferedWriter out;

  public TaskTimesListener(String file) {
    try {
      out =
          Files.newBufferedWriter(
              Paths.get(file),
              StandardCharsets.UTF_8,
              StandardOpenOption.CREATE,
              StandardOpenOption.APPEND);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private synchronized void line(String json) {
    try {
      out.write(json);
      out.write("\n");
      out.flush();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static String str(String s) {
    return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  @Override
  public void onOtherEvent(SparkListenerEvent event) {
    if (event instanceof SparkListenerSQLExecutionStart) {
      SparkListenerSQLExecutionStart e = (SparkListenerSQLExecutionStart) event;
      line("{\"event\":\"sql_start\",\"exec\":" + e.executionId() + ",\"time\":" + e.time() + "}");
    } else if (event instanceof SparkListenerSQLExecutionEnd) {
      SparkListenerSQLExecutionEnd e = (SparkListenerSQLExecutionEnd) event;
      line("{\"event\":\"sql_end\",\"exec\":" + e.executionId() + ",\"time\":" + e.time() + "}");
    }
  }

  @Override
  public void onJobStart(SparkListenerJobStart e) {
    java.util.Properties p = e.properties();
    String batch = p == null ? null : p.getProperty("streaming.sql.batchId");
    String exec = p == null ? null : p.getProperty("spark.sql.execution.id");
    line(
        "{\"event\":\"job_start\",\"job\":"
            + e.jobId()
            + ",\"time\":"
            + e.time()
            + ",\"batch\":"
            + str(batch)
            + ",\"exec\":"
            + str(exec)
            + ",\"stages\":"
            + e.stageIds().size()
            + "}");
  }

  @Override
  public void onJobEnd(SparkListenerJobEnd e) {
    line("{\"event\":\"job_end\",\"job\":" + e.jobId() + ",\"time\":" + e.time() + "}");
  }

  @Override
  public void onStageSubmitted(SparkListenerStageSubmitted e) {
    StageInfo s = e.stageInfo();
    line(
        "{\"event\":\"stage_submitted\",\"stage\":"
            + s.stageId()
            + ",\"time\":"
            + (s.submissionTime().isDefined() ? s.submissionTime().get() : "null")
            + ",\"tasks\":"
            + s.numTasks()
            + "}");
  }

  @Override
  public void onStageCompleted(SparkListenerStageCompleted e) {
    StageInfo s = e.stageInfo();
    line(
        "{\"event\":\"stage_completed\",\"stage\":"
            + s.stageId()
            + ",\"time\":"
            + (s.completionTime().isDefined() ? s.completionTime().get() : "null")
            + "}");
  }

  @Override
  public void onTaskEnd(SparkListenerTaskEnd e) {
    TaskInfo t = e.taskInfo();
    TaskMetrics m = e.taskMetrics();
    StringBuilder acc = new StringBuilder();
    scala.collection.Iterator<AccumulableInfo> it = t.accumulables().iterator();
    while (it.hasNext()) {
      AccumulableInfo a = it.next();
      if (a.name().isDefined() && a.name().get().startsWith("osqueue:") && a.update().isDefined()) {
        if (acc.length() > 0) acc.append(",");
        acc.append(str(a.name().get())).append(":").append(str(String.valueOf(a.update().get())));
      }
    }
    line(
        "{\"event\":\"task_end\",\"stage\":"
            + e.stageId()
            + ",\"launch\":"
            + t.launchTime()
            + ",\"finish\":"
            + t.finishTime()
            + ",\"getting_result\":"
            + (t.gettingResult() ? t.gettingResultTime() : 0)
            + ",\"deserialize_ms\":"
            + (m == null ? 0 : m.executorDeserializeTime())
            + ",\"run_ms\":"
            + (m == null ? 0 : m.executorRunTime())
            + ",\"cpu_ns\":"
            + (m == null ? 0 : m.executorCpuTime())
            + ",\"result_ser_ms\":"
            + (m == null ? 0 : m.resultSerializationTime())
            + ",\"gc_ms\":"
            + (m == null ? 0 : m.jvmGCTime())
            + ",\"acc\":{"
            + acc
            + "}}");
  }
}
