package osqueue.spark

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.spark.sql.connector.read.streaming.Offset

import osqueue.format.EntryTag

/**
 * A position in a queue: `nextSequence` is the next manifest sequence to read (like Kafka's
 * next offset). The JSON also names the queue and its id, so a checkpoint pointed at another or
 * recreated queue is detected, and carries a format version so newer offsets are refused.
 * `delivered` records, per sink writer, which copy of its batches was read (docs/adr/0002), so a
 * second copy appended by a replayed sink epoch is skipped, consistently across restarts.
 * `incarnation` is the manifest incarnation the position belongs to (docs/format.md §5.2), so a
 * reset queue is detected whatever its length; offsets written before it have none (None).
 * `entryIndex` is how many entries of the batch at `nextSequence` were already read: a real-time
 * batch can end in the middle of a batch file. Such an offset is written as format version 2, so an
 * older osqueue refuses it instead of reading those entries again; every other offset stays version 1.
 */
private[spark] final case class OsqueueSourceOffset(queue: String, queueId: String, nextSequence: Long,
    delivered: EntryTag.Delivered = EntryTag.Delivered.Empty, incarnation: Option[Long] = None,
    entryIndex: Int = 0,
    /** The named subscription that read (docs/adr/0005) and its incarnation; None: the unnamed reader. */
    subscription: Option[String] = None,
    subscriptionIncarnation: Option[Long] = None) extends Offset {
  override val json: String = {
    val node = OsqueueSourceOffset.mapper.createObjectNode()
    node.put("version", if (entryIndex > 0) OsqueueSourceOffset.Version else 1).put("queue", queue)
      .put("queueId", queueId).put("nextSequence", nextSequence)
    if (entryIndex > 0) node.put("entryIndex", entryIndex)
    incarnation.foreach(node.put("incarnation", _))
    subscription.foreach(node.put("subscription", _))
    subscriptionIncarnation.foreach(node.put("subscriptionIncarnation", _))
    if (delivered.writers.nonEmpty) {
      val writers = node.putObject("writers")
      delivered.writers.toSeq.sortBy(_._1).foreach { case (w, (batch, attempt)) =>
        writers.putArray(w).add(batch).add(attempt)
      }
    }
    OsqueueSourceOffset.mapper.writeValueAsString(node)
  }
}

private[spark] object OsqueueSourceOffset {
  /** The newest offset format this osqueue reads (2: `entryIndex`). */
  val Version = 2
  private val mapper = new ObjectMapper()

  def parse(json: String): OsqueueSourceOffset = {
    val node =
      try mapper.readTree(json)
      catch {
        case e: Exception => throw OsqueueExceptions.badOffset(json, s"not JSON (${e.getMessage})")
      }
    node match {
      case o: ObjectNode if o.has("version") && o.has("queue") && o.has("queueId") && o.has("nextSequence") =>
        val v = o.get("version")
        if (!v.isIntegralNumber || !v.canConvertToInt || v.asInt() < 1)
          throw OsqueueExceptions.badOffset(json, s"unknown offset format version ${v.toString}")
        val version = v.asInt()
        if (version > Version) throw OsqueueExceptions.badOffset(json,
          s"offset format version $version was written by a newer osqueue; this one reads up to $Version")
        val next = o.get("nextSequence")
        if (!next.isIntegralNumber || !next.canConvertToLong || next.asLong() < 0)
          throw OsqueueExceptions.badOffset(json, "nextSequence is not a sequence")
        val writers = Option(o.get("writers")).map(_.properties().asScala.map { e =>
          val v = e.getValue
          if (!v.isArray || v.size != 2 || !v.get(0).canConvertToLong)
            throw OsqueueExceptions.badOffset(json, s"writer '${e.getKey}' is not [batchId, attemptId]")
          e.getKey -> (v.get(0).asLong(), v.get(1).asText)
        }.toMap).getOrElse(Map.empty)
        val incarnation = Option(o.get("incarnation")).map { i =>
          if (!i.isIntegralNumber || !i.canConvertToLong || i.asLong() < 0)
            throw OsqueueExceptions.badOffset(json, s"incarnation ${i.toString} is not an incarnation")
          i.asLong()
        }
        val entryIndex = Option(o.get("entryIndex")).map { i =>
          if (!i.isIntegralNumber || !i.canConvertToInt || i.asInt() < 0)
            throw OsqueueExceptions.badOffset(json, s"entryIndex ${i.toString} is not an entry index")
          i.asInt()
        }.getOrElse(0)
        val subscription = Option(o.get("subscription")).map { s =>
          if (!s.isTextual || !osqueue.format.HeadSections.validName(s.asText))
            throw OsqueueExceptions.badOffset(json, s"subscription ${s.toString} is not a subscription name")
          s.asText
        }
        val subscriptionIncarnation = Option(o.get("subscriptionIncarnation")).map { i =>
          if (!i.isIntegralNumber || !i.canConvertToLong || i.asLong() < 0)
            throw OsqueueExceptions.badOffset(json, s"subscriptionIncarnation ${i.toString} is not an incarnation")
          i.asLong()
        }
        OsqueueSourceOffset(o.get("queue").asText, o.get("queueId").asText, next.asLong(), EntryTag.Delivered(writers),
          incarnation, entryIndex, subscription, subscriptionIncarnation)
      case _ => throw OsqueueExceptions.badOffset(json, "expected {version, queue, queueId, nextSequence}")
    }
  }
}
