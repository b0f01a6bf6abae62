package osqueue.store.azure

import java.util.Locale

import osqueue.{InvalidConfigException, InvalidObjectKeyException}
import osqueue.store.ObjectKeys

/**
 * Where a queue lives in Azure, from its path as hadoop-azure writes it:
 * `abfss://container@account.dfs.core.windows.net/prefix` (ADLS Gen2) or
 * `wasbs://container@account.blob.core.windows.net/prefix` (Blob); `abfs://` and `wasb://` too.
 * Both reach the same blobs through the Blob endpoint: `host` with `.dfs.` read as `.blob.`.
 */
final case class AzureLocation(scheme: String, container: String, account: String, host: String, prefix: String) {
  /** The Blob service URL: https, except for wasb:// (hadoop-azure's plain-HTTP scheme). */
  def blobEndpoint: String = s"${if (scheme == "wasb") "http" else "https"}://${AzureLocation.blobHost(host)}"

  def uri: String = s"$scheme://$container@$host" + (if (prefix.isEmpty) "" else "/" + prefix)
}

object AzureLocation {
  val Schemes: Set[String] = Set("abfss", "abfs", "wasbs", "wasb")
  private val Form =
    "expected abfss://container@account.dfs.core.windows.net/prefix or wasbs://container@account.blob.core.windows.net/prefix"
  private val Uri = """(?i)^(abfss|abfs|wasbs|wasb)://([^@/]*)@([^/]*)(?:/(.*))?$""".r
  // Azure's container names: 3-63 of a-z, 0-9 and '-', starting and ending with a letter or digit.
  private val ContainerName = "^[a-z0-9](?:[a-z0-9]|-(?!-)){1,61}[a-z0-9]$".r

  def parse(uri: String): AzureLocation = {
    def invalid(hint: String) = new InvalidConfigException("path", String.valueOf(uri), hint)
    uri match {
      case Uri(scheme, container, host, rest) =>
        if (container.isEmpty) throw invalid(s"name the container before '@': $Form")
        if (ContainerName.findFirstIn(container).isEmpty)
          throw invalid(s"'$container' is not an Azure container name (3-63 lower-case letters, digits and single hyphens)")
        val lowerHost = host.toLowerCase(Locale.ROOT)
        val account = lowerHost.takeWhile(_ != '.')
        if (account.isEmpty || !lowerHost.contains('.')) throw invalid(s"name the storage account's host after '@': $Form")
        val prefix = Option(rest).getOrElse("").stripPrefix("/").stripSuffix("/")
        if (prefix.nonEmpty)
          try ObjectKeys.validate(prefix)
          catch { case e: InvalidObjectKeyException => throw invalid(s"the prefix is not a valid key: ${e.getMessage}") }
        AzureLocation(scheme.toLowerCase(Locale.ROOT), container, account, lowerHost, prefix)
      case _ => throw invalid(Form)
    }
  }

  /** `account.dfs.core.windows.net` -> `account.blob.core.windows.net`; a Blob host unchanged. */
  def blobHost(host: String): String = {
    val (account, rest) = host.span(_ != '.')
    if (rest.startsWith(".dfs.")) account + ".blob." + rest.stripPrefix(".dfs.") else host
  }

  /** The account's host in the other service (Blob <-> DFS): hadoop-azure keys may name either. */
  def otherHost(host: String): String = {
    val (account, rest) = host.span(_ != '.')
    if (rest.startsWith(".dfs.")) account + ".blob." + rest.stripPrefix(".dfs.")
    else if (rest.startsWith(".blob.")) account + ".dfs." + rest.stripPrefix(".blob.")
    else host
  }
}
