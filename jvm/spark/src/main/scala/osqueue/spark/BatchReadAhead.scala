package osqueue.spark

import java.util.concurrent.{
  Callable,
  CancellationException,
  ExecutionException,
  Future,
  LinkedBlockingQueue,
  ThreadFactory,
  ThreadPoolExecutor,
  TimeUnit
}
import java.util.concurrent.atomic.{AtomicInteger, AtomicLong}

import scala.collection.mutable
import scala.util.{Failure, Success, Try}

import org.apache.spark.internal.Logging

/**
 * How far a partition reader fetches ahead of the batch file it reads: at most `batches` GETs in
 * flight or batch files fetched and not yet read, and no more than `bytes` of them, counting each
 * as the largest batch seen so far (the first is fetched alone, so a partition of 64 MB batch files
 * holds one ahead, not eight). Before any is fetched, files whose listed sizes add up to at most
 * `bytes / BatchReadAhead.UnknownExpansion` go together: a compressed file's records can be many
 * times its size, and small files (a micro-batch of a few records each) then cost one round trip, not two.
 */
private[spark] final case class ReadAheadLimits(batches: Int, bytes: Long) {
  require(batches >= 1 && bytes >= 1, s"read-ahead limits must be positive: $this")
}

private[spark] object ReadAheadLimits {
  /** 8 GETs in flight: ~400 batch files/s per task at a 20 ms round trip, instead of ~50. */
  val Default: ReadAheadLimits = ReadAheadLimits(batches = 8, bytes = 64L << 20)
}

/**
 * The items of `items` in order, each with the outcome of `fetch` on it, fetched ahead of the
 * reader on a few threads of its own within `limits` (`size`: what a fetched value holds, in bytes).
 * On S3 one batch GET is a round trip (~20 ms), so fetching a partition's batch files one after
 * another caps a task at ~50 files/s. A failed fetch is handed over as the Failure of its own item,
 * after every item before it, so the error surfaces on the rows it belongs to. `close()` cancels
 * what is in flight (interrupting the GETs) and stops the threads: an executor JVM outlives its tasks.
 * `items` is pulled on the caller's thread only.
 */
private[spark] final class BatchReadAhead[A, B](items: Iterator[A], limits: ReadAheadLimits, fetch: A => B,
    size: B => Long, name: String, listedSize: A => Option[Long] = (_: A) => None)
    extends Iterator[(A, Try[B])] with AutoCloseable with Logging {
  private val inFlight = mutable.Queue.empty[(A, Future[B])]
  private val upcoming = items.buffered
  /** The largest value fetched so far (bytes), -1 before the first: what the byte limit counts per item. */
  private val largest = new AtomicLong(-1)
  private var pool: Option[ThreadPoolExecutor] = None
  private var closed = false

  private def executor: ThreadPoolExecutor = pool.getOrElse {
    val threads = new AtomicInteger()
    val p = new ThreadPoolExecutor(limits.batches, limits.batches, 0L, TimeUnit.MILLISECONDS,
      new LinkedBlockingQueue[Runnable](),
      new ThreadFactory {
        override def newThread(r: Runnable): Thread = {
          val t = new Thread(r, s"${BatchReadAhead.ThreadPrefix}-${threads.incrementAndGet()} ($name)")
          t.setDaemon(true)
          t
        }
      })
    pool = Some(p)
    p
  }

  /**
   * Whether one more fetch fits: always the first; then within the bytes, each counted as the largest
   * fetched, or before any was fetched, when every one's size is listed and they are all small.
   */
  private def roomForOne: Boolean = inFlight.size < limits.batches && (inFlight.isEmpty || {
    val l = largest.get()
    if (l >= 0) (inFlight.size + 1).toLong * l <= limits.bytes
    else {
      val listed = (inFlight.iterator.map(_._1) ++ Iterator(upcoming.head)).map(listedSize).toSeq
      listed.forall(_.isDefined) && listed.flatten.sum <= limits.bytes / BatchReadAhead.UnknownExpansion
    }
  })

  private def fill(): Unit = while (!closed && upcoming.hasNext && roomForOne) {
    val item = upcoming.next()
    inFlight.enqueue(item -> executor.submit(new Callable[B] {
      override def call(): B = {
        val value = fetch(item)
        largest.accumulateAndGet(size(value), (a: Long, b: Long) => math.max(a, b))
        value
      }
    }))
  }

  /** Fetches in flight or fetched and not yet handed out (tests). */
  def pending: Int = inFlight.size

  override def hasNext: Boolean = { fill(); inFlight.nonEmpty }

  override def next(): (A, Try[B]) = {
    if (!hasNext) throw OsqueueExceptions.internalError(s"next() past the last batch in $name")
    val (item, f) = inFlight.dequeue()
    val outcome =
      try Success(f.get())
      catch {
        case e: ExecutionException if e.getCause != null => Failure(e.getCause)
        case e: CancellationException => Failure(e)
      }
    fill() // the window again, now that this one's size is known
    (item, outcome)
  }

  override def close(): Unit = if (!closed) {
    closed = true
    inFlight.foreach(_._2.cancel(true))
    inFlight.clear()
    pool.foreach { p =>
      p.shutdownNow()
      if (!p.awaitTermination(BatchReadAhead.CloseWaitMs, TimeUnit.MILLISECONDS))
        logWarning(s"read-ahead of $name: a fetch did not stop within ${BatchReadAhead.CloseWaitMs} ms of close; " +
          "its thread ends when the request returns")
    }
  }
}

private[spark] object BatchReadAhead {
  val ThreadPrefix = "osqueue-batch-read-ahead"
  /**
   * How many times its listed (encoded) size a batch file's records are taken to be before any was
   * fetched. A file compressed further can overshoot the byte limit, once, as the first file fetched
   * alone always could.
   */
  val UnknownExpansion = 1024L
  /** How long close() waits for interrupted fetches to return. */
  val CloseWaitMs = 10000L
}
