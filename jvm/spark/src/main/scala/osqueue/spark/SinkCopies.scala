package osqueue.spark

import osqueue.format.{EntryTag, ManifestEntry}

/** Picks the entries of [from, to) an osqueue reader delivers: one copy of each sink batch. */
private[spark] object SinkCopies {
  def select(entries: IndexedSeq[ManifestEntry], from: Long, to: Long,
      delivered: EntryTag.Delivered): (IndexedSeq[ManifestEntry], EntryTag.Delivered) = {
    var state = delivered
    val admitted = entries.filter(e => e.sequence >= from && e.sequence < to).filter { e =>
      val (admit, next) = state.admit(EntryTag.decode(e.extension))
      state = next
      admit
    }
    (admitted, state)
  }
}
