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
import java.util.concurrent.atomic.LongAdder

import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.CasOutcome

/** What an edit of a [[CasObject]] wants after looking at a snapshot. */
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
 * (budget spent, or the object cannot be re-read): a write that may still land must be reported
 * as [[AmbiguousCommitException]], never as a plain failure that invites a duplicate retry.
 */
trait Settle[T] {
  /** A last look at a fresh snapshot: the result if one of the caller's earlier writes landed. */
  def landed(snapshot: Snapshot, previous: Option[PreviousAttempt]): Option[T]
  /** A write whose outcome is still unknown (it may have landed or may still land), described; None if none. */
  def stillUnknown(previous: Option[PreviousAttempt]): Option[String]
}

/**
 * What a [[CasLoop]] counts: its landed writes, conflicts and writes of unknown outcome. Only the
 * manifest's loops count (`buffer.manifest_*` by role), so that those stay counts of manifest
 * writes; the objects beside it (the Spark sink's writer states, the queue id) are counted nowhere.
 */
final case class CasCounters(writes: LongAdder, conflicts: LongAdder, ambiguous: LongAdder)

object CasCounters {
  def manifest(metrics: MetricsRegistry, role: String): CasCounters = CasCounters(
    metrics.counter(MetricNames.ManifestWrites, "role" -> role),
    metrics.counter(MetricNames.ManifestConflicts, "role" -> role),
    metrics.counter(MetricNames.AmbiguousWrites, "role" -> role))

  /** Counters no registry holds: the loop of an object that is not the manifest. */
  def uncounted: CasCounters = CasCounters(new LongAdder, new LongAdder, new LongAdder)
}

/**
 * The read-modify-CAS loop every edit of a [[CasObject]] (the manifest's above all) goes through:
 * re-read after each failed or unknown write (or failed read), jittered exponential backoff,
 * bounded budget. Python's `osqueue.queue.cas_loop.CasLoop` runs the same algorithm. The step function sees how its
 * previous write ended so it can resolve ambiguous outcomes against the fresh snapshot.
 *
 * With `reuseOwnWrite` (the producers' appends), a run starts from the bytes this loop's last
 * landed write put there and the version the store returned for them, instead of reading: a
 * lone writer makes one request per edit. That snapshot serves only as the first write's
 * precondition: a stale one costs a conflict and a fresh read, a step that would not write on
 * it is asked again on a fresh read, and a write of unknown outcome leaves nothing to reuse.
 */
final class CasLoop(obj: CasObject, policy: RetryPolicy, clock: Clock, counters: CasCounters,
    random: RandomSource = SystemRandomSource, reuseOwnWrite: Boolean = false) {
  private val writes = counters.writes
  private val conflicts = counters.conflicts
  private val ambiguous = counters.ambiguous
  /** The object as this loop's last landed write left it (taken by the next run; null: read). */
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
        try snapshot = obj.read()
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
            try Right(obj.write(bytes, snapshot))
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
                  s"manifest '${obj.describe}': gave up after $attempts attempts in $elapsedMs ms; " +
                    s"the store kept failing (last: ${e.getMessage})", e)
              case _ => new ConflictRetriesExhaustedException(obj.describe, attempts, elapsedMs)
            }
            settle match {
              case Some(s) =>
                if (s.stillUnknown(previous).isDefined) {
                  // A failed last look leaves the write undecided: reported as ambiguous below.
                  val last =
                    try Some(obj.read())
                    catch { case _: StoreException => None }
                  last.flatMap(s.landed(_, previous)).foreach(r => return r)
                }
                throw settled(settle, previous, exhausted)
              case None => previous match {
                  case Some(PreviousAttempt.Unknown(_)) =>
                    // One last look: the step either finds its edit done, or wants to write again (it did not land).
                    step(obj.read(), previous) match {
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
          s"manifest '${obj.describe}': gave up (${error.getMessage}) while $write had an unknown outcome; " +
            "it may still land, so it is neither reported as written nor as failed", error)
      case None => error
    }
}
