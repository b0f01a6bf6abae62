package osqueue.store

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

import scala.collection.mutable

import osqueue.{Clock, SystemClock}

/**
 * An object store held in this JVM's memory, for unit tests (`memory://name`).
 *
 * Every operation runs under one monitor, so conditional writes are atomic. Versions come from
 * a store-wide counter and are never reused, so a deleted and re-created object gets a new
 * version (no ABA). Bytes are copied on the way in and out: callers cannot mutate stored data.
 * Named instances live in a JVM-wide registry so that every `memory://name` URI in one JVM
 * (queue, producer, consumer, GC) sees the same objects. Listed last-modified times come from
 * `clock`, the store's clock, which tests may set apart from a producer's or GC's.
 */
final class InMemoryStore private (val name: String, clock: Clock) extends ObjectStore {
  private val objects = mutable.HashMap.empty[String, (Array[Byte], ObjectVersion, Long)]
  private var counter = 0L

  override def uri: String = s"memory://$name"

  override def get(key: String): Option[VersionedObject] = {
    ObjectKeys.validate(key)
    synchronized(objects.get(key)).map { case (b, v, _) => VersionedObject(b.clone(), v) }
  }

  override def getIfChanged(key: String, known: ObjectVersion): ConditionalRead = {
    ObjectKeys.validate(key)
    synchronized(objects.get(key)) match {
      case None => ConditionalRead.Absent
      case Some((_, v, _)) if v == known => ConditionalRead.NotModified
      case Some((b, v, _)) => ConditionalRead.Changed(VersionedObject(b.clone(), v))
    }
  }

  override def put(key: String, bytes: Array[Byte]): Unit = {
    ObjectKeys.validate(key)
    val copy = bytes.clone()
    synchronized(store(key, copy))
  }

  override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = {
    ObjectKeys.validate(key)
    val copy = bytes.clone()
    synchronized {
      if (objects.contains(key)) CasOutcome.PreconditionFailed
      else CasOutcome.Written(store(key, copy))
    }
  }

  override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
    ObjectKeys.validate(key)
    val copy = bytes.clone()
    synchronized {
      if (objects.get(key).exists(_._2 == expected)) CasOutcome.Written(store(key, copy))
      else CasOutcome.PreconditionFailed
    }
  }

  override def list(prefix: String): Seq[ObjectInfo] = {
    ObjectKeys.validatePrefix(prefix)
    synchronized {
      objects.iterator.collect { case (k, (b, _, t)) if k.startsWith(prefix) => ObjectInfo(k, b.length.toLong, t) }.toVector
    }
  }

  override def delete(key: String): Unit = {
    ObjectKeys.validate(key)
    synchronized(objects.remove(key))
  }

  /** Removes every object (test isolation for a named store). */
  def clear(): Unit = synchronized(objects.clear())

  private def store(key: String, bytes: Array[Byte]): ObjectVersion = {
    counter += 1
    val version = ObjectVersion(counter.toString)
    objects.update(key, (bytes, version, clock.nowMillis()))
    version
  }
}

object InMemoryStore {
  private val registry = new ConcurrentHashMap[String, InMemoryStore]()
  private val anonymous = new AtomicLong()

  /** The JVM-wide store called `name` (created on first use). */
  def named(name: String): InMemoryStore = {
    if (name == null || name.isEmpty) throw new osqueue.InvalidConfigException("path", s"memory://$name", "expected memory://<name>")
    registry.computeIfAbsent(name, n => new InMemoryStore(n, SystemClock))
  }

  /** A fresh store that no URI resolves to, whose clock is `clock`. */
  def fresh(clock: Clock = SystemClock): InMemoryStore = new InMemoryStore(s"anonymous-${anonymous.incrementAndGet()}", clock)

  /** Forgets a named store, so the next `named(name)` starts empty. */
  def drop(name: String): Unit = registry.remove(name)
}
