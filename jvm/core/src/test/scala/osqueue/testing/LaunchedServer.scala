package osqueue.testing

import java.io.{BufferedReader, InputStreamReader}
import java.nio.charset.StandardCharsets
import java.nio.file.Files
import java.util.concurrent.{CompletableFuture, ExecutionException, TimeUnit, TimeoutException}

import scala.concurrent.duration.FiniteDuration

/**
 * A test server run by one of the project's stdlib-only launcher scripts (`tests/s3/s3server.py`,
 * `tests/gcs/gcsserver.py`, `tests/azure/azurite_server.py`, `tests/s3/ignoring_proxy.py`): the
 * launcher prints one JSON line when the server is ready and stops it when its stdin closes, so
 * closing our end of the pipe (or this JVM dying) tears the server down.
 */
final class LaunchedServer private (process: Process, val fields: Map[String, String], line: String) extends AutoCloseable {

  /** A field of the launcher's JSON line; fails naming the line when it is absent. */
  def field(name: String): String =
    fields.getOrElse(name, throw new IllegalStateException(s"no '$name' in the launcher's line: $line"))

  override def close(): Unit = {
    try process.getOutputStream.close()
    catch { case _: java.io.IOException => () }
    if (!process.waitFor(10, TimeUnit.SECONDS)) {
      process.descendants().forEach(p => { p.destroy(); () })
      process.destroy()
      if (!process.waitFor(5, TimeUnit.SECONDS)) process.destroyForcibly()
    }
  }
}

object LaunchedServer {
  private val Field = """"(\w+)"\s*:\s*"([^"]*)"""".r

  /** `$OSQUEUE_PYTHON`, else the project's .venv, else `python3`. */
  def python: String = {
    val venv = S3TestServer.repoRoot.resolve(".venv/bin/python")
    sys.env.getOrElse("OSQUEUE_PYTHON", if (Files.isExecutable(venv)) venv.toString else "python3")
  }

  /**
   * Runs `scriptPath` (relative to the checkout) with `args` and waits up to `timeout` for its JSON
   * line. Fails with the tail of the launcher's stderr (kept in a temp file) if none comes.
   */
  def start(scriptPath: String, args: Seq[String], timeout: FiniteDuration): LaunchedServer = {
    val script = S3TestServer.repoRoot.resolve(scriptPath)
    require(Files.isRegularFile(script), s"$script does not exist")
    val stderr = Files.createTempFile("osqueue-launcher-", ".log")
    val process = new ProcessBuilder((Seq(python, script.toString) ++ args): _*)
      .directory(S3TestServer.repoRoot.toFile)
      .redirectError(stderr.toFile)
      .start()
    val firstLine = new CompletableFuture[String]()
    val reader = new Thread(() => {
        // Reads the JSON line, then keeps draining stdout so the launcher never blocks on it.
        val in = new BufferedReader(new InputStreamReader(process.getInputStream, StandardCharsets.UTF_8))
        try {
          var line = in.readLine()
          while (line != null) {
            if (line.trim.startsWith("{")) firstLine.complete(line.trim)
            line = in.readLine()
          }
        } catch { case _: java.io.IOException => () }
        firstLine.completeExceptionally(new IllegalStateException(s"$scriptPath exited (code ${process.waitFor()})"))
      }, s"launcher-stdout-${script.getFileName}")
    reader.setDaemon(true)
    reader.start()
    val line =
      try firstLine.get(timeout.toMillis, TimeUnit.MILLISECONDS)
      catch {
        case e @ (_: TimeoutException | _: ExecutionException) =>
          process.destroyForcibly()
          val log = new String(Files.readAllBytes(stderr), StandardCharsets.UTF_8).takeRight(4000)
          throw new IllegalStateException(s"$python $script ${args.mkString(" ")} did not report a server within $timeout: $e\n$log", e)
      }
    new LaunchedServer(process, Field.findAllMatchIn(line).map(m => m.group(1) -> m.group(2)).toMap, line)
  }
}
