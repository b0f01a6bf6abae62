package osqueue.store

import java.nio.file.{InvalidPathException, Paths}

import osqueue.{InvalidConfigException, InvalidObjectKeyException}

/**
 * Opens the store a queue path names (docs/format.md §1): `/abs/dir`, `file:/abs/dir`,
 * `file:///abs/dir`, a relative local path (against the working directory), `s3://bucket/prefix`
 * or `s3a://bucket/prefix` (configured by the `fs.s3a.*` options, see [[S3StoreConfig]]),
 * `memory://name` (unit tests), and any scheme an [[ObjectStoreProvider]] on the classpath opens.
 */
object ObjectStores {
  private val Expected = "expected file:/..., s3a://bucket/prefix or an absolute local path"
  private val Scheme = "^([a-zA-Z][a-zA-Z0-9+.-]*):.*".r

  def open(uri: String, options: Map[String, String] = Map.empty): ObjectStore = {
    def invalid(hint: String = Expected) = new InvalidConfigException("path", String.valueOf(uri), hint)
    if (uri == null || uri.trim.isEmpty) throw invalid()
    uri match {
      case _ if uri.startsWith("s3://") || uri.startsWith("s3a://") =>
        val rest = uri.substring(uri.indexOf("://") + 3)
        val (bucket, prefix) = rest.indexOf('/') match {
          case -1 => (rest, "")
          case i => (rest.substring(0, i), rest.substring(i + 1))
        }
        if (bucket.isEmpty) throw invalid()
        try new S3Store(bucket, prefix, S3StoreConfig.fromOptions(options, bucket))
        catch { case e: InvalidObjectKeyException => throw invalid(s"the prefix is not a valid key: ${e.getMessage}") }
      case _ if uri.startsWith("memory://") =>
        val name = uri.stripPrefix("memory://")
        if (name.isEmpty || name.contains("/")) throw invalid("expected memory://<name>")
        InMemoryStore.named(name)
      case _ if uri.startsWith("file://") =>
        // Only the empty (or localhost) authority: file:///abs/dir.
        val rest = uri.stripPrefix("file://").stripPrefix("localhost")
        if (!rest.startsWith("/")) throw invalid()
        local(rest)
      case _ if uri.startsWith("file:") =>
        val rest = uri.stripPrefix("file:")
        if (!rest.startsWith("/")) throw invalid()
        local(rest)
      case Scheme(scheme) =>
        val lower = scheme.toLowerCase(java.util.Locale.ROOT)
        ObjectStoreProvider.find(lower) match {
          case Some(provider) => provider.open(uri, options)
          case None => ObjectStoreProvider.ArtifactForScheme.get(lower) match {
              case Some(artifact) => throw invalid(s"$lower:// paths need the $artifact artifact on the classpath (README: " +
                  "object stores), e.g. spark-submit --packages io.github.osqueue:" + artifact + "_<scala version>:<version>")
              case None => throw invalid()
            }
        }
      case _ => local(uri)
    }
  }

  /** A local store; a relative path is resolved against the working directory. */
  private def local(path: String): LocalFileSystemStore =
    try new LocalFileSystemStore(Paths.get(path).toAbsolutePath)
    catch { case e: InvalidPathException => throw new InvalidConfigException("path", path, s"not a valid local path: ${e.getReason}") }
}
