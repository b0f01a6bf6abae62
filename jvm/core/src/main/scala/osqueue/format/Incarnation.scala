package osqueue.format

import osqueue.SystemRandomSource

/**
 * Which incarnation of a manifest an epoch belongs to (docs/format.md §5.2): the epoch's high 32
 * bits, drawn at random when a writer creates the manifest; the low 32 bits count consumer
 * takeovers. A reset queue (manifest deleted and created again) therefore has another
 * incarnation whatever its length, while the footer stays RFC v1. 0 = a manifest created by the
 * reference implementation or by an osqueue before incarnations.
 */
object Incarnation {
  /** `<manifest>.incarnation`: the incarnation the last consumer initialized. */
  val Suffix = ".incarnation"

  def of(epoch: Long): Long = epoch >>> 32

  /** The epoch of a manifest being created: a fresh incarnation in [1, 2^31) (positive as a Long), low bits 0. */
  // Never seeded, as in Python: two seeded test queues must not share an incarnation.
  def newEpoch(): Long = (1L + SystemRandomSource.nextInt(Int.MaxValue - 1)) << 32

  /** The footer bytes a writer creating the manifest starts from (instead of the all-zero empty manifest). */
  def newEmptyManifest(): Array[Byte] = ManifestCodec.encodeFooter(ManifestFooter(0, 0, newEpoch()))
}
