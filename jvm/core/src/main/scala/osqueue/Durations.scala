package osqueue

import java.util.Locale

import scala.concurrent.duration._

/**
 * The one duration grammar of every option (tests/golden/vocabulary.json; Python:
 * `osqueue.store.parse_duration`): `<digits> [unit]`, case-insensitive, units ns, us, ms, s, m or
 * min, h, d; no unit means milliseconds (Hadoop's `60000`).
 */
object Durations {
  private val Pattern = """(?i)^\s*(\d+)\s*(ns|us|ms|s|min|m|h|d)?\s*$""".r

  /** The duration `option` is set to; [[InvalidConfigException]] naming the option if it is not one. */
  def parse(option: String, value: String): FiniteDuration =
    parseOrHint(value).fold(hint => throw new InvalidConfigException(option, value, hint), identity)

  /** The duration, or what is wrong with `value` (for callers with their own error type). */
  def parseOrHint(value: String): Either[String, FiniteDuration] = value match {
    case Pattern(n, unit) =>
      val toDuration: Long => FiniteDuration = Option(unit).map(_.toLowerCase(Locale.ROOT)).getOrElse("ms") match {
        case "ns" => _.nanos
        case "us" => _.micros
        case "ms" => _.millis
        case "s" => _.seconds
        case "m" | "min" => _.minutes
        case "h" => _.hours
        case _ => _.days
      }
      try Right(toDuration(n.toLong))
      catch { case _: IllegalArgumentException => Left("duration out of range") }
    case _ => Left("expected a duration such as 60000 (ms), 500ms, 30s, 5m, 1h or 2d")
  }
}
