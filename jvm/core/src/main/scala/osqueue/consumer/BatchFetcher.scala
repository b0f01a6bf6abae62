package osqueue.consumer

import osqueue.{BatchNotFoundException, Clock}
import osqueue.format.{BatchCodec, ManifestEntry, MetadataItem}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.ObjectStore

/** What the manifest says about one batch, enough to fetch it anywhere (e.g. on a Spark executor). */
final case class BatchDescriptor(sequence: Long, location: String, metadata: IndexedSeq[MetadataItem])

object BatchDescriptor {
  def of(e: ManifestEntry): BatchDescriptor = BatchDescriptor(e.sequence, e.location, e.metadata)
}

/** A fetched and decoded batch (RFC `ConsumedBatch`). */
final case class ConsumedBatch(entries: IndexedSeq[Array[Byte]], sequence: Long, location: String,
    metadata: IndexedSeq[MetadataItem]) {
  /** The metadata range covering entry `index`: the last item with `startIndex <= index`. */
  def metadataFor(index: Int): Option[MetadataItem] = metadata.takeWhile(_.startIndex <= index).lastOption
}

/**
 * Fetches and decodes batches. Holds no cursor and checks no epoch, so it is safe to share
 * between threads; a missing batch is an error naming it (never skipped).
 */
final class BatchFetcher(store: ObjectStore, clock: Clock, metrics: MetricsRegistry) {
  private val fetchDuration = metrics.histogram(MetricNames.FetchDuration)
  private val bytesCollected = metrics.counter(MetricNames.BytesCollected)

  def fetch(d: BatchDescriptor): ConsumedBatch = {
    val started = clock.nanoTime()
    val bytes = store.getBytes(d.location).getOrElse(throw new BatchNotFoundException(d.location, d.sequence))
    val entries = BatchCodec.decode(bytes, d.location)
    fetchDuration.observe((clock.nanoTime() - started) / 1e9)
    bytesCollected.add(entries.foldLeft(0L)(_ + _.length)) // record bytes, as Python (bytes_written is the encoded side)
    ConsumedBatch(entries, d.sequence, d.location, d.metadata)
  }
}
