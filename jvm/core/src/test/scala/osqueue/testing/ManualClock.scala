package osqueue.testing

import java.util.concurrent.atomic.AtomicLong

import osqueue.{Clock, SystemClock}

/** Wall clock set by the test; monotonic time and sleeps stay real (producers wait on queues). */
final class ManualClock(startMs: Long) extends Clock {
  private val now = new AtomicLong(startMs)
  def set(ms: Long): Unit = now.set(ms)
  def advance(ms: Long): Unit = now.addAndGet(ms)
  override def nowMillis(): Long = now.get()
  override def nanoTime(): Long = SystemClock.nanoTime()
  override def sleepMillis(ms: Long): Unit = SystemClock.sleepMillis(ms)
}
