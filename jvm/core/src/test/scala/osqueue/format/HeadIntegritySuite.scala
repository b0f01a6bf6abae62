package osqueue.format

import java.nio.charset.StandardCharsets.UTF_8

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{CorruptManifestException, OsqueueException, UnsupportedFormatVersionException}
import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.InMemoryStore

/**
 * Flipped bytes in the manifest head and in index objects are never delivered (docs/adr/0006
 * items 1 and 3, issue 28): a segmented head is written as version 3 with head_crc32, an index
 * object is checked against the SHA-256 of the ref listing it. Python: tests/python/test_head_integrity.py.
 */
class HeadIntegritySuite extends AnyFunSuite {
  private val key = "ingest/manifest"
  private val noGc = ConsumerConfig(runGc = false)

  /** One-entry batches written with K = 2 (F = 2): the head lists a segment and index objects. */
  private def segmentedQueue(batches: Int = 12): (InMemoryStore, Seq[String]) = {
    val store = InMemoryStore.fresh()
    val values = (0 until batches).map(i => s"value-$i")
    val p = new Producer(store, ProducerConfig(flushInterval = 1.hour, manifestSegmentEntries = 2))
    values.foreach { v => p.produce(Seq(v.getBytes(UTF_8)), Array.emptyByteArray); p.flush() }
    p.close()
    (store, values)
  }

  /** Every entry a fresh consumer delivers (acking as it goes), or the error that stopped it and what came before. */
  private def drain(store: InMemoryStore, ack: Boolean = true): (Seq[String], Option[OsqueueException]) = {
    val c = new Consumer(store, noGc)
    val out = Seq.newBuilder[String]
    try {
      c.initialize()
      var b = c.nextBatch()
      while (b.isDefined) {
        out ++= b.get.entries.map(new String(_, UTF_8))
        if (ack) c.ack(b.get.sequence)
        b = c.nextBatch()
      }
      (out.result(), None)
    } catch { case e: OsqueueException => (out.result(), Some(e)) }
    finally c.close()
  }

  private def flip(bytes: Array[Byte], at: Int, mask: Int = 0x01): Array[Byte] = {
    val b = bytes.clone(); b(at) = (b(at) ^ mask).toByte; b
  }

  test("a segmented head is written as version 3 without sections, and its queue reads back") {
    val (store, values) = segmentedQueue()
    val head = ManifestHead.parse(store.get(key).get.bytes, key)
    assert(head.version == HeadSections.Version && head.sections.isEmpty && head.refs.exists(_.isIndex))
    assert(drain(store) == ((values, None)))
    assert(ManifestHead.parse(store.get(key).get.bytes, key).version == ManifestCodec.Version, "all dequeued: v1")
  }

  test("every flipped byte of a segmented head is refused by the decoder, and by the consumer with the CRC named") {
    val (store, _) = segmentedQueue()
    val data = store.get(key).get.bytes
    for (at <- data.indices; mask <- Seq(0x01, 0x80)) {
      val e = intercept[OsqueueException](ManifestHead.parse(flip(data, at, mask), key))
      assert(e.isInstanceOf[CorruptManifestException] || e.isInstanceOf[UnsupportedFormatVersionException], s"byte $at")
    }
    val head = ManifestHead.parse(data, key)
    val tailAt = ManifestHead.encodeRefs(head.refs).length
    // a ref's oldest_batch_ms, the tail, the trailer's low_water, the footer's epoch
    for (at <- Seq(21, tailAt + 20, data.length - 22 - 28 + 16, data.length - 10)) {
      store.put(key, flip(data, at))
      drain(store) match {
        case (Seq(), Some(e: CorruptManifestException)) => assert(e.key == key && e.getMessage.contains("head_crc32"))
        case other => fail(s"byte $at: $other")
      }
    }
  }

  test("a flipped byte in an index object is refused naming it, and nothing it lists is delivered") {
    val (store, values) = segmentedQueue()
    val head = ManifestHead.parse(store.get(key).get.bytes, key)
    val index = head.refs.find(_.isIndex).get
    val good = store.get(index.key).get.bytes
    for (at <- good.indices by 7) {
      store.put(index.key, flip(good, at))
      val (delivered, error) = drain(store, ack = false)
      error match {
        case Some(e: CorruptManifestException) => assert(e.key == index.key, s"byte $at")
        case other => fail(s"byte $at: $other")
      }
      assert(delivered == values.take((index.firstSequence - head.firstSequence).toInt), s"byte $at")
    }
    store.put(index.key, good)
    assert(drain(store) == ((values, None)))
  }
}
