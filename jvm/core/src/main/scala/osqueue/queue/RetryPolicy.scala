package osqueue.queue

import osqueue.{InvalidConfigException, SystemRandomSource}

/** Jittered exponential backoff with a bounded budget (docs/format.md §5). */
final case class RetryPolicy(
    baseDelayMs: Long = 10,
    maxDelayMs: Long = 1000,
    maxAttempts: Int = 1000,
    maxElapsedMs: Long = 30000) {
  if (baseDelayMs < 0 || maxDelayMs < baseDelayMs)
    throw new InvalidConfigException("retry.baseDelayMs/maxDelayMs", s"$baseDelayMs/$maxDelayMs", "need 0 <= base <= max")
  if (maxAttempts < 1) throw new InvalidConfigException("retry.maxAttempts", maxAttempts.toString, "must be >= 1")
  if (maxElapsedMs < 0) throw new InvalidConfigException("retry.maxElapsedMs", maxElapsedMs.toString, "must be >= 0")

  /** Full jitter: uniform in [0, min(max, base * 2^attempt)]. `attempt` counts from 0. */
  def delayMs(attempt: Int, random: () => Double = () => SystemRandomSource.nextDouble()): Long = {
    val cap = math.min(maxDelayMs.toDouble, baseDelayMs * math.pow(2, math.min(attempt, 30).toDouble))
    (random() * cap).toLong
  }
}
