package scala.jdk

import scala.concurrent.duration.FiniteDuration

/**
 * Scala 2.12 only: the part of Scala 2.13's `scala.jdk.DurationConverters` the shared core sources
 * use. The 2.12 fat jars relocate it (build.sbt), so it cannot meet another copy on a classpath.
 */
object DurationConverters {
  implicit final class ScalaDurationOps(private val d: FiniteDuration) extends AnyVal {
    def toJava: java.time.Duration = java.time.Duration.ofNanos(d.toNanos)
  }
}
