package osqueue.queue

import osqueue.format.{Manifest, ManifestCodec}
import osqueue.store.{CasOutcome, ObjectStore, ObjectVersion}

/** The manifest's bytes as read, with the version a conditional write must match (None = absent). */
final case class Snapshot(raw: Array[Byte], version: Option[ObjectVersion])

/** Reads and conditionally writes the one manifest object of a queue. */
final class ManifestStore(val store: ObjectStore, val key: String) {
  def read(): Snapshot = store.get(key) match {
    case Some(o) => Snapshot(o.bytes, Some(o.version))
    case None => Snapshot(ManifestCodec.EmptyBytes, None)
  }

  /** A missing manifest is created only if still absent; an existing one only if unchanged. */
  def write(bytes: Array[Byte], basedOn: Snapshot): CasOutcome = basedOn.version match {
    case Some(v) => store.putIfVersionMatches(key, bytes, v)
    case None => store.putIfAbsent(key, bytes)
  }

  def decode(s: Snapshot): Manifest = ManifestCodec.decode(s.raw, key)

  /** Where the manifest lives, for messages. */
  def describe: String = s"${store.uri.stripSuffix("/")}/$key"
}
