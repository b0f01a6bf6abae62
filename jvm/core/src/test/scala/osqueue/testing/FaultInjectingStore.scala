package osqueue.testing

import java.util.concurrent.atomic.AtomicInteger

import osqueue.StoreException
import osqueue.store._

/**
 * Wraps a store and injects faults into conditional writes: fail before applying, or apply and
 * then lose the reply (report a store error or a failed precondition). `plan` decides per call.
 */
class FaultInjectingStore(underlying: ObjectStore, plan: (String, Int) => FaultInjectingStore.Fault)
    extends ForwardingStore(underlying) {
  import FaultInjectingStore._
  private val conditionalCalls = new AtomicInteger()
  val injected = new AtomicInteger()

  override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome =
    inject(key)(underlying.putIfAbsent(key, bytes))
  override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome =
    inject(key)(underlying.putIfVersionMatches(key, bytes, expected))

  private def inject(key: String)(write: => CasOutcome): CasOutcome = {
    plan(key, conditionalCalls.getAndIncrement()) match {
      case Fault.None => write
      case Fault.FailBefore =>
        injected.incrementAndGet()
        throw new StoreException(s"injected failure before writing '$key'")
      case Fault.ApplyThenError =>
        val outcome = write
        if (outcome.isInstanceOf[CasOutcome.Written]) injected.incrementAndGet()
        outcome match {
          case CasOutcome.Written(_) => throw new StoreException(s"injected: reply lost after writing '$key'")
          case other => other
        }
      case Fault.ApplyThenPreconditionFailed =>
        write match {
          case CasOutcome.Written(_) => injected.incrementAndGet(); CasOutcome.PreconditionFailed
          case other => other
        }
    }
  }
}

object FaultInjectingStore {
  sealed trait Fault
  object Fault {
    case object None extends Fault
    case object FailBefore extends Fault
    case object ApplyThenError extends Fault
    case object ApplyThenPreconditionFailed extends Fault
  }
}
