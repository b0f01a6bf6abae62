package osqueue.store

import java.nio.charset.StandardCharsets.UTF_8
import java.util.UUID
import java.util.concurrent.ThreadLocalRandom

import osqueue.StoreException

/**
 * A counter object updated by read-modify-CAS, the way the queue updates its manifest.
 *
 * The object is the list of the increments' unique tokens, one per line (the count is the number
 * of lines), so that an increment whose outcome is unknown (a [[StoreException]] from a
 * conditional write: timeout, connection reset) is resolved exactly as the queue resolves an
 * ambiguous commit: re-read, and it landed if and only if its token is there (every later write
 * carries the earlier tokens).
 */
object CasCounter {
  final case class Stats(attempts: Int, unknownOutcomes: Int)

  /** Adds one increment to the counter at `key` (absent = 0), retrying conflicts. */
  def increment(store: ObjectStore, key: String): Stats = {
    val token = UUID.randomUUID().toString
    var attempts = 0
    var unknown = 0
    var done = false
    while (!done) {
      attempts += 1
      val current = store.get(key)
      val tokens = current.fold(Vector.empty[String])(o => parse(o.bytes))
      if (unknown > 0 && tokens.contains(token)) done = true // an earlier unknown write landed
      else {
        val bytes = (tokens :+ token).mkString("\n").getBytes(UTF_8)
        val outcome =
          try Some(current.fold(store.putIfAbsent(key, bytes))(o => store.putIfVersionMatches(key, bytes, o.version)))
          catch { case _: StoreException => unknown += 1; None }
        outcome match {
          case Some(CasOutcome.Written(_)) => done = true
          case _ => Thread.sleep(ThreadLocalRandom.current().nextInt(3).toLong)
        }
      }
    }
    Stats(attempts, unknown)
  }

  def value(store: ObjectStore, key: String): Int = {
    val tokens = store.get(key).fold(Vector.empty[String])(o => parse(o.bytes))
    require(tokens.distinct.size == tokens.size, "an increment was applied twice")
    tokens.size
  }

  private def parse(bytes: Array[Byte]): Vector[String] =
    new String(bytes, UTF_8).split('\n').iterator.filter(_.nonEmpty).toVector
}
