package osqueue

/** Time source; injected so tests and simulations control it. */
trait Clock {
  /** Wall-clock milliseconds since the Unix epoch (ULID names, ingestion times, GC ages). */
  def nowMillis(): Long
  /** Monotonic nanoseconds (timeouts, flush intervals, durations). */
  def nanoTime(): Long
  def sleepMillis(ms: Long): Unit
}

object SystemClock extends Clock {
  override def nowMillis(): Long = System.currentTimeMillis()
  override def nanoTime(): Long = System.nanoTime()
  override def sleepMillis(ms: Long): Unit = if (ms > 0) Thread.sleep(ms)
}
