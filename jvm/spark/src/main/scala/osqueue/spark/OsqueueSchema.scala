package osqueue.spark

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

import osqueue.consumer.ConsumedBatch

/** The source's fixed row schema and the conversion of a batch's records into rows. */
private[spark] object OsqueueSchema {
  val schema: StructType = StructType(Seq(
      StructField("value", BinaryType, nullable = false),
      StructField("sequence", LongType, nullable = false),
      StructField("index", IntegerType, nullable = false),
      StructField("location", StringType, nullable = false),
      StructField("ingestionTime", TimestampType, nullable = true),
      StructField("metadata", BinaryType, nullable = true)))

  /** The schema's fields, by name, in the order `required` lists them (column pruning). */
  def fieldIndexes(required: StructType): Array[Int] = required.fieldNames.map(schema.fieldIndex)

  /**
   * Rows of one batch, in record order, with the columns `fields` (indexes into [[schema]]); each
   * record gets the metadata range that covers it. One row object is reused, as Spark allows.
   */
  def rows(batch: ConsumedBatch, fields: Array[Int]): Iterator[InternalRow] = {
    val location = UTF8String.fromString(batch.location)
    val sequence: Any = batch.sequence // boxed once per batch, not per row
    val items = batch.metadata
    var item = -1
    val values = new Array[Any](fields.length)
    val row = new GenericInternalRow(values)
    var index = -1
    batch.entries.iterator.map { value =>
      index += 1
      while (item + 1 < items.size && items(item + 1).startIndex <= index) item += 1
      val meta = if (item >= 0) items(item) else null
      var i = 0
      while (i < fields.length) {
        values(i) = fields(i) match {
          case 0 => value
          case 1 => sequence
          case 2 => index
          case 3 => location
          case 4 => if (meta == null) null else java.lang.Long.valueOf(meta.ingestionTimeMs * 1000L)
          case _ => if (meta == null) null else meta.payload
        }
        i += 1
      }
      row
    }
  }
}
