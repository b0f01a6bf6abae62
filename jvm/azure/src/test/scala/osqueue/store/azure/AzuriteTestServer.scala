package osqueue.store.azure

import java.io.{BufferedReader, InputStreamReader}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}
import java.util.UUID
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.{CompletableFuture, TimeUnit}

import com.azure.core.http.jdk.httpclient.JdkHttpClientBuilder
import com.azure.storage.blob.{BlobServiceClient, BlobServiceClientBuilder}
import com.azure.storage.common.StorageSharedKeyCredential

import osqueue.testing.S3TestServer

/**
 * azurite (Azure Blob Storage's emulator) for tests, started through `tests/azure/azurite_server.py`,
 * which prints one JSON line when it is ready and stops azurite (whose state is in a temp dir) when
 * its stdin closes. Not installed (no node/npm at setup): [[AzuriteTestServer.missingReason]].
 */
final class AzuriteTestServer private (process: Process, val endpoint: String, val account: String, val accountKey: String)
    extends AutoCloseable {
  private val containers = new AtomicInteger()

  /** The host a queue path names: `abfss://<container>@<host>/prefix`. */
  val host: String = s"$account.dfs.core.windows.net"

  /** The `fs.azure.*` options a Spark user would set for this server. */
  def options: Map[String, String] = Map(
    AzureStoreConfig.Endpoint -> endpoint,
    s"${AzureStoreConfig.AccountKey}.$host" -> accountKey)

  def client(): BlobServiceClient = new BlobServiceClientBuilder().endpoint(endpoint)
    .credential(new StorageSharedKeyCredential(account, accountKey)).httpClient(new JdkHttpClientBuilder().build()).buildClient()

  /** Creates a container no other test uses and returns its name. */
  def freshContainer(): String = {
    val name = s"osq-${UUID.randomUUID().toString.take(8)}-${containers.incrementAndGet()}"
    client().createBlobContainer(name)
    name
  }

  override def close(): Unit = {
    try process.getOutputStream.close()
    catch { case _: java.io.IOException => () }
    if (!process.waitFor(10, TimeUnit.SECONDS)) process.destroyForcibly()
  }
}

object AzuriteTestServer {
  private val Field = """"(\w+)"\s*:\s*"([^"]*)"""".r
  private def program: java.nio.file.Path = sys.env.get("OSQUEUE_AZURITE").map(Paths.get(_))
    .getOrElse(S3TestServer.repoRoot.resolve(".cache/azurite/node_modules/.bin/azurite-blob"))

  /** Why azurite cannot start here, or None: its tests are cancelled (reported skipped) with this reason. */
  lazy val missingReason: Option[String] =
    if (Files.isExecutable(program)) None
    else Some(s"azurite is not installed ($program): run .ci/setup.sh, which installs it with npm")

  def start(): AzuriteTestServer = {
    val python = sys.env.getOrElse("OSQUEUE_PYTHON", "python3")
    val script = S3TestServer.repoRoot.resolve("tests/azure/azurite_server.py")
    val stderr = Files.createTempFile("osqueue-azurite-", ".log")
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
        firstLine.completeExceptionally(new IllegalStateException(s"the azurite launcher exited (code ${process.waitFor()})"))
      }, "azurite-stdout")
    reader.setDaemon(true)
    reader.start()
    val json =
      try firstLine.get(90, TimeUnit.SECONDS)
      catch {
        case e: Exception =>
          process.destroyForcibly()
          throw new IllegalStateException(s"azurite did not start: $e\n" + new String(Files.readAllBytes(stderr),
              StandardCharsets.UTF_8).takeRight(4000), e)
      }
    val fields = Field.findAllMatchIn(json).map(m => m.group(1) -> m.group(2)).toMap
    new AzuriteTestServer(process, fields("endpoint"), fields("account"), fields("account_key"))
  }
}
