package osqueue.store

import java.util.concurrent.ConcurrentHashMap

import osqueue.{ConditionalWritesNotHonouredException, StoreException}

/** The two forms an entity tag can take in `If-Match` (docs/format.md §8). */
sealed abstract class IfMatchForm(val name: String) {
  /** The header value for `tag` in this form. */
  def value(tag: String): String
  override def toString: String = name
}

object IfMatchForm {
  /** `If-Match: "<hex>"`, as S3 returns ETags (AWS, LocalStack, moto). */
  case object Quoted extends IfMatchForm("quoted") { def value(tag: String): String = "\"" + bare(tag) + "\"" }
  /** `If-Match: <hex>` (Ceph RGW matches only this form). */
  case object Unquoted extends IfMatchForm("unquoted") { def value(tag: String): String = bare(tag) }
  val all: Vector[IfMatchForm] = Vector(Quoted, Unquoted)

  /** An entity tag without its quotes (and weak `W/` mark): for comparing tags. */
  def bare(tag: String): String = {
    val t = tag.trim.stripPrefix("W/")
    if (t.length >= 2 && t.head == '"' && t.last == '"') t.substring(1, t.length - 1) else t
  }
}

/**
 * What one endpoint does with conditional writes, as its probe found: the `If-Match` forms that
 * refuse a wrong tag (the one sent first), or why the endpoint is refused.
 */
final class EndpointConditions(val endpoint: String, initialForms: Vector[IfMatchForm], val refusal: Option[String]) {
  @volatile private var forms: Vector[IfMatchForm] = initialForms

  def ifMatchForms: Vector[IfMatchForm] = forms
  def ifMatchForm: IfMatchForm = forms.head

  /**
   * The form a replace with the object's own tag last landed in (the probe's step 4, or a write): the
   * server takes it, so a 412 in it is a conflict (the form rule then checks only every 4th in a row).
   */
  @volatile var confirmed: Option[IfMatchForm] = None

  /** `form` matched where the current one did not: send it from now on. */
  def learned(form: IfMatchForm): Unit = synchronized { forms = form +: forms.filterNot(_ == form) }
}

/** What was learned per endpoint, for the life of the JVM. */
object EndpointConditions {
  private val known = new ConcurrentHashMap[String, EndpointConditions]()
  private val probing = new Object

  /** The endpoint's conditions, from `probe` the first time (one probe at a time; a failed probe is not kept). */
  private[store] def getOrProbe(endpoint: String)(probe: => EndpointConditions): EndpointConditions = {
    val found = known.get(endpoint)
    if (found != null) found
    else probing.synchronized {
      val again = known.get(endpoint)
      if (again != null) again
      else { val probed = probe; known.put(endpoint, probed); probed }
    }
  }

  /**
   * What `endpoint` does with conditional writes, probed once per JVM and remembered. A request of
   * the probe that fails (5xx, I/O) runs the probe again on a new scratch object: a store error
   * during the probe is no verdict, and a caller's retry budget covers its own write, not this
   * one-off check. Every store with conditional writes (S3, GCS, Azure) goes through here.
   * `conclusive`: a probe error not worth retrying (e.g. a missing bucket). Throws
   * ConditionalWritesNotHonouredException for an endpoint that does not honour them, and the last
   * StoreException after [[S3Store.ProbeAttempts]] (nothing is kept; the next call probes again).
   */
  def probed(endpoint: String, conclusive: StoreException => Boolean = _ => false)(probe: () => EndpointConditions)
      : EndpointConditions = {
    val conditions = getOrProbe(endpoint)(retrying(probe, conclusive))
    conditions.refusal.foreach(r => throw new ConditionalWritesNotHonouredException(endpoint, r))
    conditions
  }

  private def retrying(probe: () => EndpointConditions, conclusive: StoreException => Boolean): EndpointConditions = {
    var attempt = 1
    while (true) {
      try return probe()
      catch {
        case e: StoreException if attempt < S3Store.ProbeAttempts && !conclusive(e) =>
          Thread.sleep(S3Store.ProbeBackoffMs << (attempt - 1))
          attempt += 1
      }
    }
    throw new IllegalStateException("unreachable")
  }

  /** Sets what is known about an endpoint, as if its probe had found it (tests). */
  private[osqueue] def remember(conditions: EndpointConditions): Unit = { known.put(conditions.endpoint, conditions); () }

  /** Drops what was learned about `endpoint`, so the next conditional write probes again (tests). */
  def forget(endpoint: String): Unit = { known.remove(endpoint); () }

  /** What was learned about `endpoint`, if it was probed. */
  def get(endpoint: String): Option[EndpointConditions] = Option(known.get(endpoint))
}
