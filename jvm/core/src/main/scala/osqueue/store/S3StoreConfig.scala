package osqueue.store

import java.net.URI

import scala.concurrent.duration._

import osqueue.{Durations, InvalidConfigException}

/** Static S3 credentials. `toString` never shows the secrets. */
final case class S3Credentials(accessKey: String, secretKey: String, sessionToken: Option[String] = None) {
  override def toString: String = s"S3Credentials($accessKey, <secret>${if (sessionToken.isDefined) ", <session token>" else ""})"
}

/**
 * How [[S3Store]] reaches its server: endpoint, region, credentials and timeouts.
 *
 * `endpoint = None` means AWS itself; `region = None` means the SDK's region chain (with
 * cross-region access, as S3A does). `credentials = None` means the SDK's default credentials
 * chain (environment, profile, container/instance role). `requestTimeout` bounds one HTTP
 * attempt (None: only the socket timeout applies); `maxAttempts` is the SDK retry budget of
 * the non-conditional operations (conditional PUTs are never retried by the SDK).
 */
final case class S3StoreConfig(
    endpoint: Option[URI] = None,
    region: Option[String] = None,
    credentials: Option[S3Credentials] = None,
    pathStyleAccess: Boolean = false,
    connectTimeout: FiniteDuration = 10.seconds,
    socketTimeout: FiniteDuration = 60.seconds,
    requestTimeout: Option[FiniteDuration] = Some(60.seconds),
    maxAttempts: Int = 3)

object S3StoreConfig {
  /**
   * Reads the S3A options Spark users already set (docs/format.md §1 stores; Hadoop's names and
   * value forms). Each key is accepted as is or with a `spark.hadoop.` prefix, and a per-bucket
   * `fs.s3a.bucket.<bucket>.<option>` overrides `fs.s3a.<option>` (as in S3A).
   */
  def fromOptions(options: Map[String, String], bucket: String = "", env: Map[String, String] = sys.env): S3StoreConfig = {
    def raw(name: String): Option[(String, String)] = {
      val perBucket = if (bucket.isEmpty) Nil else List(s"fs.s3a.bucket.$bucket.${name.stripPrefix("fs.s3a.")}")
      (perBucket :+ name).iterator
        .flatMap(k => List(k, s"spark.hadoop.$k"))
        .collectFirst { case k if options.contains(k) => (name, options(k).trim) }
        .filter(_._2.nonEmpty)
    }
    def str(name: String): Option[String] = raw(name).map(_._2)
    def bool(name: String): Option[Boolean] = raw(name).map {
      case (_, v) if v.equalsIgnoreCase("true") => true
      case (_, v) if v.equalsIgnoreCase("false") => false
      case (n, v) => throw new InvalidConfigException(n, v, "expected true or false")
    }
    def duration(name: String): Option[FiniteDuration] = raw(name).map { case (n, v) => parseDuration(n, v) }

    val ssl = bool("fs.s3a.connection.ssl.enabled").getOrElse(true)
    val endpoint = raw("fs.s3a.endpoint").map { case (n, v) => parseEndpoint(n, v, ssl) }
    val region = str("fs.s3a.endpoint.region").orElse(str("fs.s3a.region"))
      .orElse(endpoint.map(_ => env.get("AWS_REGION").filter(_.nonEmpty).getOrElse("us-east-1")))
    val credentials = (str("fs.s3a.access.key"), str("fs.s3a.secret.key")) match {
      case (Some(a), Some(s)) => Some(S3Credentials(a, s, str("fs.s3a.session.token")))
      case (None, None) => None
      case (Some(_), None) =>
        throw new InvalidConfigException("fs.s3a.secret.key", "", "fs.s3a.access.key is set, so the secret key is required too")
      case (None, Some(_)) =>
        throw new InvalidConfigException("fs.s3a.access.key", "", "fs.s3a.secret.key is set, so the access key is required too")
    }
    raw(CredentialsProviderOption).foreach { case (n, v) => checkCredentialsProviders(n, v) }
    val defaults = S3StoreConfig()
    S3StoreConfig(
      endpoint = endpoint,
      region = region,
      credentials = credentials,
      pathStyleAccess = bool("fs.s3a.path.style.access").getOrElse(false),
      connectTimeout = duration("fs.s3a.connection.establish.timeout").getOrElse(defaults.connectTimeout),
      socketTimeout = duration("fs.s3a.connection.timeout").getOrElse(defaults.socketTimeout),
      // As in S3A, a request timeout of 0 means none.
      requestTimeout = duration("fs.s3a.connection.request.timeout") match {
        case Some(d) if d.length == 0 => None
        case Some(d) => Some(d)
        case None => defaults.requestTimeout
      },
      // S3A's key counts retries; maxAttempts counts the first try too.
      maxAttempts = raw("fs.s3a.attempts.maximum").map { case (n, v) =>
        v.toIntOption.filter(r => r >= 0 && r < 1000).map(_ + 1)
          .getOrElse(throw new InvalidConfigException(n, v, "expected a whole number of retries >= 0"))
      }.getOrElse(defaults.maxAttempts)
    )
  }

