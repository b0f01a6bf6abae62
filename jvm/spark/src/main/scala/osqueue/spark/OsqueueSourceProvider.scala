package osqueue.spark

import java.util

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.connector.catalog.{Table, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.sources.DataSourceRegister
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * `format("osqueue")`: the entry point Spark finds through `META-INF/services`. The read schema
 * is fixed; a user-supplied one is refused with a message saying so.
 */
class OsqueueSourceProvider extends TableProvider with DataSourceRegister {
  override def shortName(): String = "osqueue"

  override def inferSchema(options: CaseInsensitiveStringMap): StructType = OsqueueSchema.schema

  // True so that the table sees a user schema and can refuse it with our own message.
  override def supportsExternalMetadata(): Boolean = true

  override def getTable(schema: StructType, partitioning: Array[Transform], properties: util.Map[String, String]): Table = {
    SparkVersionCheck.ensureSupported()
    val options = OsqueueOptions.normalize(properties.asScala)
    OsqueueOptions.validateGeneral(options)
    new OsqueueTable(options, Option(schema))
  }
}
