package osqueue.store.azure

import osqueue.store.{ObjectStore, ObjectStoreProvider}

/** Opens `abfss://`, `abfs://`, `wasbs://` and `wasb://` queue paths (registered for ServiceLoader). */
final class AzureStoreProvider extends ObjectStoreProvider {
  override def schemes: Set[String] = AzureLocation.Schemes

  override def open(uri: String, options: Map[String, String]): ObjectStore = {
    val location = AzureLocation.parse(uri)
    new AzureBlobStore(location, AzureStoreConfig.fromOptions(options, location))
  }
}
