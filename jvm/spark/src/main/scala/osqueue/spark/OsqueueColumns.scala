package osqueue.spark

import org.apache.spark.sql.types.Decimal
import org.apache.spark.sql.vectorized.{ColumnarArray, ColumnarBatch, ColumnarMap, ColumnVector}
import org.apache.spark.unsafe.types.UTF8String

import osqueue.consumer.ConsumedBatch
import osqueue.format.MetadataItem

/**
 * One batch file's rows as a `ColumnarBatch`: the same columns and values as [[OsqueueSchema.rows]],
 * read in place. `value` is each record read out of the decoded block when Spark asks for it (one
 * copy, as the row path makes); `sequence` and `location` are one value for the whole batch, `index`
 * the row's position, and `ingestionTime` and `metadata` come from the metadata range covering the
 * record. Row `r` of the batch is record `skip + r` of the batch file (entries a real-time batch read
 * already are left out).
 */
private[spark] object OsqueueColumns {
  def batch(b: ConsumedBatch, fields: Array[Int], skip: Int): ColumnarBatch = {
    val rows = b.entries.length - skip
    lazy val meta = metadataOf(b, skip, rows) // found on first use: a query that reads neither column pays nothing
    val columns: Array[ColumnVector] = fields.map {
      case 0 => new ValueColumn(b, skip)
      case 1 => new SequenceColumn(b.sequence)
      case 2 => new IndexColumn(skip)
      case 3 => new LocationColumn(UTF8String.fromString(b.location))
      case 4 => new IngestionTimeColumn(() => meta)
      case _ => new MetadataColumn(() => meta)
    }
    new ColumnarBatch(columns, rows)
  }

  /** The metadata item covering each row (null where none does), found as [[OsqueueSchema.rows]] finds it. */
  private def metadataOf(b: ConsumedBatch, skip: Int, rows: Int): Array[MetadataItem] = {
    val items = b.metadata
    val out = new Array[MetadataItem](rows)
    var item = -1
    var index = 0
    while (index < skip + rows) {
      while (item + 1 < items.size && items(item + 1).startIndex <= index) item += 1
      if (index >= skip && item >= 0) out(index - skip) = items(item)
      index += 1
    }
    out
  }

  /** What every column here shares: read-only, and no child columns, arrays, maps or decimals. */
  private abstract class ReadOnlyColumn(field: Int) extends ColumnVector(OsqueueSchema.schema(field).dataType) {
    private def unsupported(what: String) =
      OsqueueExceptions.internalError(s"column '${OsqueueSchema.schema(field).name}' has no $what values")
    override def close(): Unit = ()
    override def hasNull: Boolean = false
    override def numNulls: Int = 0
    override def isNullAt(rowId: Int): Boolean = false
    override def getBoolean(rowId: Int): Boolean = throw unsupported("boolean")
    override def getByte(rowId: Int): Byte = throw unsupported("byte")
    override def getShort(rowId: Int): Short = throw unsupported("short")
    override def getInt(rowId: Int): Int = throw unsupported("int")
    override def getLong(rowId: Int): Long = throw unsupported("long")
    override def getFloat(rowId: Int): Float = throw unsupported("float")
    override def getDouble(rowId: Int): Double = throw unsupported("double")
    override def getArray(rowId: Int): ColumnarArray = throw unsupported("array")
    override def getMap(ordinal: Int): ColumnarMap = throw unsupported("map")
    override def getDecimal(rowId: Int, precision: Int, scale: Int): Decimal = throw unsupported("decimal")
    override def getUTF8String(rowId: Int): UTF8String = throw unsupported("string")
    override def getBinary(rowId: Int): Array[Byte] = throw unsupported("binary")
    override def getChild(ordinal: Int): ColumnVector = throw unsupported("child")
  }

  /** `value`: record `skip + rowId`, copied out of the decoded block (a fresh array per call). */
  private final class ValueColumn(b: ConsumedBatch, skip: Int) extends ReadOnlyColumn(0) {
    private val entries = b.entries
    override def getBinary(rowId: Int): Array[Byte] = entries(skip + rowId)
  }

  private final class SequenceColumn(sequence: Long) extends ReadOnlyColumn(1) {
    override def getLong(rowId: Int): Long = sequence
  }

  private final class IndexColumn(skip: Int) extends ReadOnlyColumn(2) {
    override def getInt(rowId: Int): Int = skip + rowId
  }

  private final class LocationColumn(location: UTF8String) extends ReadOnlyColumn(3) {
    override def getUTF8String(rowId: Int): UTF8String = location
  }

  /** A column of the metadata range covering each row: null where none does. */
  private abstract class MetadataRangeColumn(field: Int, items: () => Array[MetadataItem]) extends ReadOnlyColumn(field) {
    private lazy val meta = items()
    private lazy val nulls = meta.count(_ == null)
    protected def at(rowId: Int): MetadataItem = meta(rowId)
    override def hasNull: Boolean = nulls > 0
    override def numNulls: Int = nulls
    override def isNullAt(rowId: Int): Boolean = meta(rowId) == null
  }

  /** `ingestionTime`: a timestamp in microseconds. */
  private final class IngestionTimeColumn(meta: () => Array[MetadataItem]) extends MetadataRangeColumn(4, meta) {
    override def getLong(rowId: Int): Long = at(rowId).ingestionTimeMs * 1000L
  }

  private final class MetadataColumn(meta: () => Array[MetadataItem]) extends MetadataRangeColumn(5, meta) {
    override def getBinary(rowId: Int): Array[Byte] = { val m = at(rowId); if (m == null) null else m.payload }
  }
}
