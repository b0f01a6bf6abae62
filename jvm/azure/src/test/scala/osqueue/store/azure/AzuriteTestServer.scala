package osqueue.store.azure

import java.nio.file.{Files, Paths}
import java.util.UUID
import java.util.concurrent.atomic.AtomicInteger

import scala.concurrent.duration._

import com.azure.core.http.jdk.httpclient.JdkHttpClientBuilder
import com.azure.storage.blob.{BlobServiceClient, BlobServiceClientBuilder}
import com.azure.storage.common.StorageSharedKeyCredential

import osqueue.testing.{LaunchedServer, S3TestServer}

/**
 * azurite (Azure Blob Storage's emulator) for tests, started through `tests/azure/azurite_server.py`,
 * which prints one JSON line when it is ready and stops azurite (whose state is in a temp dir) when
 * its stdin closes. Not installed (no node/npm at setup): [[AzuriteTestServer.missingReason]].
 */
final class AzuriteTestServer private (launched: LaunchedServer, val endpoint: String, val account: String, val accountKey: String)
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

  override def close(): Unit = launched.close()

}

object AzuriteTestServer {
  private def program: java.nio.file.Path = sys.env.get("OSQUEUE_AZURITE").map(Paths.get(_))
    .getOrElse(S3TestServer.repoRoot.resolve(".cache/azurite/node_modules/.bin/azurite-blob"))

  /** Why azurite cannot start here, or None: its tests are cancelled (reported skipped) with this reason. */
  lazy val missingReason: Option[String] =
    if (Files.isExecutable(program)) None
    else Some(s"azurite is not installed ($program): run .ci/setup.sh, which installs it with npm")

  def start(): AzuriteTestServer = {
    val launched = LaunchedServer.start("tests/azure/azurite_server.py", Nil, 90.seconds)
    import launched.field
    new AzuriteTestServer(launched, field("endpoint"), field("account"), field("account_key"))
  }
}
