package osqueue.queue

import osqueue.{Clock, IllegalQueueStateException, InvalidConfigException, RandomSource, SystemRandomSource}
import osqueue.format.{HeadSections, Incarnation, ManifestHead, Subscription, UnnamedReader}
import osqueue.metrics.MetricsRegistry

/**
 * Creating, listing and dropping a queue's named subscriptions (docs/adr/0005, docs/format.md §2.3):
 * each edit is one CAS on the manifest head through the [[CasLoop]]. The first subscription turns a
 * v1/v2 head into version 3; dropping the last (with no other section left) writes it back as v2/v1.
 */
final class Subscriptions(manifest: ManifestStore, policy: RetryPolicy, clock: Clock, metrics: MetricsRegistry,
    random: RandomSource = SystemRandomSource) {
  private val loop = new CasLoop(manifest.casObject, policy, clock, CasCounters.manifest(metrics, "subscriptions"), random)
  private val tree = new SegmentTree(manifest)

  /**
   * Adds subscription `name` starting at `start`: "earliest" (the queue's first retained entry) or
   * "latest" (`next_sequence`). IllegalQueueStateException if it exists already.
   */
  def create(name: String, start: String = Subscriptions.Earliest): Subscription = {
    Subscriptions.validate(name)
    if (start != Subscriptions.Earliest && start != Subscriptions.Latest)
      throw new InvalidConfigException("startingPosition", start, "Use 'earliest' or 'latest'.")
    val incarnation = 1L + random.nextInt(Int.MaxValue - 1)
    loop.run[Subscription] { (snapshot, previous) =>
      val raw = if (snapshot.version.isEmpty) Incarnation.newEmptyManifest() else snapshot.raw
      val head = ManifestHead.parse(raw, manifest.key)
      head.subscription(name) match {
        case Some(s) if previous.isDefined && s.incarnation == incarnation => CasStep.Done(s) // our lost reply landed
        case Some(_) => throw new IllegalQueueStateException(s"subscription '$name' exists on '${manifest.describe}'")
        case None =>
          val now = clock.nowMillis()
          val next = if (start == Subscriptions.Latest) head.nextSequence else head.firstSequence
          val record = Subscription(name, incarnation << 32, next, now, now)
          CasStep.Write(head.withReaders(head.epoch, Subscriptions.turningV3(head).withSubscription(record), tree.children,
              cut = false), () => record)
      }
    }
  }

  /** The queue's subscriptions, by name (none for a missing manifest or a v1/v2 head). */
  def list(): IndexedSeq[Subscription] = {
    val s = manifest.read()
    if (s.version.isEmpty) IndexedSeq.empty else manifest.head(s).sections.subscriptions
  }

  /**
   * Removes the unnamed reader's record (`osqueue subscriptions drop --unnamed`), so a queue read only
   * by subscriptions is not pinned by an RFC consumer that left; false if there is none.
   */
  def dropUnnamed(): Boolean = loop.run[Boolean] { (snapshot, _) =>
    if (snapshot.version.isEmpty) CasStep.Done(false)
    else {
      val head = manifest.head(snapshot)
      if (head.sections.unnamedReader.isEmpty) CasStep.Done(false)
      else CasStep.Write(head.withReaders(head.epoch, head.sections.copy(unnamedReader = None), tree.children,
          removedBytes = Some(tree.bytesBetween(head, _, _))), () => true)
    }
  }

  /** Removes subscription `name`, letting the queue's first entry move to the slowest remaining reader; false if absent. */
  def drop(name: String): Boolean = loop.run[Boolean] { (snapshot, previous) =>
    // Absent after a write of ours whose reply was lost or looked like a conflict: ours landed (ADR 0005).
    if (snapshot.version.isEmpty) CasStep.Done(previous.isDefined)
    else {
      val head = manifest.head(snapshot)
      if (head.subscription(name).isEmpty) CasStep.Done(previous.isDefined)
      else CasStep.Write(head.withReaders(head.epoch, head.sections.withoutSubscription(name), tree.children,
          removedBytes = Some(tree.bytesBetween(head, _, _))), () => true)
    }
  }
}

object Subscriptions {
  val Earliest = "earliest"
  val Latest = "latest"

  def validate(name: String): Unit =
    if (!HeadSections.validName(name))
      throw new InvalidConfigException("subscription", name, "A subscription name is 1 to 128 characters of [A-Za-z0-9._-].")

  /**
   * The sections of `head` as the CAS turning it into version 3 starts them: a v1/v2 head whose
   * footer shows a takeover (low 32 bits of the epoch > 0) gets the unnamed reader's record at its
   * first sequence, so the RFC consumer that read it keeps its entries (ADR 0005).
   */
  private[queue] def turningV3(head: ManifestHead): HeadSections =
    if (!head.sections.isEmpty || (head.epoch & 0xFFFFFFFFL) == 0) head.sections
    else head.sections.copy(unnamedReader = Some(UnnamedReader(head.firstSequence, 0L)))

  /** The next epoch of a subscription: takeovers + 1 in the low 32 bits (wrapping), the incarnation kept. */
  def nextEpoch(epoch: Long): Long = (epoch & 0xFFFFFFFF00000000L) | ((epoch + 1) & 0xFFFFFFFFL)
}
