package osqueue.testing

import java.nio.file.{Files, Path, Paths}
import java.util.UUID
import java.util.concurrent.atomic.AtomicInteger

import scala.concurrent.duration._
import scala.util.Using

import software.amazon.awssdk.auth.credentials.{AwsBasicCredentials, StaticCredentialsProvider}
import software.amazon.awssdk.core.checksums.{RequestChecksumCalculation, ResponseChecksumValidation}
import software.amazon.awssdk.http.urlconnection.UrlConnectionHttpClient
import software.amazon.awssdk.regions.Region
import software.amazon.awssdk.services.s3.{S3Client, S3Configuration}

import osqueue.store.S3StoreConfig

/**
 * A real S3-compatible server for tests, started through `tests/s3/s3server.py` (a
 * [[LaunchedServer]]: its JSON line carries the endpoint, region, credentials and kind). The server
 * kind `$OSQUEUE_S3_KIND` (moto; localstack or ceph when installed). The launcher's stderr goes
 * to a temp file whose tail is shown if the server does not come up.
 */
final class S3TestServer private (
    launched: LaunchedServer,
    val endpoint: String,
    val region: String,
    val accessKey: String,
    val secretKey: String,
    val kind: String) extends AutoCloseable {

  private val buckets = new AtomicInteger()

  /** The `fs.s3a.*` options a Spark user would set for this server. */
  def options: Map[String, String] = Map(
    "fs.s3a.endpoint" -> endpoint,
    "fs.s3a.endpoint.region" -> region,
    "fs.s3a.access.key" -> accessKey,
    "fs.s3a.secret.key" -> secretKey,
    "fs.s3a.path.style.access" -> "true")

  def storeConfig: S3StoreConfig = S3StoreConfig.fromOptions(options)

  /** A plain SDK client for test setup (bucket creation, inspecting objects). Close it. */
  def newClient(): S3Client =
    S3Client.builder()
      .httpClientBuilder(UrlConnectionHttpClient.builder())
      .endpointOverride(java.net.URI.create(endpoint))
      .region(Region.of(region))
      .credentialsProvider(StaticCredentialsProvider.create(AwsBasicCredentials.create(accessKey, secretKey)))
      .serviceConfiguration(S3Configuration.builder().pathStyleAccessEnabled(true).chunkedEncodingEnabled(false).build())
      // As the store: Ceph RGW 16 answers 400 to the SDK's default aws-chunked, trailing-checksum uploads.
      .requestChecksumCalculation(RequestChecksumCalculation.WHEN_REQUIRED)
      .responseChecksumValidation(ResponseChecksumValidation.WHEN_REQUIRED)
      .build()

  /** Creates a bucket with a name no other test uses and returns the name. */
  def freshBucket(): String = {
    val name = s"osq-${UUID.randomUUID().toString.take(8)}-${buckets.incrementAndGet()}"
    Using.resource(newClient())(_.createBucket(b => b.bucket(name)))
    name
  }

  override def close(): Unit = launched.close()
}

object S3TestServer {

  /** One server for the whole test JVM, stopped when the JVM exits. */
  lazy val shared: S3TestServer = {
    val server = start()
    Runtime.getRuntime.addShutdownHook(new Thread(() => server.close()))
    server
  }

  /** The server kind of this test run: `$OSQUEUE_S3_KIND`, else moto. */
  def kind: String = sys.env.getOrElse("OSQUEUE_S3_KIND", "moto")

  private val CephPrograms = Seq("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph-authtool", "monmaptool", "ceph")

  /**
   * Why this run's server kind cannot start here, or None. Ceph installs only as root (.ci/setup.sh):
   * its tests are cancelled (reported as skipped) with this reason, never silently left out.
   */
  lazy val missingReason: Option[String] =
    if (kind != "ceph") None
    else {
      val path = sys.env.getOrElse("PATH", "").split(java.io.File.pathSeparator).toSeq
      val missing = CephPrograms.filterNot(p => path.exists(d => Files.isExecutable(Paths.get(d, p))))
      if (missing.isEmpty) None
      else Some(s"Ceph RGW is not installed (missing ${missing.mkString(", ")}): " +
        "apt-get install radosgw ceph-mon ceph-osd ceph-common, or run .ci/setup.sh as root")
    }

  /**
   * A loopback proxy in front of `upstream` that drops the given condition headers
   * (`tests/s3/ignoring_proxy.py`): an S3 store that accepts conditions and overwrites anyway; with
   * `spoilIfMatch`, one whose If-Match never matches (every If-Match is sent with a tag no object has).
   * Returns the proxy's endpoint; close the returned AutoCloseable to stop it.
   */
  def ignoringProxy(upstream: String, drop: String = "if-match,if-none-match", spoilIfMatch: Boolean = false): (String, AutoCloseable) = {
    val args = Seq("--upstream", upstream, "--drop", drop) ++ (if (spoilIfMatch) Seq("--spoil-if-match") else Nil)
    val proxy = LaunchedServer.start("tests/s3/ignoring_proxy.py", args, 30.seconds)
    (proxy.field("endpoint"), proxy)
  }

  /** Starts a server (the caller closes it). Fails, with the launcher's stderr, if it is not up in time. */
  def start(timeout: FiniteDuration = 180.seconds): S3TestServer = {
    val launched = LaunchedServer.start("tests/s3/s3server.py", Seq("--kind", kind), timeout)
    import launched.field
    new S3TestServer(launched, field("endpoint"), field("region"), field("access_key"), field("secret_key"),
      launched.fields.getOrElse("kind", kind))
  }

  /** The directory holding build.sbt, found by walking up from the working directory. */
  def repoRoot: Path = {
    var dir = Paths.get("").toAbsolutePath
    while (dir != null && !Files.isRegularFile(dir.resolve("build.sbt"))) dir = dir.getParent
    if (dir == null) throw new IllegalStateException(s"no build.sbt above ${Paths.get("").toAbsolutePath}")
    dir
  }
}
