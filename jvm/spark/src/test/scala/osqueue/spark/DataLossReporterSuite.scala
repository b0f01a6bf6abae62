package osqueue.spark

import org.apache.spark.SparkThrowable
import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.{Incarnation, ManifestCodec, ManifestHead}

/** failOnDataLoss: an OSQUEUE_DATA_LOSS error, or one warning and one count per event. */
class DataLossReporterSuite extends AnyFunSuite {
  private val queue = "memory://q/ingest/manifest"
  private val empty = ManifestHead.parse(ManifestCodec.EmptyBytes, "ingest/manifest")

  test("with failOnDataLoss=true every report is an OSQUEUE_DATA_LOSS error with the message, and nothing is counted") {
    val r = new DataLossReporter(queue, failOnDataLoss = true)
    val e = intercept[Exception](r.report(DataLossReporter.Removed, 3, r.removedMessage(3, 5)))
    assert(e.asInstanceOf[SparkThrowable].getCondition == "OSQUEUE_DATA_LOSS")
    assert(e.getMessage.contains(s"entries 3 to 5 of '$queue' were removed before this query read them"))
    intercept[Exception](r.report(DataLossReporter.Removed, 3, r.removedMessage(3, 5)))
    assert(r.count == 0)
  }

  test("with failOnDataLoss=false an event is counted once however often it is reported, and each other event once") {
    val r = new DataLossReporter(queue, failOnDataLoss = false)
    r.report(DataLossReporter.Removed, 3, "x")
    r.report(DataLossReporter.Removed, 3, "x again") // latestOffset and planInputPartitions both see it
    assert(r.count == 1)
    r.report(DataLossReporter.Ahead, 3, "y") // another kind at the same sequence
    r.report(DataLossReporter.Removed, 4, "z")
    assert(r.count == 3)
  }

  test("a range retention cut is OSQUEUE_DATA_LOSS with its count, or (failOnDataLoss=false) dataLossEvents + droppedEntries") {
    val failing = new DataLossReporter(queue, failOnDataLoss = true)
    val e = intercept[Exception](failing.report(DataLossReporter.Removed, 2, failing.removedMessage(2, 7), 6))
    assert(e.asInstanceOf[SparkThrowable].getCondition == "OSQUEUE_DATA_LOSS" && e.getMessage.contains("(6 entries"))
    val r = new DataLossReporter(queue, failOnDataLoss = false)
    r.report(DataLossReporter.Removed, 2, r.removedMessage(2, 7), 6)
    r.report(DataLossReporter.Removed, 2, r.removedMessage(2, 7), 6) // a replayed micro-batch: the same range, once
    r.report(DataLossReporter.Removed, 20, r.removedMessage(20, 20), 1)
    assert(r.count == 2 && r.droppedEntries == 7)
    val m = SourceProgressMetrics(empty, None, None, 0L, None, r.count, 0, 0, droppedEntries = r.droppedEntries)
    assert(m("dataLossEvents") == "2" && m("droppedEntries") == "7")
  }

  test("the messages name the queue, the sequences and the incarnations") {
    val r = new DataLossReporter(queue, failOnDataLoss = false)
    assert(r.aheadMessage(7, empty) ==
      s"the checkpoint is at sequence 7 but '$queue' has only assigned up to -1: the queue was reset or recreated")
    val o = OsqueueSourceOffset(queue, "id", 4, incarnation = Some(12))
    assert(r.resetMessage(o, empty) == s"the checkpoint is at sequence 4 of incarnation 12 of '$queue', but the " +
      s"manifest is incarnation ${Incarnation.of(empty.epoch)}: the queue was reset or recreated")
    assert(r.resetMessage(o.copy(incarnation = None), empty).contains("of incarnation ? of"))
  }
}
