package osqueue.store.azure

import java.net.URI
import java.util.Locale

import scala.concurrent.duration._

import osqueue.InvalidConfigException

/** How a store authenticates. `toString` never shows a secret. */
sealed trait AzureAuth
object AzureAuth {
  /** `fs.azure.account.key.<account host>`. */
  final case class SharedKey(account: String, key: String) extends AzureAuth {
    override def toString: String = s"SharedKey($account, <key>)"
  }
  /** A SAS token: `fs.azure.sas.fixed.token[.<account host>]` (ABFS) or `fs.azure.sas.<container>.<account host>` (WASB). */
  final case class Sas(token: String) extends AzureAuth { override def toString: String = "Sas(<token>)" }
  /** OAuth client credentials (`fs.azure.account.oauth2.client.{id,secret,endpoint}`). */
  final case class ClientSecret(tenant: String, clientId: String, secret: String, authority: String) extends AzureAuth {
    override def toString: String = s"ClientSecret($tenant, $clientId, <secret>, $authority)"
  }
  /** The SDK's default credential chain (environment, workload/managed identity, Azure CLI...). */
  case object DefaultChain extends AzureAuth
}

/**
 * How [[AzureBlobStore]] reaches its account: the Blob endpoint, credentials, timeouts and retries.
 * `maxTries` is the SDK's budget for the non-conditional operations (conditional writes are tried once).
 */
final case class AzureStoreConfig(
    endpoint: String,
    auth: AzureAuth,
    connectTimeout: FiniteDuration = 10.seconds,
    tryTimeout: FiniteDuration = 60.seconds,
    maxTries: Int = 4)

object AzureStoreConfig {
  /** The Blob endpoint, replacing the one the path's host names (azurite, a private endpoint). */
  val Endpoint = "fs.azure.blob.endpoint"
  val AuthType = "fs.azure.account.auth.type"
  val AccountKey = "fs.azure.account.key"
  val SasFixedToken = "fs.azure.sas.fixed.token"
  val OAuthProvider = "fs.azure.account.oauth.provider.type"
  val ClientId = "fs.azure.account.oauth2.client.id"
  val ClientSecretKey = "fs.azure.account.oauth2.client.secret"
  val ClientEndpoint = "fs.azure.account.oauth2.client.endpoint"
  /** Retries per request (hadoop-azure's key; default 3, i.e. 4 tries). */
  val MaxRetries = "fs.azure.io.retry.max.retries"

  /**
   * Reads hadoop-azure's `fs.azure.*` keys, as Spark users set them (each also with a `spark.hadoop.`
   * prefix). A per-account key (`<key>.<account>.dfs.core.windows.net`, or the `.blob.` host)
   * overrides the plain one, as in hadoop-azure. Without `fs.azure.account.auth.type` the first of
   * account key, SAS token and OAuth client credentials that is set is used; with none, the SDK's
   * default credential chain.
   */
  def fromOptions(options: Map[String, String], location: AzureLocation): AzureStoreConfig = {
    val hosts = Seq(location.host, AzureLocation.otherHost(location.host)).distinct
    def lookup(names: Seq[String]): Option[(String, String)] =
      names.iterator.flatMap(k => Iterator(k, s"spark.hadoop.$k"))
        .collectFirst { case k if options.contains(k) => (k.stripPrefix("spark.hadoop."), options(k).trim) }
        .filter(_._2.nonEmpty)
    /** `<name>.<account host>` (either service's host), then `<name>`. */
    def perAccount(name: String): Option[(String, String)] = lookup(hosts.map(h => s"$name.$h") :+ name)

    val endpoint = lookup(Seq(Endpoint)).map { case (k, v) =>
      val uri =
        try new URI(v)
        catch { case _: java.net.URISyntaxException => null }
      if (uri == null || uri.getScheme == null || !Set("http", "https").contains(
          uri.getScheme.toLowerCase(Locale.ROOT)) || uri.getHost == null)
        throw new InvalidConfigException(k, v,
          "expected the Blob service URL, e.g. https://account.blob.core.windows.net " +
            "or http://127.0.0.1:10000/devstoreaccount1 (azurite)")
      v.stripSuffix("/")
    }.getOrElse(location.blobEndpoint)

    val key = perAccount(AccountKey)
    val sas = perAccount(SasFixedToken).orElse(lookup(hosts.map(h => s"fs.azure.sas.${location.container}.$h")))
    val clientId = perAccount(ClientId)
    def sharedKey = key.map { case (k, v) =>
      try java.util.Base64.getDecoder.decode(v)
      catch { case _: IllegalArgumentException => throw new InvalidConfigException(k, "<hidden>", "the account key is not Base64") }
      AzureAuth.SharedKey(location.account, v)
    }
    def sasToken = sas.map { case (_, v) => AzureAuth.Sas(v.stripPrefix("?")) }
    def oauth = clientId.map { case (_, id) =>
      def need(name: String) = perAccount(name).map(_._2).getOrElse(
        throw new InvalidConfigException(name, "",
          s"OAuth client credentials need $ClientId, $ClientSecretKey and $ClientEndpoint " +
            s"(optionally suffixed with .${location.host})"))
      val secret = need(ClientSecretKey)
      val (endpointKey, tokenEndpoint) = perAccount(ClientEndpoint).getOrElse(need(ClientEndpoint) -> "")
      val (authority, tenant) = parseTokenEndpoint(endpointKey, tokenEndpoint)
      AzureAuth.ClientSecret(tenant, id, secret, authority)
    }
    def missing(authType: String, name: String) =
      new InvalidConfigException(name, "", s"$AuthType is $authType: set $name.${location.host} (or $name)")

    val auth = perAccount(AuthType).map(_._2.toLowerCase(Locale.ROOT)) match {
      case Some("sharedkey") => sharedKey.getOrElse(throw missing("SharedKey", AccountKey))
      case Some("sas") => sasToken.getOrElse(throw missing("SAS", SasFixedToken))
      case Some("oauth") =>
        // Client credentials when given; other token providers (managed identity...) are the default chain's.
        oauth.getOrElse(AzureAuth.DefaultChain)
      case Some("custom") => AzureAuth.DefaultChain
      case Some(other) => throw new InvalidConfigException(AuthType, other, "expected SharedKey, SAS or OAuth")
      case None => sharedKey.orElse(sasToken).orElse(oauth).getOrElse(AzureAuth.DefaultChain)
    }

    val maxTries = lookup(Seq(MaxRetries)).map { case (k, v) =>
      val n = scala.util.Try(v.toInt).getOrElse(-1)
      if (n < 0) throw new InvalidConfigException(k, v, "expected a whole number of retries >= 0")
      n + 1
    }.getOrElse(4)
    AzureStoreConfig(endpoint, auth, maxTries = maxTries)
  }

  /** `https://login.microsoftonline.com/<tenant>/oauth2/token` (or `/oauth2/v2.0/token`) -> (authority, tenant). */
  private def parseTokenEndpoint(key: String, value: String): (String, String) = {
    val m = """^(https://[^/]+)/([^/]+)/oauth2/(?:v2\.0/)?token/?$""".r.findFirstMatchIn(value.trim)
    m.map(x => (x.group(1), x.group(2))).getOrElse(throw new InvalidConfigException(key, value,
        "expected the tenant's token endpoint, https://login.microsoftonline.com/<tenant id>/oauth2/token"))
  }
}
