package osqueue.store.gcs

import java.nio.file.Files

import scala.concurrent.duration._
import scala.util.Using

import org.scalatest.BeforeAndAfterAll

import osqueue.{InvalidConfigException, StoreException}
import osqueue.store._
import osqueue.testing.GcsTestServer

/**
 * The store contract on Cloud Storage, against fake-gcs-server on loopback (tests/gcs/gcsserver.py),
 * plus opening gs:// URIs through the provider, the fs.gs.* options and failures.
 */
class GcsStoreSuite extends ObjectStoreContractSuite with BeforeAndAfterAll {
  private var server: GcsTestServer = _

  override def beforeAll(): Unit = server = GcsTestServer.start()
  override def afterAll(): Unit = if (server != null) server.close()

  override def casIncrementsPerThread: Int = 25

  /** Each store gets its own bucket, and a prefix so that key mapping is exercised too. */
  override def newStore(): ObjectStore = new GcsStore(server.freshBucket(), "some/prefix", server.storeConfig)

  test("should open gs://bucket/prefix through the provider with the fs.gs.* options, spark.hadoop.-prefixed too") {
    val bucket = server.freshBucket()
    val prefixed = server.options.map { case (k, v) => s"spark.hadoop.$k" -> v }
    for ((options, i) <- Seq(server.options, prefixed).zipWithIndex) {
      Using.resource(ObjectStores.open(s"gs://$bucket/queues/q$i", options)) { s =>
        assert(s.isInstanceOf[GcsStore] && s.uri === s"gs://$bucket/queues/q$i")
        val CasOutcome.Written(v1) = s.putIfAbsent("m", bytes("1")): @unchecked
        assert(s.putIfVersionMatches("m", bytes("2"), v1).isInstanceOf[CasOutcome.Written])
      }
      // Keys live under the prefix in the bucket.
      assert(server.admin.get(com.google.cloud.storage.BlobId.of(bucket, s"queues/q$i/m")) != null)
    }
  }

  test("should accept the emulator after probing it, and leave no probe object behind") {
    Using.resource(new GcsStore(server.freshBucket(), "q", server.storeConfig)) { s =>
      EndpointConditions.forget(s.endpoint)
      assert(s.conditions().refusal === None)
      assert(s.list("") === Seq.empty, "the probe deletes its scratch object")
    }
  }

  test("should say which bucket is missing, and not take a missing bucket for an empty queue on writes") {
    Using.resource(new GcsStore("osq-no-such-bucket", "q", server.storeConfig)) { s =>
      val e = intercept[StoreException](s.putIfAbsent("m", bytes("1")))
      assert(e.getMessage.contains("osq-no-such-bucket"), e.getMessage)
      intercept[StoreException](s.put("b", bytes("1")))
    }
  }

  test("should fail with a StoreException naming the server when nothing answers, within the timeouts") {
    val port = Using.resource(new java.net.ServerSocket(0))(_.getLocalPort)
    val config = GcsStoreConfig.fromOptions(server.options ++ Map(GcsStoreConfig.RootUrl -> s"http://127.0.0.1:$port",
      GcsStoreConfig.MaxRetry -> "1", GcsStoreConfig.ConnectTimeout -> "2s"))
    Using.resource(new GcsStore("b-unreachable", "q", config)) { s =>
      val started = System.nanoTime()
      val e = intercept[StoreException](s.get("m"))
      assert(e.getMessage.contains(s"127.0.0.1:$port") && e.getMessage.contains("GET"), e.getMessage)
      assert((System.nanoTime() - started).nanos < 60.seconds)
    }
  }

  test("should read the GCS connector's options and name the bad one") {
    val c = GcsStoreConfig.fromOptions(Map("spark.hadoop.fs.gs.project.id" -> "p1", "fs.gs.storage.root.url" -> "http://127.0.0.1:4443/",
        "fs.gs.auth.type" -> "unauthenticated", "fs.gs.http.read-timeout" -> "5000", "fs.gs.http.connect-timeout" -> "3s",
        "fs.gs.http.max.retry" -> "2"))
    assert(c.projectId === Some("p1") && c.rootUrl.map(_.toString) === Some("http://127.0.0.1:4443/"))
    assert(
      c.credentials === GcsCredentials.Unauthenticated && c.readTimeout === 5.seconds && c.connectTimeout === 3.seconds && c.maxAttempts === 3)
    assert(GcsStoreConfig.fromOptions(Map.empty).credentials === GcsCredentials.DefaultChain)
    val key = Files.createTempFile("osqueue-gcs-key-", ".json")
    assert(GcsStoreConfig.fromOptions(
      Map("fs.gs.auth.service.account.json.keyfile" -> key.toString)).credentials === GcsCredentials.JsonKeyFile(key.toString))
    val inline = GcsStoreConfig.fromOptions(Map("fs.gs.auth.service.account.email" -> "sa@p.iam.gserviceaccount.com",
        "fs.gs.auth.service.account.private.key" -> "-----BEGIN PRIVATE KEY-----\\nabc"))
    assert(!inline.credentials.toString.contains("abc"), "the private key is never shown")
    for ((options, option) <- Seq(
        Map("fs.gs.auth.type" -> "USER_CREDENTIALS") -> "fs.gs.auth.type",
        Map("fs.gs.auth.type" -> "SERVICE_ACCOUNT_JSON_KEYFILE") -> "fs.gs.auth.service.account.json.keyfile",
        Map("fs.gs.auth.service.account.json.keyfile" -> "/no/such/key.json") -> "fs.gs.auth.service.account.json.keyfile",
        Map("fs.gs.auth.service.account.email" -> "sa@p") -> "fs.gs.auth.service.account.private.key",
        Map("fs.gs.auth.access.token.provider.impl" -> "com.example.Tokens") -> "fs.gs.auth.access.token.provider.impl",
        Map("fs.gs.storage.root.url" -> "ftp://x") -> "fs.gs.storage.root.url",
        Map("fs.gs.storage.service.path" -> "storage/v2/") -> "fs.gs.storage.service.path",
        Map("fs.gs.http.max.retry" -> "-1") -> "fs.gs.http.max.retry",
        Map("fs.gs.http.read-timeout" -> "soon") -> "fs.gs.http.read-timeout")) {
      val e = intercept[InvalidConfigException](GcsStoreConfig.fromOptions(options))
      assert(e.option === option, e.getMessage)
    }
  }

  test("should reject a gs:// URI without a valid bucket name, naming the path") {
    for (uri <- Seq("gs://", "gs:///q", "gs://UPPER/q", "gs://a/q", "gs://bad bucket/q")) {
      val e = intercept[InvalidConfigException](ObjectStores.open(uri, server.options))
      assert(e.option === "path", e.getMessage)
    }
  }
}
