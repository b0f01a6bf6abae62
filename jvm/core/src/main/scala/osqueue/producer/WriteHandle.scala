package osqueue.producer

import java.util.concurrent.{CompletableFuture, ExecutionException, TimeUnit, TimeoutException}

import scala.concurrent.duration.Duration
import scala.util.{Failure, Try}

/** Where a produced vector of entries became durable: its batch and the index of its first record. */
final case class DurableWrite(sequence: Long, location: String, firstIndex: Int, ingestionTimeMs: Long)

/**
 * Returned by `produce()`: the entries are durable (batch uploaded AND its location in the
 * manifest) once this completes successfully. A failed batch fails every handle in it.
 */
final class WriteHandle private[producer] (private[producer] val future: CompletableFuture[DurableWrite]) {
  /** None while pending; then the outcome. Never blocks. */
  def result(): Option[Try[DurableWrite]] =
    if (!future.isDone) None
    else Some(Try(future.getNow(null)).recoverWith { case e: java.util.concurrent.CompletionException => Failure(e.getCause) })

  /** Blocks until durable; rethrows the producer's error (an `OsqueueException`) on failure. */
  def awaitDurable(timeout: Duration = Duration.Inf): DurableWrite =
    try {
      if (timeout.isFinite) future.get(timeout.toNanos, TimeUnit.NANOSECONDS) else future.get()
    } catch {
      case e: ExecutionException => throw e.getCause
      case _: TimeoutException => throw new TimeoutException(s"entries not durable within $timeout")
    }

  def isDone: Boolean = future.isDone
  def toCompletableFuture: CompletableFuture[DurableWrite] = future
}

object WriteHandle {
  private[producer] def failed(e: Throwable): WriteHandle = {
    val f = new CompletableFuture[DurableWrite]()
    f.completeExceptionally(e)
    new WriteHandle(f)
  }
  private[producer] def apply(): WriteHandle = new WriteHandle(new CompletableFuture[DurableWrite]())
}
