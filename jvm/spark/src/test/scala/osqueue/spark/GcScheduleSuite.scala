package osqueue.spark

import java.util.concurrent.{CountDownLatch, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.SystemClock
import osqueue.gc.GcResult
import osqueue.store.InMemoryStore

/** The source's GC: nothing before start, a cycle at once, then every interval; a failed cycle is not the last; stop ends it. */
class GcScheduleSuite extends AnyFunSuite {
  private val nothing = GcResult(Nil, Nil, 0, 0, 0, 0)

  test("no cycle runs before start; start runs one at once, although the interval is long") {
    val runs = new AtomicInteger()
    val first = new CountDownLatch(1)
    val gc = new GcSchedule("q", 1.hour, () => { runs.incrementAndGet(); first.countDown(); nothing })
    assert(runs.get() == 0 && !gc.running)
    gc.start()
    gc.start() // once: the second call schedules nothing more
    try assert(first.await(60, TimeUnit.SECONDS), "no cycle at start")
    finally gc.stop()
    assert(runs.get() == 1 && !gc.running)
  }

  test("cycles repeat every interval, and a failing cycle does not end the schedule") {
    val runs = new AtomicInteger()
    val three = new CountDownLatch(3)
    val gc = new GcSchedule("q", 1.milli,
      () => {
        three.countDown()
        if (runs.incrementAndGet() == 1) throw new RuntimeException("the store is down")
        nothing
      })
    gc.start()
    try assert(three.await(60, TimeUnit.SECONDS), s"only ${runs.get()} cycles ran")
    finally gc.stop()
    val after = runs.get()
    assert(!gc.running && runs.get() == after, "a cycle ran after stop() returned")
  }

  test("stop lets the running cycle finish") {
    val inCycle = new CountDownLatch(1)
    val release = new CountDownLatch(1)
    val finished = new AtomicInteger()
    val gc = new GcSchedule("q", 1.hour,
      () => {
        inCycle.countDown()
        release.await(60, TimeUnit.SECONDS)
        finished.incrementAndGet()
        nothing
      })
    gc.start()
    assert(inCycle.await(60, TimeUnit.SECONDS))
    val stopper = new Thread(() => gc.stop())
    stopper.start()
    release.countDown()
    stopper.join(60000)
    assert(finished.get() == 1, "the cycle under way was cut short")
  }

  test("stop without start does nothing; gc=false has no schedule") {
    new GcSchedule("q", 1.hour, () => fail("no cycle")).stop()
    val on = SourceOptions(Map("path" -> "memory://gc-schedule"), Map.empty)
    val store = InMemoryStore.named("gc-schedule")
    assert(GcSchedule.forSource(store, on, SystemClock).isDefined)
    assert(GcSchedule.forSource(store, on.copy(gcEnabled = false), SystemClock).isEmpty)
  }
}
