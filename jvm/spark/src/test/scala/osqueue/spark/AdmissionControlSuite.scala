package osqueue.spark

import scala.concurrent.duration._

import org.apache.spark.sql.connector.read.streaming.{CompositeReadLimit, ReadAllAvailable, ReadLimit, ReadMaxFiles, ReadMinRows}
import org.scalatest.funsuite.AnyFunSuite

/** The read limits of a micro-batch: caps, the minimum with its delay, and AvailableNow; the clock is the test's. */
class AdmissionControlSuite extends AnyFunSuite {
  private def options(max: Option[Int] = None, min: Option[Int] = None, delay: FiniteDuration = 15.minutes) =
    SourceOptions(Map("path" -> "memory://admission"), Map.empty)
      .copy(maxBatchesPerTrigger = max, minBatchesPerTrigger = min, maxTriggerDelay = delay)

  test("the default read limit: all available, a cap, a minimum with its delay, or both") {
    assert(new AdmissionControl(options(), 0).defaultReadLimit.isInstanceOf[ReadAllAvailable])
    assert(new AdmissionControl(options(max = Some(3)), 0).defaultReadLimit.asInstanceOf[ReadMaxFiles].maxFiles == 3)
    val min = new AdmissionControl(options(min = Some(2), delay = 5.seconds), 0).defaultReadLimit.asInstanceOf[ReadMinRows]
    assert(min.minRows == 2 && min.maxTriggerDelayMs == 5000)
    val both = new AdmissionControl(options(max = Some(3), min = Some(2)), 0).defaultReadLimit
    assert(both.asInstanceOf[CompositeReadLimit].getReadLimits.length == 2)
  }

  test("maxBatchesPerTrigger caps the end at start + max; without a limit the end is the queue's next sequence") {
    val a = new AdmissionControl(options(), 0)
    assert(a.end(4, 20, ReadLimit.allAvailable(), 0).contains(20))
    assert(a.end(4, 20, ReadLimit.maxFiles(3), 0).contains(7))
    assert(a.end(4, 5, ReadLimit.maxFiles(3), 0).contains(5))
    assert(a.end(9, 5, ReadLimit.maxFiles(3), 0).contains(9), "never an end before the start")
  }

  test("minBatchesPerTrigger waits until enough are queued or maxTriggerDelay passed since the last non-empty batch") {
    val a = new AdmissionControl(options(), startMs = 1000)
    val limit = ReadLimit.compositeLimit(Array(ReadLimit.maxFiles(10), ReadLimit.minRows(3, 5000)))
    assert(a.end(0, 2, limit, nowMs = 1000).isEmpty, "2 of 3")
    assert(a.end(0, 3, limit, nowMs = 1000).contains(3))
    assert(a.end(0, 2, limit, nowMs = 6000).contains(2), "the delay passed: fewer are released")
    a.planned(0, 2, nowMs = 6000)
    assert(a.end(2, 3, limit, nowMs = 6000).isEmpty, "the delay counts from the last non-empty batch")
    a.planned(2, 2, nowMs = 20000) // an empty batch does not restart it
    assert(a.end(2, 3, limit, nowMs = 11000).contains(3))
  }

  test("AvailableNow reads up to the queue's end when the run began, and never waits for the minimum") {
    val a = new AdmissionControl(options(), 0)
    assert(!a.availableNow)
    a.availableNowUpTo(6)
    assert(a.availableNow)
    assert(a.end(0, 10, ReadLimit.allAvailable(), 0).contains(6), "entries written after the run began")
    assert(a.end(0, 4, ReadLimit.minRows(3, 60000), 0).contains(4))
    assert(a.end(4, 10, ReadLimit.maxFiles(1), 0).contains(5))
    assert(a.end(6, 10, ReadLimit.allAvailable(), 0).contains(6), "done: an empty batch")
  }
}
