package osqueue.format

import org.scalatest.funsuite.AnyFunSuite

/** The sink's reader rule and its one fold over a read (`Delivered.admitAll`, Python: `admit_all`). */
class EntryTagSuite extends AnyFunSuite {
  private def tagged(sequence: Long, tag: Option[EntryTag]) =
    ManifestEntry(sequence, s"ingest/$sequence.batch", IndexedSeq.empty, tag.fold(Array.emptyByteArray)(_.encode))

  test("admitAll should fold the reader rule over entries in order") {
    val tags = Seq(Some(EntryTag("w1", 0, "a1")), None, Some(EntryTag("w1", 0, "a2")), Some(EntryTag("w1", 1, "a3")))
    val admissions = EntryTag.Delivered.Empty.admitAll(tags.zipWithIndex.iterator.map { case (t, i) => tagged(i, t) })
      .toIndexedSeq
    assert(admissions.map(a => (a.entry.sequence, a.admitted)) == Seq((0L, true), (1L, true), (2L, false), (3L, true)))
    assert(admissions(2).after.writers == Map("w1" -> (0L, "a1")), "a skipped copy leaves the state as it was")
    assert(admissions.last.after.writers == Map("w1" -> (1L, "a3")))
    // From a state carried over (a partition planned after the first copy): the replay is skipped.
    val resumed = EntryTag.Delivered(Map("w1" -> (0L, "a1"))).admitAll(Iterator(tagged(2, tags(2))))
    assert(resumed.map(_.admitted).toSeq == Seq(false))
  }

  test("admitAll should read one entry per admission") {
    var pulled = 0
    val entries = Iterator.from(0).take(3).map { i => pulled += 1; tagged(i.toLong, None) }
    val admissions = EntryTag.Delivered.Empty.admitAll(entries)
    assert(admissions.next().entry.sequence == 0 && pulled == 1, "lazy: a consumer stopping early reads no further")
  }
}
