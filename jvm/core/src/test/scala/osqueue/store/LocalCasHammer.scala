package osqueue.store

import java.nio.channels.FileChannel
import java.nio.file.{Paths, StandardOpenOption}

/**
 * A separate JVM for the cross-process CAS test: `LocalCasHammer <root> <increments> [threads]`
 * adds `increments` per thread to the counter object `counter` of the local store at `root`.
 */
object LocalCasHammer {
  def main(args: Array[String]): Unit = {
    val store = new LocalFileSystemStore(Paths.get(args(0)))
    val increments = args(1).toInt
    val threads = if (args.length > 2) args(2).toInt else 1
    val failures = new java.util.concurrent.ConcurrentLinkedQueue[Throwable]()
    val workers = (1 to threads).map { _ =>
      new Thread(() =>
        try (1 to increments).foreach(_ => CasCounter.increment(store, "counter"))
        catch { case e: Throwable => failures.add(e); () })
    }
    workers.foreach(_.start())
    workers.foreach(_.join())
    if (!failures.isEmpty) {
      failures.peek().printStackTrace()
      System.exit(1)
    }
    println("done")
  }
}

/** `LocalLockHolder <lock file>`: takes the file's POSIX lock, prints "locked", holds it until stdin closes. */
object LocalLockHolder {
  def main(args: Array[String]): Unit = {
    val channel = FileChannel.open(Paths.get(args(0)), StandardOpenOption.CREATE, StandardOpenOption.WRITE)
    val lock = channel.lock()
    println("locked")
    System.out.flush()
    while (System.in.read() >= 0) ()
    lock.release()
    channel.close()
  }
}
