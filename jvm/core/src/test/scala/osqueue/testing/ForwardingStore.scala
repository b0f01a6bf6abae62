package osqueue.testing

import osqueue.store._

/**
 * A store that hands every call to `inner`: the base of the tests' counting, hooked and faulty
 * stores, which override only what they watch. `getIfChanged` and `getBytes` keep the trait's
 * defaults, which read through `get`, so a subclass that overrides `get` sees every read.
 */
class ForwardingStore(inner: ObjectStore) extends ObjectStore {
  override def uri: String = inner.uri
  override def get(key: String): Option[VersionedObject] = inner.get(key)
  override def put(key: String, bytes: Array[Byte]): Unit = inner.put(key, bytes)
  override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = inner.putIfAbsent(key, bytes)
  override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome =
    inner.putIfVersionMatches(key, bytes, expected)
  override def list(prefix: String): Seq[ObjectInfo] = inner.list(prefix)
  override def delete(key: String): Unit = inner.delete(key)
}
