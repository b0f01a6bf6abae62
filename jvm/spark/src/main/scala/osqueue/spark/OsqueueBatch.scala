package osqueue.spark

import org.apache.spark.sql.connector.read.{Batch, InputPartition, PartitionReaderFactory}

import osqueue.format.EntryTag
import osqueue.queue.{ManifestStore, SegmentTree}

/**
 * `spark.read.format("osqueue")`: the queue's current entries, optionally within
 * [startingSequence, endingSequence). Reads the manifest without fencing or acking anything; a
 * segmented queue is planned from its head, reading only the segments covering the window
 * ([[OsqueuePlanner]]).
 */
private[spark] final class OsqueueBatch(options: BatchReadOptions, readers: PartitionReaderFactory) extends Batch {
  override def planInputPartitions(): Array[InputPartition] = {
    val location = options.location
    val manifests = new ManifestStore(OsqueueStores.open(location), location.manifestPath)
    val snapshot = manifests.read()
    if (snapshot.version.isEmpty) throw OsqueueExceptions.queueNotFound(location.identity)
    val head = manifests.head(snapshot)
    // A subscription's position (docs/adr/0005): read from it, acking nothing and fencing nobody.
    val subscriptionNext = options.subscription.map { name =>
      head.subscription(name).getOrElse(throw OsqueueExceptions.noSubscription(name, location.identity)).next
    }
    val from = options.startingSequence.orElse(subscriptionNext.map(math.max(_, head.firstSequence)))
      .getOrElse(head.firstSequence)
    val to = options.endingSequence.getOrElse(head.nextSequence)
    if (options.startingSequence.exists(_ < head.firstSequence) && options.failOnDataLoss)
      throw OsqueueExceptions.dataLoss(s"startingSequence $from is before the first entry ${head.firstSequence} " +
        s"of '${location.identity}': those entries were already dequeued")
    // Read-only: a segment a consumer's dequeue and GC removed while this plan read is skipped as dequeued.
    val reread = (_: Long) => Some(manifests.read()).filter(_.version.isDefined).map(manifests.head)
    OsqueuePlanner.plan(head, new SegmentTree(manifests), manifests.readSegment, location, from, to, EntryTag.Delivered.Empty,
      options.failOnDataLoss, reread = Some(reread))
      .partitions
  }

  override def createReaderFactory(): PartitionReaderFactory = readers
}
