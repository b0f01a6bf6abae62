package osqueue.spark

import org.scalatest.funsuite.AnyFunSuite

import osqueue.format.EntryTag

/** Offsets as Spark's checkpoint stores them: what round-trips, and what is refused with a clear error. */
class OsqueueSourceOffsetSuite extends AnyFunSuite {
  private val offset = OsqueueSourceOffset("s3a://b/q/ingest/manifest", "id-1", 42,
    EntryTag.Delivered(Map("w1" -> (3L, "a"), "w0" -> (7L, "b"))))

  private def refused(json: String): String = {
    val e = intercept[IllegalStateException](OsqueueSourceOffset.parse(json))
    assert(e.getMessage.startsWith("[OSQUEUE_BAD_OFFSET] cannot read offset"), e.getMessage)
    e.getMessage
  }

  test("should round-trip an offset with its sink-copy state through JSON") {
    assert(OsqueueSourceOffset.parse(offset.json) == offset)
    assert(OsqueueSourceOffset.parse(offset.copy(delivered = EntryTag.Delivered.Empty).json).delivered.writers.isEmpty)
  }

  test("should round-trip the manifest incarnation, and read an offset written before incarnations as None") {
    val withIncarnation = offset.copy(incarnation = Some(1234567L))
    assert(withIncarnation.json.contains("\"incarnation\":1234567"))
    assert(OsqueueSourceOffset.parse(withIncarnation.json) == withIncarnation)
    assert(OsqueueSourceOffset.parse(offset.json).incarnation.isEmpty)
    assert(refused(withIncarnation.json.replace("1234567", "\"x\"")).contains("incarnation \"x\" is not an incarnation"))
  }

  test("should round-trip the subscription and its incarnation, and read an offset without them as the unnamed reader's") {
    val sub = offset.copy(subscription = Some("orders-v2.eu_west"), subscriptionIncarnation = Some(77L))
    assert(sub.json.contains("\"subscription\":\"orders-v2.eu_west\"") && sub.json.contains("\"subscriptionIncarnation\":77"))
    assert(OsqueueSourceOffset.parse(sub.json) == sub)
    assert(OsqueueSourceOffset.parse(offset.json).subscription.isEmpty && !offset.json.contains("subscription"))
    assert(refused(sub.json.replace("orders-v2.eu_west", "a/b")).contains("is not a subscription name"))
  }

  test("should refuse an offset written by a newer format version, naming both versions") {
    val msg = refused(offset.json.replace("\"version\":1", "\"version\":3"))
    assert(msg.contains("version 3 was written by a newer osqueue") && msg.contains("reads up to 2"), msg)
  }

  test("should write a position inside a batch file (real-time mode) as version 2, and every other one as version 1") {
    val inside = offset.copy(entryIndex = 5)
    assert(inside.json.contains("\"version\":2") && inside.json.contains("\"entryIndex\":5"), inside.json)
    assert(OsqueueSourceOffset.parse(inside.json) == inside)
    assert(offset.json.contains("\"version\":1") && !offset.json.contains("entryIndex"), offset.json)
    assert(OsqueueSourceOffset.parse(offset.json).entryIndex == 0)
    assert(refused(inside.json.replace("\"entryIndex\":5", "\"entryIndex\":-1")).contains("entryIndex -1 is not an entry index"))
  }

  test("should refuse an unknown or malformed format version, echoing it") {
    assert(refused(offset.json.replace("\"version\":1", "\"version\":0")).contains("unknown offset format version 0"))
    assert(refused(offset.json.replace("\"version\":1", "\"version\":\"one\"")).contains("unknown offset format version \"one\""))
    assert(refused(offset.json.replace("\"version\":1", "\"version\":1.5")).contains("unknown offset format version 1.5"))
  }

  test("should refuse garbled JSON, quoting what it read") {
    val garbled = offset.json.take(offset.json.length / 2)
    val msg = refused(garbled)
    assert(msg.contains("not JSON") && msg.contains(garbled), msg)
  }

  test("should refuse JSON that is not an osqueue offset, naming the expected fields") {
    assert(refused("""{"topic":{"0":5}}""").contains("expected {version, queue, queueId, nextSequence}"))
    assert(refused("[1,2]").contains("expected {version, queue, queueId, nextSequence}"))
  }

  test("should refuse a negative or non-integer sequence and a malformed writer entry") {
    assert(refused(offset.json.replace("\"nextSequence\":42", "\"nextSequence\":-1")).contains("nextSequence is not a sequence"))
    assert(refused(offset.json.replace("\"nextSequence\":42", "\"nextSequence\":\"42\"")).contains("nextSequence is not a sequence"))
    assert(refused(offset.json.replace("[3,\"a\"]", "[3]")).contains("writer 'w1' is not [batchId, attemptId]"))
  }
}
