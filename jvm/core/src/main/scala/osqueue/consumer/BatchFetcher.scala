package osqueue.consumer

import osqueue.{BatchNotFoundException, Clock}
import osqueue.format.{BatchCodec, BatchIntegrity, EntryIntegrity, ManifestEntry, MetadataItem}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.ObjectStore

/**
 * What the manifest says about one batch, enough to fetch it anywhere (e.g. on a Spark executor):
 * with the entry's integrity record (docs/format.md §2.1) when it has one.
 */
final case class BatchDescriptor(sequence: Long, location: String, metadata: IndexedSeq[MetadataItem],
    integrity: Option[EntryIntegrity] = None)

object BatchDescriptor {
  /**
   * The descriptor of an entry taken for delivery: its `entry_crc32` is checked here
   * (`CorruptManifest` naming `manifestKey` and the sequence).
   */
  def of(e: ManifestEntry, manifestKey: String): BatchDescriptor =
    BatchDescriptor(e.sequence, e.location, e.metadata, BatchIntegrity.verifyEntry(e, manifestKey))
}

/** A fetched and decoded batch (RFC `ConsumedBatch`). */
final case class ConsumedBatch(entries: IndexedSeq[Array[Byte]], sequence: Long, location: String,
    metadata: IndexedSeq[MetadataItem]) {
  /** The metadata range covering entry `index`: the last item with `startIndex <= index`. */
  def metadataFor(index: Int): Option[MetadataItem] = metadata.takeWhile(_.startIndex <= index).lastOption
  /** The records' summed length. */
  lazy val byteLength: Long = BatchCodec.recordBytes(entries)
}

/**
 * Fetches, checks (docs/format.md §2.1: length and CRC-32 against the entry's record, one re-GET on
 * a mismatch, then `CorruptBatch`) and decodes batches. Holds no cursor and checks no epoch, so it is safe to share
 * between threads; a missing batch is an error naming it (never skipped).
 */
final class BatchFetcher(store: ObjectStore, clock: Clock, metrics: MetricsRegistry) {
  private val fetchDuration = metrics.histogram(MetricNames.FetchDuration)
  private val bytesCollected = metrics.counter(MetricNames.BytesCollected)
  private val unverified = metrics.counter(MetricNames.BatchesUnverified)

  /**
   * `copyOnRead`: leave the records in the decoded block and copy each out when it is read
   * ([[BatchCodec.decodeBlock]]), for a reader that reads each record once, at once.
   */
  def fetch(d: BatchDescriptor, copyOnRead: Boolean = false): ConsumedBatch = {
    val started = clock.nanoTime()
    def get() = store.getBuffer(d.location).getOrElse(throw new BatchNotFoundException(d.location, d.sequence))
    val bytes = d.integrity match {
      case Some(rec) => BatchIntegrity.verify(rec, get(), d.location)(get()) // one re-GET on a mismatch
      case None => unverified.add(1); get()
    }
    val block = BatchCodec.decodeBlock(bytes, d.location)
    fetchDuration.observe((clock.nanoTime() - started) / 1e9)
    bytesCollected.add(block.byteLength) // record bytes, as Python (bytes_written is the encoded side)
    ConsumedBatch(if (copyOnRead) block else block.copied, d.sequence, d.location, d.metadata)
  }
}
