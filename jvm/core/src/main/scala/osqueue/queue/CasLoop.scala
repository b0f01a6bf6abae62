package osqueue.queue

import osqueue.{
  AmbiguousCommitException,
  Clock,
  ConflictRetriesExhaustedException,
  OsqueueException,
  RandomSource,
  StoreException,
  SystemRandomSource
}
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
 * How a caller that tracks its own writes of unknown outcome settles them when the loop gives up
 * (budget spent, or the manifest cannot be re-read): a write that may still land must be reported
 * as [[AmbiguousCommitException]], never as a plain failure that invites a duplicate retry.
 */
trait Settle[T] {
  /** A last look at a fresh snapshot: the result if one of the caller's earlier writes landed. */
  def landed(snapshot: Snapshot, previous: Option[PreviousAttempt]): Option[T]
  /** A write whose outcome is still unknown (it may have landed or may still land), described; None if none. */
  def stillUnknown(previous: Option[PreviousAttempt]): Option[String]
}

/**
 * The read-modify-CAS loop every manifest edit goes through: re-read after each failed or
 * unknown write (or failed read), jittered exponential backoff, bounded budget. Python's
 * `osqueue.cas_loop.CasLoop` runs the same algorithm. The step function sees how its
 * previous write ended so it can resolve ambiguous outcomes against the fresh snapshot.
 *
 * With `reuseOwnWrite` (the producers' appends), a run starts from the bytes this loop's last
 * landed write put there and the version the store returned for them, instead of reading: a
 * lone writer makes one request per edit. That snapshot serves only as the first write's
 * precondition: a stale one costs a conflict and a fresh read, a step that would not write on
 * it is asked again on a fresh read, and a write of unknown outcome leaves nothing to reuse.
 */
final class CasLoop(manifest: ManifestStore, policy: RetryPolicy, clock: Clock, metrics: MetricsRegistry, role: String,
    random: RandomSource = SystemRandomSource, reuseOwnWrite: Boolean = false) {
  private val writes = metrics.counter(MetricNames.ManifestWrites, "role" -> role)
  private val conflicts = metrics.counter(MetricNames.ManifestConflicts, "role" -> role)
  private val ambiguous = metrics.counter(MetricNames.AmbiguousWrites, "role" -> role)
  /** The manifest as this loop's last landed write left it (taken by the next run; null: read). */
  private val ownWrite = new java.util.concurrent.atomic.AtomicReference[Snapshot]()

  def run[T](step: (Snapshot, Option[PreviousAttempt]) => CasStep[T], settle: Option[Settle[T]] = None): T = {
    val started = clock.nanoTime()
    var attempts = 0
    var previous: Option[PreviousAttempt] = None
    def spent: Boolean =
      attempts >= policy.maxAttempts || (clock.nanoTime() - started) / 1000000 >= policy.maxElapsedMs
    var reused = if (reuseOwnWrite) ownWrite.getAndSet(null) else null
    while (true) {
      var snapshot: Snapshot = reused
      val fromOwnWrite = reused != null
      reused = null
      while (snapshot == null)
        try snapshot = manifest.read()
        catch {
          case e: StoreException =>
            // A failed read is one more failed try: retried within the budget like a failed write.
            attempts += 1
            if (spent) throw settled(settle, previous, e)
            clock.sleepMillis(policy.delayMs(attempts - 1, () => random.nextDouble()))
        }
      // Whatever the step throws (a failed stale re-upload, the sink's owner check) while an earlier
      // write is undecided is ambiguous too: "not written" would invite a duplicate retry.
      val next =
        try step(snapshot, previous)
        catch {
          case e: AmbiguousCommitException => throw e
          case e: Exception => throw settled(settle, previous, e)
        }
      next match {
        case CasStep.Done(_) if fromOwnWrite => () // decided on a fresh read only: read and ask again
        case CasStep.Done(result) => return result
        case CasStep.Write(bytes, result) =>
          attempts += 1
          val outcome =
            try Right(manifest.write(bytes, snapshot))
            catch { case e: StoreException => Left(e) }
          outcome match {
            case Right(CasOutcome.Written(version)) =>
              writes.increment() // landed writes only, as in Python (bench/README: attempts = writes + conflicts)
              if (reuseOwnWrite) ownWrite.set(Snapshot(bytes, Some(version)))
              return result()
            case Right(CasOutcome.PreconditionFailed) =>
              conflicts.increment()
              previous = Some(PreviousAttempt.Conflict)
            case Left(e) =>
              ambiguous.increment()
              previous = Some(PreviousAttempt.Unknown(e))
          }
          if (spent) {
            val elapsedMs = (clock.nanoTime() - started) / 1000000
            def exhausted: OsqueueException = previous match {
              case Some(PreviousAttempt.Unknown(e)) => new StoreException(
                  s"manifest '${manifest.describe}': gave up after $attempts attempts in $elapsedMs ms; " +
                    s"the store kept failing (last: ${e.getMessage})", e)
              case _ => new ConflictRetriesExhaustedException(manifest.describe, attempts, elapsedMs)
            }
            settle match {
              case Some(s) =>
                if (s.stillUnknown(previous).isDefined) {
                  // A failed last look leaves the write undecided: reported as ambiguous below.
                  val last =
                    try Some(manifest.read())
                    catch { case _: StoreException => None }
                  last.flatMap(s.landed(_, previous)).foreach(r => return r)
                }
                throw settled(settle, previous, exhausted)
              case None => previous match {
                  case Some(PreviousAttempt.Unknown(_)) =>
                    // One last look: the step either finds its edit done, or wants to write again (it did not land).
                    step(manifest.read(), previous) match {
                      case CasStep.Done(result) => return result
                      case CasStep.Write(_, _) => throw exhausted
                    }
                  case _ => throw exhausted
                }
            }
          }
          clock.sleepMillis(policy.delayMs(attempts - 1, () => random.nextDouble()))
      }
    }
    throw new IllegalStateException("unreachable")
  }

  /** `error` as the caller sees it: ambiguous while a write of unknown outcome may still land. */
  private def settled[T](settle: Option[Settle[T]], previous: Option[PreviousAttempt], error: Exception): Exception =
    settle.flatMap(_.stillUnknown(previous)) match {
      case Some(write) => new AmbiguousCommitException(
          s"manifest '${manifest.describe}': gave up (${error.getMessage}) while $write had an unknown outcome; " +
            "it may still land, so it is neither reported as written nor as failed", error)
      case None => error
    }
}
