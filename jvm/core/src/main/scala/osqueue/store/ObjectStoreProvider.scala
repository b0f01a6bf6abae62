package osqueue.store

import java.util.ServiceLoader

import scala.jdk.CollectionConverters._

/**
 * A store that lives in its own artifact (its cloud SDK must not grow the base jar): registered in
 * `META-INF/services/osqueue.store.ObjectStoreProvider` and found by URI scheme through
 * [[java.util.ServiceLoader]] when [[ObjectStores.open]] meets a scheme it does not know.
 */
trait ObjectStoreProvider {
  /** The URI schemes this provider opens, lower case: e.g. `gs`. */
  def schemes: Set[String]

  /** Opens `uri` (one of [[schemes]]) with the store options (Spark/Hadoop-style keys). */
  def open(uri: String, options: Map[String, String]): ObjectStore
}

object ObjectStoreProvider {
  /** The artifact that provides a scheme, named in the error when it is not on the classpath. */
  val ArtifactForScheme: Map[String, String] = Map(
    "gs" -> "osqueue-gcs",
    "abfs" -> "osqueue-azure", "abfss" -> "osqueue-azure", "wasb" -> "osqueue-azure", "wasbs" -> "osqueue-azure")

  /** The provider of `scheme` on the context or this class's class loader (Spark adds jars to the former). */
  def find(scheme: String): Option[ObjectStoreProvider] = {
    val loaders = Seq(Thread.currentThread().getContextClassLoader, getClass.getClassLoader).filter(_ != null).distinct
    loaders.iterator.flatMap(l => ServiceLoader.load(classOf[ObjectStoreProvider], l).iterator().asScala)
      .find(_.schemes.contains(scheme))
  }
}
