package osqueue.queue

import osqueue.store.{CasOutcome, ConditionalRead, ObjectStore, ObjectVersion}

/** An object's bytes as read, with the version a conditional write must match (None = absent). */
final case class Snapshot(raw: Array[Byte], version: Option[ObjectVersion])

/**
 * One object written only by compare-and-swap: versioned reads, create-if-absent and
 * overwrite-if-unchanged. [[CasLoop]] runs its read-modify-write edits; the manifest
 * ([[ManifestStore]]), the Spark sink's writer states and the queue id are each one. Python's
 * `osqueue.queue.cas_object.CasObject` is the same. A missing object reads as `absent` bytes at no
 * version (the manifest's: the empty manifest, so that its edits need no special case).
 */
final class CasObject(val store: ObjectStore, val key: String, absent: Array[Byte] = Array.emptyByteArray) {
  def read(): Snapshot = store.get(key) match {
    case Some(o) => Snapshot(o.bytes, Some(o.version))
    case None => Snapshot(absent, None)
  }

  /** The object unless it is still at version `known` (None then: a conditional read, no bytes). */
  def readIfChanged(known: ObjectVersion): Option[Snapshot] = store.getIfChanged(key, known) match {
    case ConditionalRead.NotModified => None
    case ConditionalRead.Absent => Some(Snapshot(absent, None))
    case ConditionalRead.Changed(o) => Some(Snapshot(o.bytes, Some(o.version)))
  }

  /** A missing object is created only if still absent; an existing one replaced only if unchanged. */
  def write(bytes: Array[Byte], basedOn: Snapshot): CasOutcome = basedOn.version match {
    case Some(v) => store.putIfVersionMatches(key, bytes, v)
    case None => store.putIfAbsent(key, bytes)
  }

  /** Where the object lives, for messages. */
  def describe: String = s"${store.uri.stripSuffix("/")}/$key"
}
