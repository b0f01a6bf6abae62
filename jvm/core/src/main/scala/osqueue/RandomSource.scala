package osqueue

import java.security.SecureRandom
import java.util.concurrent.ThreadLocalRandom

/**
 * Randomness seam, like [[Clock]] for time: batch-name entropy and backoff jitter come from here,
 * so tests and simulations can seed them (Python: an injected `random.Random`).
 */
trait RandomSource {
  def nextBytes(bytes: Array[Byte]): Unit
  /** Uniform in [0, 1). */
  def nextDouble(): Double
  /** Uniform in [0, bound). */
  def nextInt(bound: Int): Int
  def nextLong(): Long
}

/** The real source: SecureRandom for names and identities, ThreadLocalRandom for jitter and temporary names. */
object SystemRandomSource extends RandomSource {
  private val secure = new SecureRandom()
  override def nextBytes(bytes: Array[Byte]): Unit = secure.nextBytes(bytes)
  override def nextDouble(): Double = ThreadLocalRandom.current().nextDouble()
  override def nextInt(bound: Int): Int = secure.nextInt(bound)
  override def nextLong(): Long = ThreadLocalRandom.current().nextLong()
}

/** A reproducible source for tests and simulations. */
final class SeededRandomSource(seed: Long) extends RandomSource {
  private val random = new java.util.Random(seed)
  override def nextBytes(bytes: Array[Byte]): Unit = synchronized(random.nextBytes(bytes))
  override def nextDouble(): Double = synchronized(random.nextDouble())
  override def nextInt(bound: Int): Int = synchronized(random.nextInt(bound))
  override def nextLong(): Long = synchronized(random.nextLong())
}
