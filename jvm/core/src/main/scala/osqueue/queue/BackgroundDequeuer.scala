package osqueue.queue

import org.slf4j.LoggerFactory

import osqueue.{Clock, ErrorKind, OsqueueException}

/**
 * Dequeues off the caller's critical path. `request(through)` records the newest sequence the
 * caller acknowledged and returns at once; one daemon thread dequeues through the newest request
 * (requests made while a dequeue runs are coalesced into its next write), and never past it.
 *
 * A failure that a later try may fix (the store failed, the CAS kept conflicting) leaves the
 * entries queued and is tried again after `retryDelayMs` or at the next request: nothing is lost
 * or read twice meanwhile, since the caller's own position decides what it reads. Any other
 * failure — a fence above all — stops the dequeuer for good and is raised by [[checkFailed]] and
 * every later request, so the caller fails on its next call with the original error.
 */
final class BackgroundDequeuer(consumer: QueueConsumer, name: String, clock: Clock, retryDelayMs: Long = 1000) {
  private val log = LoggerFactory.getLogger(classOf[BackgroundDequeuer])
  private val lock = new Object
  // Guarded by `lock`: the newest sequence requested, the newest dequeued (or found gone), the state.
  private var requested = -1L
  private var done = -1L
  private var closed = false
  private var retryPending = false
  @volatile private var failure: Option[Exception] = None
  @volatile private var dequeues = 0L
  private var thread: Option[Thread] = None

  /** Dequeue writes (and no-op checks) run so far: fewer than the requests when they coalesce. */
  def dequeueRuns: Long = dequeues

  /** The failure that stopped the dequeuer, if any. */
  def failedWith: Option[Exception] = failure

  /** Raises the failure that stopped the dequeuer, if any (e.g. the consumer was fenced). */
  def checkFailed(): Unit = failure.foreach(e => throw e)

  /** Asks for entries `<= through` to be dequeued; returns at once. */
  def request(through: Long): Unit = {
    checkFailed()
    lock.synchronized {
      if (closed) {
        log.warn(s"not dequeuing $name through $through: its dequeuer is closed (the entries stay queued)")
        return
      }
      if (through > requested) requested = through
      if (thread.isEmpty) {
        val t = new Thread(() => run(), s"osqueue-dequeuer-$name")
        t.setDaemon(true)
        t.start()
        thread = Some(t)
      }
      lock.notifyAll()
    }
  }

  /**
   * Waits until every request so far is dequeued, the dequeuer failed, or `timeoutMs` passed.
   * True when everything requested is dequeued.
   */
  def flush(timeoutMs: Long): Boolean = {
    val deadline = clock.nanoTime() + timeoutMs * 1000000L
    lock.synchronized {
      while (done < requested && failure.isEmpty && clock.nanoTime() < deadline) {
        retryPending = false // a flush does not wait out the retry pause
        lock.notifyAll()
        lock.wait(math.max(1L, math.min(50L, (deadline - clock.nanoTime()) / 1000000L)))
      }
      done >= requested
    }
  }

  /** Stops the thread; a dequeue in flight is interrupted. Call [[flush]] first to let it land. */
  def close(): Unit = {
    val t = lock.synchronized {
      closed = true
      lock.notifyAll()
      thread
    }
    t.foreach { t =>
      t.interrupt()
      t.join(1000)
    }
  }

  private def run(): Unit =
    try
      while (true) {
        val target = lock.synchronized {
          while (!closed && (done >= requested || retryPending)) {
            if (retryPending) { lock.wait(retryDelayMs); retryPending = false }
            else lock.wait()
          }
          if (closed) return
          requested
        }
        try {
          consumer.dequeueThrough(target)
          dequeues += 1
          lock.synchronized { done = math.max(done, target); lock.notifyAll() }
        } catch {
          case e: OsqueueException if e.kind == ErrorKind.Transient =>
            log.warn(s"dequeuing $name through $target failed; trying again in $retryDelayMs ms or at the next " +
              s"commit (the entries stay queued meanwhile): ${e.getMessage}")
            lock.synchronized { retryPending = true }
          case e: Exception if lock.synchronized(closed) =>
            log.info(s"dequeuer of $name stopped while dequeuing through $target: ${e.getMessage}")
            return
          case e: Exception =>
            log.error(s"dequeuing $name through $target failed; no more dequeues from this consumer", e)
            failure = Some(e)
            lock.synchronized(lock.notifyAll())
            return
        }
      }
    catch { case _: InterruptedException => () }
}
