package osqueue.store.azure

import scala.util.Using

import org.scalatest.BeforeAndAfterAll

import osqueue.{ErrorKind, InvalidConfigException, StoreException}
import osqueue.store._

/** The store contract on azurite (a real Azure Blob server over HTTP), plus paths, options and errors. */
class AzureBlobStoreSuite extends ObjectStoreContractSuite with BeforeAndAfterAll {
  private var server: AzuriteTestServer = _

  override def beforeAll(): Unit = if (AzuriteTestServer.missingReason.isEmpty) server = AzuriteTestServer.start()
  override def afterAll(): Unit = if (server != null) server.close()

  override def withFixture(test: NoArgTest) = {
    AzuriteTestServer.missingReason.foreach(reason => cancel(reason))
    super.withFixture(test)
  }

  override def casIncrementsPerThread: Int = 25

  /** Each store gets its own container, and a prefix so that key mapping is exercised too. */
  override def newStore(): ObjectStore =
    ObjectStores.open(s"abfss://${server.freshContainer()}@${server.host}/some/prefix", server.options)

  test("should open every hadoop-azure URI form through the provider, with the same blobs behind abfss and wasbs") {
    val container = server.freshContainer()
    val account = server.account
    Using.resource(ObjectStores.open(s"abfss://$container@$account.dfs.core.windows.net/q", server.options)) { abfss =>
      abfss.put("k", bytes("v"))
      assert(abfss.uri === s"abfss://$container@$account.dfs.core.windows.net/q")
      for (scheme <- Seq("wasbs", "wasb", "abfs")) {
        val host = if (scheme.startsWith("wasb")) s"$account.blob.core.windows.net" else s"$account.dfs.core.windows.net"
        // The account key is read for the account's other host too (hadoop-azure users set one of them).
        Using.resource(ObjectStores.open(s"$scheme://$container@$host/q", server.options)) { other =>
          assert(text(other.get("k")) === Some("v"), scheme)
        }
      }
    }
  }

  test("should learn that azurite honours conditional writes and delete the probe's scratch object") {
    Using.resource(newStore().asInstanceOf[AzureBlobStore]) { s =>
      EndpointConditions.forget(s.endpoint)
      assert(s.conditions().refusal === None)
      assert(s.list("") === Seq.empty)
      val CasOutcome.Written(v1) = s.putIfAbsent("m", bytes("1")): @unchecked
      assert(s.putIfVersionMatches("m", bytes("2"), v1).isInstanceOf[CasOutcome.Written])
      assert(s.putIfVersionMatches("m", bytes("3"), v1) === CasOutcome.PreconditionFailed)
      assert(s.putIfVersionMatches("gone", bytes("3"), v1) === CasOutcome.PreconditionFailed)
    }
  }

  test("should name the container when it does not exist, not report a missing object") {
    Using.resource(ObjectStores.open(s"abfss://no-such-container@${server.host}/q", server.options)) { s =>
      val e = intercept[StoreException](s.get("k"))
      assert(e.kind === ErrorKind.Transient)
      assert(e.getMessage.contains("'no-such-container' does not exist") && e.getMessage.contains(server.endpoint), e.getMessage)
    }
  }

  test("should refuse a wrong account key with the store's error naming the key to set") {
    val wrong = server.options + (s"${AzureStoreConfig.AccountKey}.${server.host}" -> java.util.Base64.getEncoder.encodeToString(
      Array.fill(64)(1.toByte)))
    Using.resource(ObjectStores.open(s"abfss://${server.freshContainer()}@${server.host}/q", wrong)) { s =>
      val e = intercept[StoreException](s.list(""))
      assert(e.getMessage.contains("403") && e.getMessage.contains(s"fs.azure.account.key.${server.host}"), e.getMessage)
      assert(!e.getMessage.contains(wrong(s"${AzureStoreConfig.AccountKey}.${server.host}")), "the key is never shown")
    }
  }

  test("should fail with a StoreException, not hang, when the endpoint does not answer") {
    val port = Using.resource(new java.net.ServerSocket(0))(_.getLocalPort)
    val options = server.options + (AzureStoreConfig.Endpoint -> s"http://127.0.0.1:$port/${server.account}") +
      (AzureStoreConfig.MaxRetries -> "0")
    Using.resource(ObjectStores.open(s"abfss://c00@${server.host}/q", options)) { s =>
      val e = intercept[StoreException](s.get("k"))
      assert(e.getMessage.contains(s"127.0.0.1:$port"), e.getMessage)
    }
  }

  test("should reject bad paths and options with the option named") {
    def invalid(uri: String, options: Map[String, String] = server.options) =
      intercept[InvalidConfigException](ObjectStores.open(uri, options))
    assert(invalid(s"abfss://${server.host}/q").option === "path")
    assert(invalid(s"abfss://Bad_Name@${server.host}/q").getMessage.contains("not an Azure container name"))
    assert(invalid(s"abfss://c00@${server.host}/a/../b").getMessage.contains("not a valid key"))
    assert(invalid(s"abfss://c00@${server.host}/q",
      server.options + (AzureStoreConfig.Endpoint -> "127.0.0.1:1")).option === AzureStoreConfig.Endpoint)
    val badKey = intercept[InvalidConfigException](ObjectStores.open(s"abfss://c00@${server.host}/q",
        Map(s"spark.hadoop.fs.azure.account.key.${server.host}" -> "not base64!")))
    assert(badKey.option === s"fs.azure.account.key.${server.host}" && !badKey.getMessage.contains("not base64!"))
    val oauth = intercept[InvalidConfigException](ObjectStores.open(s"abfss://c00@${server.host}/q",
        Map("fs.azure.account.auth.type" -> "OAuth", "fs.azure.account.oauth2.client.id" -> "id")))
    assert(oauth.option === "fs.azure.account.oauth2.client.secret", oauth.getMessage)
  }
}
