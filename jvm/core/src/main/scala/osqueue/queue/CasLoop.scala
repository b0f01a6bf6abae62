package osqueue.queue

import osqueue.{Clock, ConflictRetriesExhaustedException, StoreException}
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.CasOutcome

/** What a manifest edit wants after looking at a snapshot. */
sealed trait CasStep[+T]
object CasStep {
  /** Nothing (more) to write. */
  final case class Done[T](result: T) extends CasStep[T]
  /** Write these bytes conditionally on the snapshot; `result` is the value once it lands. */
  final case class Write[T](bytes: Array[Byte], result: () => T) extends CasStep[T]
}

/** How the previous conditional write ended, as the next step sees it. */
sealed trait PreviousAttempt
object PreviousAttempt {
  /** The precondition failed: someone else wrote first (or, rarely, a retried write of ours landed). */
  case object Conflict extends PreviousAttempt
  /** The write threw: it may or may not have been applied. */
  final case class Unknown(error: StoreException) extends PreviousAttempt
}

/**
 * The read-modify-CAS loop every manifest edit goes through: re-read after each failed or
 * unknown write, jittered exponential backoff, bounded budget. The step function sees how its
 * previous write ended so it can resolve ambiguous outcomes against the fresh snapshot.
 */
final class CasLoop(manifest: ManifestStore, policy: RetryPolicy, clock: Clock, metrics: MetricsRegistry, role: String) {
  private val writes = metrics.counter(MetricNames.ManifestWrites, "role" -> role)
  private val conflicts = metrics.counter(MetricNames.ManifestConflicts, "role" -> role)
  private val ambiguous = metrics.counter(MetricNames.AmbiguousWrites, "role" -> role)

  def run[T](step: (Snapshot, Option[PreviousAttempt]) => CasStep[T]): T = {
    val started = clock.nanoTime()
    var attempts = 0
    var previous: Option[PreviousAttempt] = None
    while (true) {
      val snapshot = manifest.read()
      step(snapshot, previous) match {
        case CasStep.Done(result) => return result
        case CasStep.Write(bytes, result) =>
          attempts += 1
          writes.increment()
          val outcome =
            try Right(manifest.write(bytes, snapshot))
            catch { case e: StoreException => Left(e) }
          outcome match {
            case Right(CasOutcome.Written(_)) => return result()
            case Right(CasOutcome.PreconditionFailed) =>
              conflicts.increment()
              previous = Some(PreviousAttempt.Conflict)
            case Left(e) =>
              ambiguous.increment()
              previous = Some(PreviousAttempt.Unknown(e))
          }
          val elapsedMs = (clock.nanoTime() - started) / 1000000
          if (attempts >= policy.maxAttempts || elapsedMs >= policy.maxElapsedMs) {
            previous match {
              case Some(PreviousAttempt.Unknown(e)) =>
                // One last look: the step either finds the write landed, raises AmbiguousCommit when it
                // cannot tell, or wants to write again, which means it did not land: report the store error.
                step(manifest.read(), previous) match {
                  case CasStep.Done(result) => return result
                  case CasStep.Write(_, _) => throw new StoreException(
                    s"manifest '${manifest.describe}': gave up after $attempts attempts in $elapsedMs ms; " +
                      s"the store kept failing (last: ${e.getMessage})", e)
                }
              case _ => throw new ConflictRetriesExhaustedException(manifest.describe, attempts, elapsedMs)
            }
          }
          clock.sleepMillis(policy.delayMs(attempts - 1))
      }
    }
    throw new IllegalStateException("unreachable")
  }
}
