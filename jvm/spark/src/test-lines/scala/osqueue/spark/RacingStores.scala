package osqueue.spark

import java.util.concurrent.ConcurrentHashMap

import osqueue.store.{CasOutcome, InMemoryStore, ObjectInfo, ObjectStore, ObjectStoreProvider, ObjectVersion, VersionedObject}

/**
 * `racing://<name>`: an in-memory store (the `memory://<name>` one) that runs a race registered for
 * it once, just before the first GET of the registered key, so a test can put a consumer's dequeue and
 * GC between a reader's head read and its GET of a segment (found through META-INF/services, as the
 * cloud stores are, since the connector opens its stores itself).
 */
final class RacingStores extends ObjectStoreProvider {
  override def schemes: Set[String] = Set("racing")
  override def open(uri: String, options: Map[String, String]): ObjectStore =
    new RacingStores.Racing(uri, InMemoryStore.named(uri.stripPrefix("racing://")))
}

object RacingStores {
  private val races = new ConcurrentHashMap[String, (String, () => Unit)]()

  /** Runs `race` once, just before the next GET of `key` through `racing://<name>`. */
  def before(name: String, key: String)(race: => Unit): Unit = races.put(name, (key, () => race))

  private final class Racing(override val uri: String, inner: InMemoryStore) extends ObjectStore {
    override def get(k: String): Option[VersionedObject] = {
      val name = uri.stripPrefix("racing://")
      Option(races.get(name)).filter(_._1 == k).foreach { r => if (races.remove(name, r)) r._2() }
      inner.get(k)
    }
    override def put(k: String, bytes: Array[Byte]): Unit = inner.put(k, bytes)
    override def putIfAbsent(k: String, bytes: Array[Byte]): CasOutcome = inner.putIfAbsent(k, bytes)
    override def putIfVersionMatches(k: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome =
      inner.putIfVersionMatches(k, bytes, expected)
    override def list(prefix: String): Seq[ObjectInfo] = inner.list(prefix)
    override def delete(k: String): Unit = inner.delete(k)
  }
}
