package osqueue.spark

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.apache.spark.sql.catalyst.InternalRow
import org.scalatest.funsuite.AnyFunSuite

import osqueue.CorruptBatchException
import osqueue.consumer.BatchDescriptor
import osqueue.format.{BatchCodec, BatchIntegrity, Compression, EntryIntegrity, MetadataItem}
import osqueue.store.{InMemoryStore, ObjectStore}

/**
 * The columnar reader hands out what the row reader does: every column of every row, in order, over
 * partitions of several batch files (compressed or not, with and without metadata ranges, a first
 * batch partly read by a real-time batch), the same error at the same row for a corrupt or missing
 * batch file, and the same skips and task metrics under failOnDataLoss=false. No Spark session.
 */
class OsqueueColumnarReaderSuite extends AnyFunSuite {
  import OsqueueColumnarReaderSuite.Read

  private val location = QueueLocation("memory://columnar-suite", "ingest/manifest", "ingest", Map.empty)
  private val AllFields = OsqueueSchema.schema.indices.toArray

  private def key(i: Int) = f"ingest/batch-$i%05d.batch"

  /**
   * `n` batch files with 0 to 40 records of 0 to 300 bytes each (batch `i`'s sizes fixed by `i`),
   * every third zstd-compressed, metadata ranges starting past the first record on some, and the
   * partition listing them with their integrity records.
   */
  private def queue(store: ObjectStore, n: Int, skipEntries: Int = 0): OsqueueInputPartition = {
    val rnd = new scala.util.Random(29)
    val descriptors = (0 until n).map { i =>
      val count = if (i == 4) 0 else rnd.nextInt(41)
      val records = Seq.fill(count)(Array.fill(rnd.nextInt(301))(rnd.nextInt(256).toByte))
      val bytes = BatchCodec.encode(records, if (i % 3 == 0) Compression.Zstd else Compression.None)
      store.put(key(i), bytes)
      val metadata = i % 4 match {
        case 0 => IndexedSeq.empty
        case 1 => IndexedSeq(MetadataItem(0, 1700000000000L + i, s"meta-$i".getBytes("UTF-8")))
        case 2 =>
          IndexedSeq(MetadataItem(2, 1700000001000L + i, Array[Byte](1, 2, 3)), MetadataItem(5, 1700000002000L, Array.emptyByteArray))
        case _ => IndexedSeq(MetadataItem(1, 1700000003000L + i, s"m$i".getBytes("UTF-8")), MetadataItem(3, 1700000004000L, Array[Byte](9)),
            MetadataItem(7, 1700000005000L, Array[Byte](7, 7)))
      }
      BatchDescriptor(100L + i, key(i), metadata, Some(EntryIntegrity(bytes.length.toLong, BatchIntegrity.crc32(bytes), 0L)))
    }
    OsqueueInputPartition(location, descriptors, failOnDataLoss = true, skipEntries = skipEntries)
  }

  /** A row's columns (`fields`, in order) as comparable values: arrays as lists, null as None. */
  private def columns(row: InternalRow, fields: Array[Int]): Seq[Any] = fields.indices.map { i =>
    if (row.isNullAt(i)) None
    else fields(i) match {
      case 0 | 5 => row.getBinary(i).toList
      case 1 | 4 => row.getLong(i)
      case 2 => row.getInt(i)
      case _ => row.getUTF8String(i).toString
    }
  }

  /** Every metric but the fetch time, which is wall time. */
  private def metricsOf(r: OsqueueBatchFilesReader[_]) =
    r.currentMetricsValues().map(m => m.name -> m.value).toMap - OsqueueTaskMetrics.FetchTimeMs

  private def readRows(p: OsqueueReadPartition, store: ObjectStore, fields: Array[Int]): Read = {
    val r = new OsqueuePartitionReader(p, fields, None, openStore = _ => store)
    val rows = mutable.ArrayBuffer.empty[Seq[Any]]
    try {
      while (r.next()) rows += columns(r.get(), fields)
      Read(rows.toSeq, None, metricsOf(r), 0)
    } catch { case e: Exception => Read(rows.toSeq, Some(e), metricsOf(r), 0) }
    finally r.close()
  }

  private def readColumnar(p: OsqueueReadPartition, store: ObjectStore, fields: Array[Int]): Read = {
    val r = new OsqueueColumnarReader(p, fields, None, openStore = _ => store)
    val rows = mutable.ArrayBuffer.empty[Seq[Any]]
    var batches = 0
    try {
      while (r.next()) {
        val batch = r.get()
        assert(batch.numRows > 0 && batch.numCols == fields.length)
        batches += 1
        rows ++= batch.rowIterator().asScala.map(columns(_, fields))
      }
      Read(rows.toSeq, None, metricsOf(r), batches)
    } catch { case e: Exception => Read(rows.toSeq, Some(e), metricsOf(r), batches) }
    finally r.close()
  }

