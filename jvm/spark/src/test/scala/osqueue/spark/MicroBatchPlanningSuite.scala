package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.atomic.AtomicInteger

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.ManifestHead
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.InMemoryStore

/**
 * Planning a micro-batch on the driver. Spark asks the stream for the partitions of one range once
 * per copy of its scan node (physical planning, the plan's description for the UI, the RDD): each
 * ask after `latestOffset` is answered from what `latestOffset` read, with no store request.
 */
class MicroBatchPlanningSuite extends AnyFunSuite {
  test("planInputPartitions asked again for the same range reads no manifest and plans the same partitions") {
    val name = "micro-batch-planning"
    val store = InMemoryStore.named(name)
    store.clear()
    val producer = new Producer(store, ProducerConfig(flushInterval = 1.hour))
    try (0 until 3).foreach { b => producer.produce(Seq(s"v$b".getBytes(UTF_8))); producer.flush() }
    finally producer.close()

    val manifestReads = new AtomicInteger()
    val stream = new OsqueueMicroBatchStream(SourceOptions(Map("path" -> s"memory://$name"), Map.empty),
      OsqueueReaderFactory(Array(0)), sourceCheckpoint = "no-checkpoint") {
      override protected def readManifest(): ManifestHead = { manifestReads.incrementAndGet(); super.readManifest() }
    }
    try {
      val start = stream.initialOffset()
      val end = stream.latestOffset(start, stream.getDefaultReadLimit)
      val readsBefore = manifestReads.get()
      val first = stream.planInputPartitions(start, end)
      val again = (1 to 3).map(_ => stream.planInputPartitions(start, end))
      assert(first.nonEmpty)
      assert(again.forall(_.toSeq == first.toSeq))
      assert(manifestReads.get() == readsBefore, "every ask for the planned range is answered without a manifest read")
    } finally stream.stop()
  }
}
