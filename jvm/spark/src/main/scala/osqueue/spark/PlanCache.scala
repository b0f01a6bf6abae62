package osqueue.spark

import osqueue.format.{EntryTag, ManifestHead}

/**
 * The last plan `latestOffset` made, reused by `planInputPartitions` for the same range: one walk
 * of the segments, not two. The sequences below the queue's next one never change, so a plan of
 * the same present range, sink-copy state and skip at the same epoch (no other reader dequeued
 * since) is the same plan.
 */
private[spark] final class PlanCache[P] {
  @volatile private var last: Option[(PlanCache.Key, P)] = None

  def planOf(m: ManifestHead, from: Long, to: Long, delivered: EntryTag.Delivered, skip: Int)(plan: => P): P = {
    val key = PlanCache.Key(math.max(from, m.firstSequence), math.min(to, m.nextSequence), delivered, skip, m.epoch)
    last.collect { case (k, p) if k == key => p }.getOrElse {
      val p = plan
      last = Some((key, p))
      p
    }
  }
}

private[spark] object PlanCache {
  final case class Key(from: Long, to: Long, delivered: EntryTag.Delivered, skip: Int, epoch: Long)
}
