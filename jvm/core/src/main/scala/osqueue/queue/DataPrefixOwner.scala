package osqueue.queue

import java.nio.charset.StandardCharsets.UTF_8

import osqueue.{Clock, IllegalQueueStateException, InvalidConfigException, StoreException}
import osqueue.store.{CasOutcome, ObjectStore}

/** The owner record: which manifest owns a data prefix, and the queue's one GC grace period. */
final case class DataPrefixOwner(manifest: String, claimedAtMs: Long, gcGracePeriodMs: Long)

/**
 * `<dataPathPrefix>/osqueue.owner` (docs/format.md §6): JSON
 * `{"version":1,"manifest":…,"claimedAtMs":…,"gcGracePeriodMs":…}` naming the one manifest whose
 * producers may write batches under the prefix and whose GC may delete there, and the grace period
 * all of them use. Producers and GC create it (if absent); anyone finding another manifest there
 * is refused, so two queues can never share a data prefix and GC only deletes its own queue's files.
 */
object DataPrefixOwner {
  val Name = "osqueue.owner"
  /** The default grace period; GC never records a shorter one for its queue. */
  val DefaultGracePeriodMs: Long = 600000L

  def key(dataPathPrefix: String): String = dataPathPrefix.stripSuffix("/") + "/" + Name

  /**
   * Proves `dataPathPrefix` holds `manifestKey`'s batches and reads the queue's grace period; with
   * `createWithGraceMs`, claims the prefix when unclaimed. None: unclaimed and not created. Throws
   * InvalidConfigException (option `dataPathPrefix`) when another manifest owns it or the record is not osqueue's.
   * A failing store is retried within `policy`: a create whose reply was lost is settled by the re-read,
   * which finds this queue's own record.
   */
  def claim(store: ObjectStore, manifestKey: String, dataPathPrefix: String, clock: Clock,
      createWithGraceMs: Option[Long], policy: RetryPolicy = RetryPolicy()): Option[DataPrefixOwner] = {
    val started = clock.nanoTime()
    var failures = 0
    while (true) {
      try return claimOnce(store, manifestKey, dataPathPrefix, clock, createWithGraceMs)
      catch {
        case e: StoreException =>
          failures += 1
          if (failures >= policy.maxAttempts || (clock.nanoTime() - started) / 1000000 >= policy.maxElapsedMs) throw e
          clock.sleepMillis(policy.delayMs(failures - 1))
      }
    }
    throw new IllegalStateException("unreachable")
  }

  private def claimOnce(store: ObjectStore, manifestKey: String, dataPathPrefix: String, clock: Clock,
      createWithGraceMs: Option[Long]): Option[DataPrefixOwner] = {
    val k = key(dataPathPrefix)
    val prefix = dataPathPrefix.stripSuffix("/")
    for (_ <- 0 until 2) { // a lost create race is settled by reading the winner's record
      store.get(k) match {
        case None =>
          val grace = createWithGraceMs.getOrElse(return None)
          val now = clock.nowMillis()
          val record = s"""{"version":1,"manifest":${quote(manifestKey)},"claimedAtMs":$now,"gcGracePeriodMs":$grace}"""
          store.putIfAbsent(k, record.getBytes(UTF_8)) match {
            case CasOutcome.Written(_) => return Some(DataPrefixOwner(manifestKey, now, grace))
            case _ =>
          }
        case Some(o) =>
          val text = new String(o.bytes, UTF_8)
          val parsed = for {
            m <- stringField(text, "manifest"); t <- longField(text, "claimedAtMs"); g <- longField(text, "gcGracePeriodMs")
            if t >= 0 && g >= 0
          } yield DataPrefixOwner(m, t, g)
          parsed match {
            case Some(owner) if owner.manifest == manifestKey => return Some(owner)
            case Some(DataPrefixOwner(owner, _, _)) => throw new InvalidConfigException("dataPathPrefix", prefix,
                s"holds the batches of the queue whose manifest is '$owner' (per '$k'), not of '$manifestKey': two " +
                  "queues sharing a data prefix would delete each other's batches in GC; give each queue its own")
            case None => throw new InvalidConfigException("dataPathPrefix", prefix,
                s"its owner record '$k' is not osqueue's (expected JSON with manifest, claimedAtMs and gcGracePeriodMs); GC will not " +
                  "delete there and producers will not write there")
          }
      }
    }
    throw new IllegalQueueStateException(s"could not create or read '$k'")
  }

  private def quote(s: String): String = {
    val b = new StringBuilder("\"")
    s.foreach {
      case '"' => b ++= "\\\""
      case '\\' => b ++= "\\\\"
      case c if c < 0x20 || c > 0x7E => b ++= f"\\u${c.toInt}%04x"
      case c => b += c
    }
    b += '"'
    b.toString
  }

  private def longField(json: String, name: String): Option[Long] =
    ("\"" + java.util.regex.Pattern.quote(name) + "\"\\s*:\\s*(-?\\d{1,19})").r.findFirstMatchIn(json)
      .flatMap(m => m.group(1).toLongOption)

  /** A JSON string field's value (the escapes JSON allows), without a JSON library in core. */
  private def stringField(json: String, name: String): Option[String] =
    ("\"" + java.util.regex.Pattern.quote(name) + "\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"").r.findFirstMatchIn(json)
      .flatMap { m =>
        val raw = m.group(1)
        val out = new StringBuilder
        var i = 0
        var ok = true
        while (ok && i < raw.length) {
          raw.charAt(i) match {
            case '\\' if i + 1 < raw.length =>
              raw.charAt(i + 1) match {
                case 'u' if i + 6 <= raw.length =>
                  val hex = raw.substring(i + 2, i + 6)
                  if (hex.forall(c => Character.digit(c, 16) >= 0)) out += Integer.parseInt(hex, 16).toChar else ok = false
                  i += 6
                case c =>
                  "\"\\/bfnrt".indexOf(c) match {
                    case -1 => ok = false
                    case j => out += "\"\\/\b\f\n\r\t".charAt(j)
                  }
                  i += 2
              }
            case c => out += c; i += 1
          }
        }
        if (ok) Some(out.toString) else None
      }
}
