package osqueue.spark

import org.apache.spark.sql.connector.read.{Batch, InputPartition, PartitionReaderFactory}

import osqueue.consumer.BatchDescriptor
import osqueue.format.ManifestCodec

/**
 * `spark.read.format("osqueue")`: the queue's current entries, optionally within
 * [startingSequence, endingSequence). Reads the manifest without fencing or acking anything.
 */
private[spark] final class OsqueueBatch(options: BatchReadOptions, readers: PartitionReaderFactory) extends Batch {
  override def planInputPartitions(): Array[InputPartition] = {
    val location = options.location
    val store = OsqueueStores.open(location)
    val manifest = store.get(location.manifestPath).map(o => ManifestCodec.decode(o.bytes, location.manifestPath))
      .getOrElse(throw OsqueueExceptions.queueNotFound(location.identity))
    val from = options.startingSequence.getOrElse(manifest.firstSequence)
    val to = options.endingSequence.getOrElse(manifest.nextSequence)
    if (options.startingSequence.exists(_ < manifest.firstSequence) && options.failOnDataLoss)
      throw OsqueueExceptions.dataLoss(s"startingSequence $from is before the first entry ${manifest.firstSequence} " +
        s"of '${location.identity}': those entries were already dequeued")
    SinkCopies.select(manifest.entries, from, to, osqueue.format.EntryTag.Delivered.Empty)._1
      .map(e => OsqueueInputPartition(location, BatchDescriptor.of(e), options.failOnDataLoss): InputPartition).toArray
  }

  override def createReaderFactory(): PartitionReaderFactory = readers
}
