package osqueue.store

import java.nio.channels.{FileChannel, FileLock, OverlappingFileLockException}
import java.nio.file.{Path, StandardOpenOption}
import java.util.concurrent.{ConcurrentHashMap, ThreadLocalRandom, TimeUnit}
import java.util.concurrent.locks.ReentrantLock

import scala.concurrent.duration.FiniteDuration
import scala.util.Using

import osqueue.StoreException

/**
 * The exclusive lock a local conditional write holds on `<dir>/.<name>.lock` (docs/format.md §7).
 *
 * Two layers: a `ReentrantLock` per lock-file path serializes the threads of this JVM (a
 * `FileChannel` lock is held per process, and taking it twice in one JVM throws
 * `OverlappingFileLockException`), and a whole-file POSIX record lock (`FileChannel.tryLock`,
 * the same `fcntl` lock as Python's `fcntl.lockf`) excludes other processes. The record lock is
 * polled every 1–5 ms until a deadline, so a stuck holder yields a [[osqueue.StoreException]],
 * never a hang. The lock file is never deleted: deleting it would let two writers lock
 * different inodes.
 */
private[store] object LocalFileLock {
  private val mutexes = new ConcurrentHashMap[Path, ReentrantLock]()

  /** Runs `body` holding the lock on `lockFile` (an absolute, real path). `what` names it in errors. */
  def withLock[T](lockFile: Path, timeout: FiniteDuration, what: String)(body: => T): T = {
    val deadline = System.nanoTime() + timeout.toNanos
    def timedOut() = new StoreException(
      s"$what: could not lock $lockFile within $timeout (another writer holds it; is a process stuck?)")
    val mutex = mutexes.computeIfAbsent(lockFile, _ => new ReentrantLock())
    if (!interruptible(what)(mutex.tryLock(timeout.toNanos, TimeUnit.NANOSECONDS))) throw timedOut()
    try {
      Using.resource(FileChannel.open(lockFile, StandardOpenOption.CREATE, StandardOpenOption.WRITE)) { channel =>
        val lock = acquire(channel, deadline, what).getOrElse(throw timedOut())
        try body
        finally lock.release()
      }
    } finally mutex.unlock()
  }

  private def acquire(channel: FileChannel, deadline: Long, what: String): Option[FileLock] = {
    while (true) {
      // Overlapping means another channel of this JVM holds it (a store outside this registry): wait too.
      val lock =
        try channel.tryLock()
        catch { case _: OverlappingFileLockException => null }
      if (lock != null) return Some(lock)
      if (System.nanoTime() - deadline > 0) return None
      interruptible(what)(Thread.sleep(1 + ThreadLocalRandom.current().nextInt(5)))
    }
    None
  }

  private def interruptible[T](what: String)(body: => T): T =
    try body
    catch {
      case e: InterruptedException =>
        Thread.currentThread().interrupt()
        throw new StoreException(s"$what: interrupted while waiting for the write lock", e)
    }
}
