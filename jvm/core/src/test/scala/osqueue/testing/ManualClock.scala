package osqueue.testing

import java.util.concurrent.atomic.AtomicLong

import osqueue.{Clock, SystemClock}

/**
 * Wall clock set by the test; monotonic time and sleeps stay real (producers wait on queues), but
 * monotonic time can be moved on alone.
 */
final class ManualClock(startMs: Long) extends Clock {
  private val now = new AtomicLong(startMs)
  private val monotonicOffsetNanos = new AtomicLong()
  def set(ms: Long): Unit = now.set(ms)
  def advance(ms: Long): Unit = now.addAndGet(ms)
  /** Time passes but the wall clock shows none of it (as when NTP steps it back meanwhile). */
  def advanceMonotonic(ms: Long): Unit = monotonicOffsetNanos.addAndGet(ms * 1000000L)
  override def nowMillis(): Long = now.get()
  override def nanoTime(): Long = SystemClock.nanoTime() + monotonicOffsetNanos.get()
  override def sleepMillis(ms: Long): Unit = SystemClock.sleepMillis(ms)
}
