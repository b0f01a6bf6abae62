package osqueue.format

import com.github.f4b6a3.ulid.Ulid

import osqueue.{RandomSource, SystemRandomSource}
import osqueue.store.ObjectKeys

/** ULID batch names (`<prefix>/<ULID>.batch`): creation time in the name, never reused. */
object BatchNames {
  private val Suffix = ".batch"
  private val Crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
  /** `random` gives the ULID's 80 bits of entropy (the seam; tests seed it). */
  def newKey(prefix: String, nowMs: Long, random: RandomSource = SystemRandomSource): String =
    ObjectKeys.join(prefix, newUlid(nowMs, random) + Suffix)

  private[format] def newUlid(nowMs: Long, random: RandomSource = SystemRandomSource): String = {
    val entropy = new Array[Byte](10)
    random.nextBytes(entropy)
    new Ulid(nowMs, entropy).toString
  }

  /** The ULID time (ms) of a key whose last segment is exactly `<ULID>.batch`, else None. */
  def ulidTimeMs(key: String): Option[Long] = ulidTimeMs(key, Suffix)

  private[format] def ulidTimeMs(key: String, suffix: String): Option[Long] = {
    val name = key.substring(key.lastIndexOf('/') + 1)
    if (name.length != 26 + suffix.length || !name.endsWith(suffix)) None
    else {
      val id = name.substring(0, 26)
      if (id.charAt(0) > '7' || !id.forall(c => Crockford.indexOf(c) >= 0)) None
      else Some(Ulid.from(id).getTime)
    }
  }

  /** True when `key` is a batch directly under `prefix`. */
  def isBatchUnder(prefix: String, key: String): Boolean = {
    val dir = if (prefix.isEmpty) "" else prefix.stripSuffix("/") + "/"
    key.startsWith(dir) && !key.substring(dir.length).contains('/') && ulidTimeMs(key).isDefined
  }
}
