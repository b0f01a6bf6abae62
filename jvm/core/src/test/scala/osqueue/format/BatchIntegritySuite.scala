package osqueue.format

import java.nio.charset.StandardCharsets.UTF_8

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{CorruptBatchException, CorruptManifestException}
import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.{InMemoryStore, VersionedObject}
import osqueue.testing.FaultInjectingStore

/** Entry-integrity records (docs/format.md §2.1, docs/adr/0006 part 1). The golden vectors are in GoldenVectorsSuite. */
class BatchIntegritySuite extends AnyFunSuite {
  private val manifestKey = "ingest/manifest"
  private val noGc = ConsumerConfig(runGc = false)

  private def produced(compression: Compression, records: Seq[String]): (InMemoryStore, ManifestEntry) = {
    val store = InMemoryStore.fresh()
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour, compression = compression))
    p.produce(records.map(_.getBytes(UTF_8)), Array.emptyByteArray)
    p.flush(); p.close()
    (store, ManifestCodec.decode(store.get(manifestKey).get.bytes, manifestKey).entries.head)
  }

  private def flip(bytes: Array[Byte], at: Int): Array[Byte] = { val b = bytes.clone(); b(at) = (b(at) ^ 0x10).toByte; b }

  for (compression <- Seq(Compression.None, Compression.Zstd))
    test(
      s"the producer writes the record; a flipped byte in a ${compression.name} batch is CorruptBatch, and the consumer does not advance") {
      val (store, entry) = produced(compression, Seq("one", "two" * 40))
      val bytes = store.get(entry.location).get.bytes
      val rec = BatchIntegrity.verifyEntry(entry, manifestKey).get
      assert(rec.byteLength == bytes.length && rec.batchCrc32 == BatchIntegrity.crc32(bytes))
      store.put(entry.location, flip(bytes, 3))
      val c = new Consumer(store, noGc)
      c.initialize()
      val e = intercept[CorruptBatchException](c.nextBatch())
      assert(e.key == entry.location)
      assert(e.getMessage.contains(s"expected ${bytes.length} bytes") && e.getMessage.contains(f"0x${rec.batchCrc32}%08x"))
      store.put(entry.location, bytes) // repaired: the same batch is delivered next
      assert(c.nextBatch().map(_.entries.map(new String(_, UTF_8))) == Some(Seq("one", "two" * 40)))
      c.close()
    }

  test("zstd batches are written with the frame content checksum; a flipped checksum byte fails to decode") {
    val bytes = BatchCodec.encode(Seq(("abc" * 50).getBytes(UTF_8)), Compression.Zstd)
    assert((bytes(4) & 0x04) != 0, "Content_Checksum_flag of the frame header descriptor")
    val checksumByte = bytes.length - BatchCodec.FooterSize - 1
    intercept[CorruptBatchException](BatchCodec.decode(flip(bytes, checksumByte), "k"))
  }

  test("a damaged transfer is read once more, then delivered") {
    val (inner, entry) = produced(Compression.None, Seq("r"))
    var gets = 0
    val store = new FaultInjectingStore(inner, (_, _) => FaultInjectingStore.Fault.None) {
      override def get(key: String): Option[VersionedObject] = super.get(key).map { o =>
        if (key != entry.location) o
        else { gets += 1; if (gets == 1) o.copy(bytes = flip(o.bytes, 0)) else o }
      }
    }
    val c = new Consumer(store, noGc)
    c.initialize()
    assert(c.nextBatch().map(_.entries.map(new String(_, UTF_8))) == Some(Seq("r")) && gets == 2)
    c.close()
  }

  test("an entry whose own bytes changed is CorruptManifest naming the manifest and the sequence") {
    val (_, entry) = produced(Compression.None, Seq("x"))
    val moved = entry.copy(sequence = entry.sequence + 5)
    val e = intercept[CorruptManifestException](BatchIntegrity.verifyEntry(moved, manifestKey))
    assert(e.key == manifestKey && e.getMessage.contains(s"sequence ${entry.sequence + 5}"))
    val renamed = entry.copy(location = entry.location.replace('0', '1'))
    intercept[CorruptManifestException](BatchIntegrity.verifyEntry(renamed, manifestKey))
  }

  test("an entry without a record is delivered unverified and counted") {
    val store = InMemoryStore.fresh()
    val key = "ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch"
    store.put(key, BatchCodec.encode(Seq("rfc".getBytes(UTF_8)), Compression.None))
    store.put(manifestKey, ManifestEdits.append(ManifestCodec.EmptyBytes, Seq(NewEntry(key, IndexedSeq.empty)), manifestKey)._1)
    val metrics = new MetricsRegistry
    val c = new Consumer(store, noGc, metrics = metrics)
    c.initialize()
    assert(c.nextBatch().map(_.entries.map(new String(_, UTF_8))) == Some(Seq("rfc")))
    assert(metrics.counterValue(MetricNames.BatchesUnverified) == 1)
    c.close()
  }

  test("the records walk skips unknown records, ends at bytes that are not one, and finds the sink tag last") {
    val tag = EntryTag("w", 3, "a")
    val ext = BatchIntegrity.record(10, 0x1234) ++ Array[Byte]('O', 'S', 'Q', '1', 9, 2, 0, 7, 7) ++ tag.encode
    val (records, tagAt) = BatchIntegrity.walk(ext)
    assert(records.map(_.tagType) == Seq(3, 9) && tagAt.contains(19 + 9))
    assert(EntryTag.decode(ext).contains(tag))
    assert(BatchIntegrity.of(ext).contains(EntryIntegrity(10, 0x1234, 0)))
    assert(BatchIntegrity.walk(Array[Byte](7, 1, 2)) == ((IndexedSeq.empty, None)))
    assert(BatchIntegrity.walk("OSQ1".getBytes(UTF_8) ++ Array[Byte](5, -1, -1)) == ((IndexedSeq.empty, None)))
    assert(EntryTag.decode(tag.encode).contains(tag), "a lone sink tag reads as before")
  }
}
