package osqueue.spark

import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}

import scala.concurrent.duration.FiniteDuration

import org.apache.spark.internal.Logging

import osqueue.Clock
import osqueue.gc.{GarbageCollector, GcResult}
import osqueue.store.ObjectStore

/**
 * The source's GC: once `start()` is called (when the stream takes over the queue), one cycle at
 * once and one every `interval` after, on a daemon thread, so short and AvailableNow runs collect
 * too. A failed cycle is logged and the next one runs. `stop()` lets a running cycle finish (up to
 * [[GcSchedule.StopWaitSeconds]]) and runs no more.
 */
private[spark] final class GcSchedule(queue: String, interval: FiniteDuration, cycle: () => GcResult) extends Logging {
  @volatile private var executor: Option[ScheduledExecutorService] = None

  def start(): Unit = synchronized {
    if (executor.isEmpty) {
      val ex = Executors.newSingleThreadScheduledExecutor { r =>
        val t = new Thread(r, s"osqueue-gc-$queue"); t.setDaemon(true); t
      }
      val run: Runnable = () =>
        try {
          val r = cycle()
          if (r.deleted.nonEmpty || r.failed.nonEmpty)
            logInfo(s"osqueue GC on '$queue': deleted ${r.deleted.size}, failed ${r.failed.size}")
        } catch { case e: Exception => logWarning(s"osqueue GC cycle failed; retrying in $interval", e) }
      ex.execute(run) // the first cycle now: a run shorter than the interval still collects
      ex.scheduleWithFixedDelay(run, interval.toMillis, interval.toMillis, TimeUnit.MILLISECONDS)
      executor = Some(ex)
    }
  }

  /** Started and not yet stopped. */
  def running: Boolean = executor.exists(!_.isShutdown)

  def stop(): Unit = executor.foreach { ex =>
    ex.shutdown()
    if (!ex.awaitTermination(GcSchedule.StopWaitSeconds, TimeUnit.SECONDS)) ex.shutdownNow()
  }
}

private[spark] object GcSchedule {
  val StopWaitSeconds = 10L

  /** The schedule of the stream's options, or None with gc=false. */
  def forSource(store: ObjectStore, options: SourceOptions, clock: Clock): Option[GcSchedule] =
    if (!options.gcEnabled) None
    else {
      val location = options.location
      val collector = new GarbageCollector(store, location.manifestPath, location.dataPathPrefix, options.gcGracePeriod, clock)
      Some(new GcSchedule(location.identity, options.gcInterval, () => collector.runOnce()))
    }
}
