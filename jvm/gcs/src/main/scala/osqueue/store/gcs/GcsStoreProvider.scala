package osqueue.store.gcs

import osqueue.InvalidConfigException
import osqueue.store.{ObjectStore, ObjectStoreProvider}

/**
 * Opens `gs://bucket[/prefix]` (registered in META-INF/services/osqueue.store.ObjectStoreProvider),
 * configured by the GCS connector's `fs.gs.*` options ([[GcsStoreConfig.fromOptions]]).
 */
final class GcsStoreProvider extends ObjectStoreProvider {
  override def schemes: Set[String] = Set("gs")

  override def open(uri: String, options: Map[String, String]): ObjectStore = {
    val rest = uri.substring(uri.indexOf("://") + 3)
    val (bucket, prefix) = rest.indexOf('/') match {
      case -1 => (rest, "")
      case i => (rest.substring(0, i), rest.substring(i + 1))
    }
    if (!GcsStore.isBucketName(bucket))
      throw new InvalidConfigException("path", uri,
        "expected gs://bucket/prefix with a valid GCS bucket name " +
          "(3 to 222 characters: lower-case letters, digits, '-', '_' and '.')")
    new GcsStore(bucket, prefix, GcsStoreConfig.fromOptions(options))
  }
}
