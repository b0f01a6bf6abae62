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

  /** Rows of one batch, in record order; each record gets the metadata range that covers it. */
  def rows(batch: ConsumedBatch): Iterator[InternalRow] = {
    val location = UTF8String.fromString(batch.location)
    val items = batch.metadata
    var item = -1
    batch.entries.iterator.zipWithIndex.map { case (value, index) =>
      while (item + 1 < items.size && items(item + 1).startIndex <= index) item += 1
      val meta = if (item >= 0) items(item) else null
      new GenericInternalRow(Array[Any](
        value, batch.sequence, index, location,
        if (meta == null) null else java.lang.Long.valueOf(meta.ingestionTimeMs * 1000L),
        if (meta == null) null else meta.payload))
    }
  }
}
