package osqueue.spark

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.spark.sql.connector.read.streaming.Offset

/**
 * A position in a queue: `nextSequence` is the next manifest sequence to read (like Kafka's
 * next offset). The JSON also names the queue and its id, so a checkpoint pointed at another or
 * recreated queue is detected, and carries a format version so newer offsets are refused.
 */
private[spark] final case class OsqueueSourceOffset(queue: String, queueId: String, nextSequence: Long) extends Offset {
  override val json: String = {
    val node = OsqueueSourceOffset.mapper.createObjectNode()
    node.put("version", OsqueueSourceOffset.Version).put("queue", queue).put("queueId", queueId)
      .put("nextSequence", nextSequence)
    OsqueueSourceOffset.mapper.writeValueAsString(node)
  }
}

private[spark] object OsqueueSourceOffset {
  val Version = 1
  private val mapper = new ObjectMapper()

  def parse(json: String): OsqueueSourceOffset = {
    val node = try mapper.readTree(json) catch {
      case e: Exception => throw OsqueueExceptions.badOffset(json, s"not JSON (${e.getMessage})")
    }
    node match {
      case o: ObjectNode if o.has("version") && o.has("queue") && o.has("queueId") && o.has("nextSequence") =>
        val version = o.get("version").asInt(-1)
        if (version > Version) throw OsqueueExceptions.badOffset(json,
          s"offset format version $version was written by a newer osqueue; this one reads up to $Version")
        if (version < 1) throw OsqueueExceptions.badOffset(json, s"unknown offset format version $version")
        val next = o.get("nextSequence")
        if (!next.canConvertToLong || next.asLong() < 0) throw OsqueueExceptions.badOffset(json, "nextSequence is not a sequence")
        OsqueueSourceOffset(o.get("queue").asText, o.get("queueId").asText, next.asLong())
      case _ => throw OsqueueExceptions.badOffset(json, "expected {version, queue, queueId, nextSequence}")
    }
  }
}