  private def assertSame(rows: Read, columnar: Read): Unit = {
    assert(columnar.rows.size == rows.rows.size)
    columnar.rows.zip(rows.rows).zipWithIndex.foreach { case ((c, r), i) => assert(c == r, s"row $i") }
    assert(columnar.error.map(e => (e.getClass, e.getMessage)) == rows.error.map(e => (e.getClass, e.getMessage)))
    assert(columnar.metrics == rows.metrics)
  }

  test("should hand out every column of every row as the row reader does, over many batch files") {
    val store = InMemoryStore.fresh()
    val p = queue(store, 24)
    val rows = readRows(p, store, AllFields)
    val columnar = readColumnar(p, store, AllFields)
    assert(rows.error.isEmpty && rows.rows.size > 300)
    assertSame(rows, columnar)
    // One ColumnarBatch per batch file with records (batch 4 has none).
    assert(columnar.batches == p.descriptors.count(d => BatchCodec.decode(store.get(d.location).get.bytes, d.location).nonEmpty))
    // The metadata columns: set where a range covers the record, null before the first range.
    assert(rows.rows.exists(_(4) == None) && rows.rows.exists(_(4) != None))
    // Pruned and reordered columns, and a first batch partly read (a real-time batch ended inside it).
    for (fields <- Seq(Array(0), Array(5, 0, 3), Array(2, 4, 1)); skip <- Seq(0, 3, 1000)) {
      val skipped = p.copy(skipEntries = skip)
      assertSame(readRows(skipped, store, fields), readColumnar(skipped, store, fields))
    }
  }

  test("should fail a corrupt or missing batch file at the same row as the row reader, with the same error") {
    val store = InMemoryStore.fresh()
    val p = queue(store, 12)
    val damaged = store.get(key(7)).get.bytes.clone()
    damaged(0) = (damaged(0) ^ 0x40).toByte // the CRC-32 tells first
    store.put(key(7), damaged)
    val rows = readRows(p, store, AllFields)
    val columnar = readColumnar(p, store, AllFields)
    assert(rows.error.exists { case e: CorruptBatchException => e.integrityMismatch && e.key == key(7); case _ => false })
    assertSame(rows, columnar)
    // A block that does not decode (no integrity record to catch it first).
    val undecodable = p.copy(descriptors = p.descriptors.map(_.copy(integrity = None)))
    store.put(key(9), "bad".getBytes("UTF-8"))
    store.put(key(7), BatchCodec.encode(Seq(Array[Byte](1)), Compression.None))
    val (rows2, columnar2) = (readRows(undecodable, store, AllFields), readColumnar(undecodable, store, AllFields))
    assert(rows2.error.exists(e => e.isInstanceOf[CorruptBatchException] && e.getMessage.contains(s"'${key(9)}'")))
    assertSame(rows2, columnar2)
    // A missing one is data loss.
    store.delete(key(9))
    val (rows3, columnar3) = (readRows(undecodable, store, Array(0)), readColumnar(undecodable, store, Array(0)))
    assert(rows3.error.exists(_.getMessage.contains("OSQUEUE_DATA_LOSS")))
    assertSame(rows3, columnar3)
  }

  test("with failOnDataLoss=false should skip and count a corrupt and a missing batch file as the row reader does") {
    val store = InMemoryStore.fresh()
    val p = queue(store, 12).copy(failOnDataLoss = false)
    val damaged = store.get(key(2)).get.bytes.clone()
    damaged(0) = (damaged(0) ^ 0x40).toByte
    store.put(key(2), damaged)
    store.delete(key(10))
    val rows = readRows(p, store, AllFields)
    val columnar = readColumnar(p, store, AllFields)
    assert(rows.error.isEmpty)
    assert(rows.metrics(OsqueueTaskMetrics.CorruptBatches) == 1 && rows.metrics(OsqueueTaskMetrics.MissingBatches) == 1)
    assertSame(rows, columnar)
  }

  test("the factory should read micro-batch and batch partitions columnar") {
    val factory = OsqueueReaderFactory(Array(0))
    val p = OsqueueInputPartition(location, IndexedSeq.empty, failOnDataLoss = true)
    assert(factory.supportColumnarReads(p))
    assert(factory.createColumnarReader(p).isInstanceOf[OsqueueColumnarReader])
    assert(factory.createReader(p).isInstanceOf[OsqueuePartitionReader])
  }
}

object OsqueueColumnarReaderSuite {
  /** What a reader handed out: the rows, the error that ended them, its task metrics, its columnar batches. */
  final case class Read(rows: Seq[Seq[Any]], error: Option[Throwable], metrics: Map[String, Long], batches: Int)
}
