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

  // The version check comes first here too: Spark infers the schema before it asks for the table,
  // and building the schema is where a jar of another Scala would otherwise fail (NoSuchMethodError).
  override def inferSchema(options: CaseInsensitiveStringMap): StructType = {
    SparkVersionCheck.ensureSupported()
    OsqueueSchema.schema
  }

  // True so that the table sees a user schema and can refuse it with our own message.
  override def supportsExternalMetadata(): Boolean = true

  override def getTable(schema: StructType, partitioning: Array[Transform], properties: util.Map[String, String]): Table = {
    SparkVersionCheck.ensureSupported()
    val options = OsqueueOptions.normalize(properties.asScala)
    OsqueueOptions.validateGeneral(options)
    new OsqueueTable(options, Option(schema))
  }
}