  val CredentialsProviderOption = "fs.s3a.aws.credentials.provider"

  /**
   * S3A credential providers that ask for nothing beyond what we do: the static keys we read
   * (`fs.s3a.access.key`/`secret.key`/`session.token`) or a source of the SDK's default chain
   * (environment, profile, web identity, container and instance roles). Hadoop's own default
   * list is made of these, so a configuration carrying it (or any subset) is accepted.
   */
  // Built at run time: the jar's shading rewrites "software.amazon.awssdk.*" string constants to
  // the relocated package, and user configurations name the original classes.
  private val SdkV2Credentials = Seq("software", "amazon", "awssdk", "auth", "credentials").mkString(".")

  val EquivalentCredentialsProviders: Set[String] = Set(
    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider",
    "com.amazonaws.auth.EnvironmentVariableCredentialsProvider",
    "com.amazonaws.auth.InstanceProfileCredentialsProvider",
    "com.amazonaws.auth.EC2ContainerCredentialsProviderWrapper",
    "com.amazonaws.auth.WebIdentityTokenCredentialsProvider",
    "com.amazonaws.auth.DefaultAWSCredentialsProviderChain",
    "com.amazonaws.auth.profile.ProfileCredentialsProvider",
    s"$SdkV2Credentials.EnvironmentVariableCredentialsProvider",
    s"$SdkV2Credentials.SystemPropertyCredentialsProvider",
    s"$SdkV2Credentials.InstanceProfileCredentialsProvider",
    s"$SdkV2Credentials.ContainerCredentialsProvider",
    s"$SdkV2Credentials.WebIdentityTokenFileCredentialsProvider",
    s"$SdkV2Credentials.ProfileCredentialsProvider",
    s"$SdkV2Credentials.DefaultCredentialsProvider")

  /**
   * Any other provider (assumed role, anonymous, a custom class) would pick an identity we
   * cannot reproduce: ignoring it would sign with another identity, so it is refused, by name.
   */
  private def checkCredentialsProviders(option: String, value: String): Unit = {
    val unsupported = value.split(',').map(_.trim).filter(_.nonEmpty).filterNot(EquivalentCredentialsProviders)
    if (unsupported.nonEmpty)
      throw new InvalidConfigException(option, value,
        s"osqueue talks to S3 through its own AWS SDK client and cannot load S3A credential providers; " +
          s"unsupported: ${unsupported.mkString(", ")}. Set fs.s3a.access.key/fs.s3a.secret.key " +
          "(and fs.s3a.session.token), or leave the option unset (or list only standard providers) to use " +
          "the SDK's default chain (environment, profile, web identity, container or instance role), " +
          "e.g. AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE or a profile with role_arn for an assumed role")
  }

  /** A host[:port] (scheme from `ssl`) or an http(s) URL. */
  private[store] def parseEndpoint(option: String, value: String, ssl: Boolean): URI = {
    val withScheme = if (value.contains("://")) value else (if (ssl) "https://" else "http://") + value
    val uri =
      try new URI(withScheme)
      catch {
        case _: java.net.URISyntaxException =>
          throw new InvalidConfigException(option, value, "expected a host[:port] or an http(s):// URL")
      }
    val scheme = Option(uri.getScheme).map(_.toLowerCase).getOrElse("")
    if ((scheme != "http" && scheme != "https") || uri.getHost == null)
      throw new InvalidConfigException(option, value, "expected a host[:port] or an http(s):// URL")
    uri
  }

  /** Hadoop's time-duration forms (`60000` ms, `200s`, `5m`, `1h`): the one grammar, [[osqueue.Durations]]. */
  private[store] def parseDuration(option: String, value: String): FiniteDuration = Durations.parse(option, value)
}
