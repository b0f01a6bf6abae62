package osqueue.store.gcs

import java.net.URI
import java.nio.file.{Files, Paths}

import scala.concurrent.duration._

import osqueue.InvalidConfigException
import osqueue.store.S3StoreConfig

/** How [[GcsStore]] authenticates. `toString` never shows a private key. */
sealed trait GcsCredentials
object GcsCredentials {
  /** The SDK's Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud, metadata server). */
  case object DefaultChain extends GcsCredentials
  /** No credentials (a local emulator, or public buckets). */
  case object Unauthenticated extends GcsCredentials
  /** A service account's JSON key file, at the same path on every node. */
  final case class JsonKeyFile(path: String) extends GcsCredentials
  /** A service account given inline (the GCS connector's email, private key id and PKCS#8 private key). */
  final case class ServiceAccountKey(email: String, privateKeyId: Option[String], privateKey: String) extends GcsCredentials {
    override def toString: String = s"ServiceAccountKey($email, ${privateKeyId.getOrElse("-")}, <private key>)"
  }
}

/**
 * Where and how [[GcsStore]] reaches Cloud Storage: the API root (None: Google's), the project,
 * credentials, timeouts, and the SDK retry budget of the non-conditional operations
 * (conditional writes are never retried by the SDK; see [[GcsStore]]).
 */
final case class GcsStoreConfig(
    rootUrl: Option[URI] = None,
    projectId: Option[String] = None,
    credentials: GcsCredentials = GcsCredentials.DefaultChain,
    connectTimeout: FiniteDuration = 20.seconds,
    readTimeout: FiniteDuration = 20.seconds,
    maxAttempts: Int = 11)

object GcsStoreConfig {
  val RootUrl = "fs.gs.storage.root.url"
  val ServicePath = "fs.gs.storage.service.path"
  val ProjectId = "fs.gs.project.id"
  val AuthType = "fs.gs.auth.type"
  val JsonKeyFile = "fs.gs.auth.service.account.json.keyfile"
  val Email = "fs.gs.auth.service.account.email"
  val PrivateKeyId = "fs.gs.auth.service.account.private.key.id"
  val PrivateKey = "fs.gs.auth.service.account.private.key"
  val ConnectTimeout = "fs.gs.http.connect-timeout"
  val ReadTimeout = "fs.gs.http.read-timeout"
  val MaxRetry = "fs.gs.http.max.retry"
  /** Options of the GCS connector that pick an identity we cannot reproduce: refused, by name. */
  val Unsupported: Seq[String] = Seq("fs.gs.auth.access.token.provider", "fs.gs.auth.access.token.provider.impl",
    "fs.gs.auth.impersonation.service.account", "fs.gs.auth.service.account.keyfile")

  /**
   * Reads the GCS connector's options Spark users already set (Hadoop's names and value forms),
   * each as is or with a `spark.hadoop.` prefix. Authentication follows `fs.gs.auth.type`
   * (`APPLICATION_DEFAULT`/`COMPUTE_ENGINE`: the SDK's default chain; `SERVICE_ACCOUNT_JSON_KEYFILE`;
   * `UNAUTHENTICATED`); without it, a key file or inline key when given, else the default chain.
   */
  def fromOptions(options: Map[String, String]): GcsStoreConfig = {
    def raw(name: String): Option[(String, String)] =
      List(name, s"spark.hadoop.$name").iterator
        .collectFirst { case k if options.contains(k) => (name, options(k).trim) }
        .filter(_._2.nonEmpty)
    def str(name: String): Option[String] = raw(name).map(_._2)
    def duration(name: String, default: FiniteDuration): FiniteDuration = raw(name) match {
      case Some((n, v)) =>
        val d = S3StoreConfig.parseDuration(n, v)
        if (d.length == 0) 365.days else d // the connector's 0: no timeout
      case None => default
    }

    for (name <- Unsupported; (n, v) <- raw(name))
      throw new InvalidConfigException(n, v,
        "osqueue talks to GCS through its own client and cannot use this way " +
          s"of authenticating; set $AuthType to SERVICE_ACCOUNT_JSON_KEYFILE with $JsonKeyFile, give $Email and " +
          s"$PrivateKey, or leave the auth options unset to use Application Default Credentials")
    raw(ServicePath).foreach { case (n, v) =>
      if (v.stripSuffix("/") != "storage/v1")
        throw new InvalidConfigException(n, v, "osqueue speaks the JSON API at storage/v1/ only; set the server with " + RootUrl)
    }
    val rootUrl = raw(RootUrl).map { case (n, v) => S3StoreConfig.parseEndpoint(n, v, ssl = true) }
    val keyFile = str(JsonKeyFile)
    val inline = (str(Email), str(PrivateKey)) match {
      case (Some(e), Some(k)) => Some(GcsCredentials.ServiceAccountKey(e, str(PrivateKeyId), k.replace("\\n", "\n")))
      case (Some(_), None) if keyFile.isEmpty =>
        throw new InvalidConfigException(PrivateKey, "", s"$Email is set, so the service account's private key is required too")
      case (None, Some(_)) =>
        throw new InvalidConfigException(Email, "", s"$PrivateKey is set, so the service account's email is required too")
      case _ => None
    }
    def fromKeyFile(option: String, path: String): GcsCredentials = {
      if (!Files.isReadable(Paths.get(path)))
        throw new InvalidConfigException(option, path, "the service account JSON key file does not exist or cannot be read")
      GcsCredentials.JsonKeyFile(path)
    }
    val credentials = raw(AuthType).map { case (n, v) => (n, v.toUpperCase(java.util.Locale.ROOT)) } match {
      case Some((_, "APPLICATION_DEFAULT" | "COMPUTE_ENGINE")) => GcsCredentials.DefaultChain
      case Some((_, "UNAUTHENTICATED")) => GcsCredentials.Unauthenticated
      case Some((n, "SERVICE_ACCOUNT_JSON_KEYFILE")) =>
        keyFile.map(fromKeyFile(JsonKeyFile, _)).orElse(inline)
          .getOrElse(throw new InvalidConfigException(JsonKeyFile, "",
              s"$n is SERVICE_ACCOUNT_JSON_KEYFILE, so the key file's path is required"))
      case Some((n, v)) =>
        throw new InvalidConfigException(n, v,
          "expected APPLICATION_DEFAULT, COMPUTE_ENGINE, SERVICE_ACCOUNT_JSON_KEYFILE or UNAUTHENTICATED")
      case None => keyFile.map(fromKeyFile(JsonKeyFile, _)).orElse(inline).getOrElse(GcsCredentials.DefaultChain)
    }
    val defaults = GcsStoreConfig()
    GcsStoreConfig(
      rootUrl = rootUrl,
      projectId = str(ProjectId),
      credentials = credentials,
      connectTimeout = duration(ConnectTimeout, defaults.connectTimeout),
      readTimeout = duration(ReadTimeout, defaults.readTimeout),
      // The connector's key counts retries; maxAttempts counts the first try too.
      maxAttempts = raw(MaxRetry).map { case (n, v) =>
        scala.util.Try(v.toInt).toOption.filter(r => r >= 0 && r < 1000).map(_ + 1)
          .getOrElse(throw new InvalidConfigException(n, v, "expected a whole number of retries >= 0"))
      }.getOrElse(defaults.maxAttempts))
  }
}
