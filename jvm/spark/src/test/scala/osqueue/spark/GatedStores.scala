package osqueue.spark

import java.util.concurrent.ConcurrentHashMap

import osqueue.store.{CasOutcome, InMemoryStore, ObjectInfo, ObjectStore, ObjectStoreProvider, ObjectVersion, VersionedObject}

/**
 * `gated://<name>`: the in-memory store `memory://<name>` whose GETs of one key first run a gate
 * registered for it (a test holds a request there, e.g. until another one is in flight). Found
 * through META-INF/services, since the connector opens its stores itself.
 */
final class GatedStores extends ObjectStoreProvider {
  override def schemes: Set[String] = Set("gated")
  override def open(uri: String, options: Map[String, String]): ObjectStore =
    new GatedStores.Gated(uri, InMemoryStore.named(uri.stripPrefix("gated://")))
}

object GatedStores {
  private val gates = new ConcurrentHashMap[String, (String, () => Unit)]()

  /** Runs `gate` before every GET of `key` through `gated://<name>` (on the requesting thread). */
  def register(name: String, key: String)(gate: () => Unit): Unit = gates.put(name, (key, gate))

  def remove(name: String): Unit = gates.remove(name)

  private final class Gated(override val uri: String, inner: InMemoryStore) extends ObjectStore {
    override def get(k: String): Option[VersionedObject] = {
      Option(gates.get(uri.stripPrefix("gated://"))).filter(_._1 == k).foreach(_._2())
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
