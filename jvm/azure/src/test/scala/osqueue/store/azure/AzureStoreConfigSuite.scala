package osqueue.store.azure

import org.scalatest.funsuite.AnyFunSuite

import osqueue.InvalidConfigException

/** hadoop-azure's keys, read as a Spark user sets them. */
class AzureStoreConfigSuite extends AnyFunSuite {
  private val at = AzureLocation.parse("abfss://events@acct.dfs.core.windows.net/team/q")
  private val key = java.util.Base64.getEncoder.encodeToString("k".getBytes)

  test("should map the path to the account's Blob endpoint") {
    assert(at === AzureLocation("abfss", "events", "acct", "acct.dfs.core.windows.net", "team/q"))
    assert(at.blobEndpoint === "https://acct.blob.core.windows.net")
    assert(AzureLocation.parse("wasb://events@acct.blob.core.windows.net").blobEndpoint === "http://acct.blob.core.windows.net")
    assert(AzureStoreConfig.fromOptions(Map.empty, at).endpoint === "https://acct.blob.core.windows.net")
  }

  test("should pick the account key, per-account before plain, either host, with or without spark.hadoop.") {
    def auth(o: Map[String, String]) = AzureStoreConfig.fromOptions(o, at).auth
    assert(auth(Map("fs.azure.account.key.acct.dfs.core.windows.net" -> key)) === AzureAuth.SharedKey("acct", key))
    assert(auth(Map("spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net" -> key)) === AzureAuth.SharedKey("acct", key))
    val other = java.util.Base64.getEncoder.encodeToString("other".getBytes)
    assert(auth(Map("fs.azure.account.key" -> other, "fs.azure.account.key.acct.dfs.core.windows.net" -> key)) === AzureAuth.SharedKey(
      "acct", key))
  }

  test("should read SAS tokens (ABFS fixed token, WASB per container) and OAuth client credentials") {
    def auth(o: Map[String, String]) = AzureStoreConfig.fromOptions(o, at).auth
    assert(auth(Map("fs.azure.sas.fixed.token.acct.dfs.core.windows.net" -> "?sv=1&sig=x")) === AzureAuth.Sas("sv=1&sig=x"))
    assert(auth(Map("fs.azure.sas.events.acct.blob.core.windows.net" -> "sv=2")) === AzureAuth.Sas("sv=2"))
    val oauth = Map("fs.azure.account.auth.type" -> "OAuth",
      "fs.azure.account.oauth.provider.type" -> "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
      "fs.azure.account.oauth2.client.id.acct.dfs.core.windows.net" -> "app",
      "fs.azure.account.oauth2.client.secret" -> "s3cret",
      "fs.azure.account.oauth2.client.endpoint" -> "https://login.microsoftonline.com/tenant-1/oauth2/token")
    val parsed = auth(oauth)
    assert(parsed === AzureAuth.ClientSecret("tenant-1", "app", "s3cret", "https://login.microsoftonline.com"))
    assert(!parsed.toString.contains("s3cret"))
    assert(auth(Map.empty) === AzureAuth.DefaultChain)
    assert(auth(Map("fs.azure.account.auth.type" -> "OAuth",
        "fs.azure.account.oauth.provider.type" -> "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider")) === AzureAuth.DefaultChain)
  }

  test("should name the bad or missing key") {
    def invalid(o: Map[String, String]) = intercept[InvalidConfigException](AzureStoreConfig.fromOptions(o, at))
    assert(invalid(Map("fs.azure.account.auth.type" -> "SharedKey")).option === "fs.azure.account.key")
    assert(invalid(Map("fs.azure.account.auth.type" -> "Kerberos")).option === "fs.azure.account.auth.type")
    assert(invalid(Map("fs.azure.account.oauth2.client.id" -> "a", "fs.azure.account.oauth2.client.secret" -> "b",
        "fs.azure.account.oauth2.client.endpoint" -> "login")).option === "fs.azure.account.oauth2.client.endpoint")
    assert(invalid(Map("fs.azure.io.retry.max.retries" -> "-1")).option === "fs.azure.io.retry.max.retries")
  }
}
