package osqueue.spark

import org.scalatest.funsuite.AnyFunSuite

import osqueue.InvalidConfigException
import osqueue.store.ObjectStores

/** Store settings reach the store: fs.s3a.* and fs.gs.*, from the read/write options and the session. */
class OsqueueStoreOptionsSuite extends AnyFunSuite {
  test("should pass fs.gs.* options (spark.hadoop.-prefixed too) to the store, over the session's") {
    val options = OsqueueOptions.normalize(Map("path" -> "gs://bucket/q", "fs.gs.project.id" -> "p-read",
        "spark.hadoop.fs.gs.auth.type" -> "UNAUTHENTICATED", "fs.s3a.endpoint" -> "http://127.0.0.1:9"))
    val session = Map("fs.gs.project.id" -> "p-session", "fs.gs.storage.root.url" -> "http://127.0.0.1:4443")
    val location = OsqueueOptions.location(options, session)
    assert(location.storeOptions === Map("fs.gs.project.id" -> "p-read", "fs.gs.auth.type" -> "UNAUTHENTICATED",
      "fs.gs.storage.root.url" -> "http://127.0.0.1:4443", "fs.s3a.endpoint" -> "http://127.0.0.1:9"))
    OsqueueOptions.checkKnown(options, "source") // store settings are known options
    intercept[IllegalArgumentException](OsqueueOptions.checkKnown(options + ("fs.gx.typo" -> "1"), "source"))
  }

  test("should accept a gs:// path, and opening it without the osqueue-gcs artifact names the artifact") {
    OsqueueOptions.validateGeneral(Map("path" -> "gs://bucket/q"))
    val e = intercept[InvalidConfigException](ObjectStores.open("gs://bucket/q", Map.empty))
    assert(e.getMessage.contains("osqueue-gcs"), e.getMessage)
    intercept[IllegalArgumentException](OsqueueOptions.validateGeneral(Map("path" -> "ftp://host/q")))
  }
}
