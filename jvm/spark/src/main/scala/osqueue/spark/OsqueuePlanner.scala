package osqueue.spark

import java.util.concurrent.{CompletableFuture, CompletionException, Executors}

import org.apache.spark.sql.connector.read.InputPartition

import osqueue.consumer.BatchDescriptor
import osqueue.format.{BatchIntegrity, EntryTag, ManifestEntry, ManifestHead, SegmentRef}
import osqueue.queue.SegmentTree

/**
 * Plans the read of sequences [from, to) of a queue with the driver's memory bounded by the head
 * and a few segments, at any depth (docs/adr/0004, "The Spark source"). Entries of a segment
 * become slices of at most [[OsqueuePlanner.SliceEntries]] sequences and [[OsqueuePlanner.SliceBytes]]
 * bytes ([[OsqueueSlicePartition]]),
 * each carrying the segment's ref and the sink-copy state at its start, and the executor reads the
 * segment and its batch files; the admitted entries of the head's tail (or of a v1 manifest) are
 * listed in partitions of at most as many batch files ([[OsqueueInputPartition]]): one Spark task
 * per batch file cost more than reading it. The driver walks the segments in order (a few GETs in flight) for the sink-copy
 * state at each slice and at the end, and keeps nothing of them.
 */
private[spark] object OsqueuePlanner {
  /** Sequences per partition: a task fetches this many batch files at most. */
  val SliceEntries = 128
  /**
   * Batch-file bytes per partition at most, counted from the entries' integrity records (an entry
   * without one counts 0; a batch file larger than this is a partition of its own): a large
   * backlog of big batch files is spread over several tasks, so every core reads, as Spark's file
   * source splits its files (`spark.sql.files.maxPartitionBytes`). A micro-batch of a few small
   * batch files stays one task.
   */
  val SliceBytes: Long = 32L << 20

  /** The bytes of an entry's batch file by its integrity record, 0 without one. */
  private def entryBytes(e: ManifestEntry): Long = BatchIntegrity.of(e.extension).fold(0L)(_.byteLength)

  /**
   * `entries` in order, cut into runs of at most [[SliceEntries]] entries and [[SliceBytes]] bytes
   * (`bytes` of each); an entry larger than [[SliceBytes]] is a run of its own.
   */
  def runs[A](entries: IndexedSeq[A], bytes: A => Long): Iterator[IndexedSeq[A]] = {
    // Each run's end, from the previous one's: an entry always fits in an empty run.
    def end(start: Int): Int = {
      var at = start + 1
      var total = bytes(entries(start))
      while (at < entries.size && at - start < SliceEntries && total + bytes(entries(at)) <= SliceBytes) {
        total += bytes(entries(at))
        at += 1
      }
      at
    }
    Iterator.iterate(0)(end).takeWhile(_ < entries.size).map(start => entries.slice(start, end(start)))
  }

  /** Segments read ahead of the one walked (GETs in flight; also the most segments held at once). */
  val SegmentReadAhead = 4

  /** The partitions of [from, to), the sink-copy state after `to`, and the second copies left out. */
  final case class Plan(partitions: Array[InputPartition], delivered: EntryTag.Delivered, copiesSkipped: Long)

  /**
   * `skip` entries of the batch at sequence `from` were read already (a real-time batch ended
   * inside it). `tree` finds the segments covering the range (reading index objects as it reaches
   * them); `readSegment` reads and checks one segment. With `reread` (a reader that does not own the
   * queue: `spark.read`), a segment or index object found missing is judged by
   * [[SegmentTree.afterMissing]] (a dequeue and GC raced the plan: it goes on from the head read
   * again) instead of failing as corrupt.
   */
  def plan(head: ManifestHead, tree: SegmentTree, readSegment: SegmentRef => IndexedSeq[ManifestEntry],
      location: QueueLocation,
      from: Long, to: Long, delivered: EntryTag.Delivered, failOnDataLoss: Boolean, skip: Int = 0,
      reread: Option[Long => Option[ManifestHead]] = None): Plan = {
    val hi = math.min(to, head.nextSequence)
    val parts = Array.newBuilder[InputPartition]
    var state = delivered
    var skipped = 0L
    def skipAt(seq: Long) = if (seq == from) skip else 0
    var current = head
    var position = math.max(from, head.firstSequence) // the next sequence not yet planned
    var walking = position < hi
    while (walking) {
      val leaves = if (reread.isDefined) tree.leavesOrGone(current, position, hi) else tree.leaves(current, position, hi)
      val read: SegmentRef => IndexedSeq[ManifestEntry] = if (reread.isDefined) tree.readSegmentOrGone else readSegment
      try {
        readInOrder(leaves, read).foreach { case (ref, entries) =>
          val inRange = entries.filter(e => e.sequence >= position && e.sequence < hi)
          runs(inRange, entryBytes).foreach { slice =>
            val start = state
            val admissions = start.admitAll(slice.iterator).toIndexedSeq
            state = admissions.last.after
            val admitted = admissions.count(_.admitted)
            skipped += slice.size - admitted
            if (admitted > 0)
              parts += OsqueueSlicePartition(location, ref, slice.head.sequence, slice.last.sequence + 1, start,
                failOnDataLoss, skipAt(slice.head.sequence))
          }
          position = math.max(position, ref.lastSequence + 1)
        }
        if (current.tailFirstSequence < hi) {
          val tail = state.admitAll(current.tailEntries.iterator.filter(e => e.sequence >= position && e.sequence < hi))
            .toIndexedSeq
          state = tail.lastOption.fold(state)(_.after)
          val admitted = tail.filter(_.admitted).map(_.entry)
          skipped += tail.size - admitted.size
          runs(admitted, entryBytes).foreach { group =>
            parts += OsqueueInputPartition(location, group.map(BatchDescriptor.of(_, location.manifestPath)), failOnDataLoss,
              skipAt(group.head.sequence))
          }
        }
        walking = false
      } catch {
        case gone: SegmentTree.Gone =>
          tree.afterMissing(current, gone.ref, position, reread.get) match {
            case Some(again) =>
              current = again
              position = math.max(position, again.firstSequence)
              walking = position < hi
            case None => walking = false
          }
      }
    }
    Plan(parts.result(), state, skipped)
  }

  /**
   * The entries of the queue from `from` on, in order: the segments read one by one as the
   * iterator reaches them (none is held once passed), then the tail; a segment or index object found
   * missing is judged by [[SegmentTree.afterMissing]] with `reread` (see [[SegmentTree.entriesFollowing]]).
   */
  def entriesFrom(head: ManifestHead, from: Long, tree: SegmentTree, reread: Long => Option[ManifestHead])
      : Iterator[ManifestEntry] = tree.entriesFollowing(head, from, reread)

  /** The segments with their entries, in order, with up to [[SegmentReadAhead]] GETs in flight. */
  private def readInOrder(refs: Iterator[SegmentRef], readSegment: SegmentRef => IndexedSeq[ManifestEntry])
      : Iterator[(SegmentRef, IndexedSeq[ManifestEntry])] = {
    val inFlight = scala.collection.mutable.Queue.empty[(SegmentRef, CompletableFuture[IndexedSeq[ManifestEntry]])]
    val pending = refs
    def fill(): Unit = while (inFlight.size < SegmentReadAhead && pending.hasNext) {
      val r = pending.next()
      inFlight.enqueue((r, CompletableFuture.supplyAsync(() => readSegment(r), readers)))
    }
    new Iterator[(SegmentRef, IndexedSeq[ManifestEntry])] {
      override def hasNext: Boolean = { fill(); inFlight.nonEmpty }
      override def next(): (SegmentRef, IndexedSeq[ManifestEntry]) = {
        fill()
        val (r, f) = inFlight.dequeue()
        fill()
        try Tuple2(r, f.join())
        catch { case e: CompletionException if e.getCause != null => throw e.getCause }
      }
    }
  }

  private lazy val readers = Executors.newFixedThreadPool(SegmentReadAhead,
    { (r: Runnable) =>
      val t = new Thread(r, "osqueue-spark-segment-reader"); t.setDaemon(true); t
    })
}
