package osqueue.store

import java.net.{ServerSocket, URI}

import scala.concurrent.duration._
import scala.util.Using

import org.scalatest.BeforeAndAfterAll
import software.amazon.awssdk.core.sync.RequestBody
import software.amazon.awssdk.services.s3.model.{GetObjectRequest, PutObjectRequest}

import osqueue.{ConditionalWritesNotHonouredException, ErrorKind, StoreException}
import osqueue.testing.S3TestServer

/**
 * The contract on S3, against a real S3-compatible server (moto by default, see
 * [[osqueue.testing.S3TestServer]]), plus prefixes, error mapping and an unreachable endpoint.
 */
class S3StoreSuite extends ObjectStoreContractSuite with BeforeAndAfterAll {
  private var server: S3TestServer = _

  override def beforeAll(): Unit = if (S3TestServer.missingReason.isEmpty) server = S3TestServer.start()
  override def afterAll(): Unit = if (server != null) server.close()

  /** Every test is cancelled (reported as skipped, with the reason) when the server kind is not installed. */
  override def withFixture(test: NoArgTest) = {
    S3TestServer.missingReason.foreach(reason => cancel(reason))
    super.withFixture(test)
  }

  override def casIncrementsPerThread: Int = 25

  /** Each store gets its own bucket, and a prefix so that key mapping is exercised too. */
  override def newStore(): ObjectStore = new S3Store(server.freshBucket(), "some/prefix", server.storeConfig)

  private def s3Store(): S3Store = new S3Store(server.freshBucket(), "some/prefix", server.storeConfig)

  test("should learn the If-Match form the server matches: quoted on S3, moto and LocalStack, unquoted on Ceph RGW") {
    Using.resource(s3Store()) { s =>
      EndpointConditions.forget(s.endpoint)
      val conditions = s.conditions()
      val expected = if (server.kind == "ceph") IfMatchForm.Unquoted else IfMatchForm.Quoted
      assert(conditions.refusal === None && conditions.ifMatchForm === expected)
      assert(s.list("") === Seq.empty, "the probe deletes its scratch object")
      // And the queue's compare-and-swap works through it.
      val CasOutcome.Written(v1) = s.putIfAbsent("m", bytes("1")): @unchecked
      assert(s.putIfVersionMatches("m", bytes("2"), v1).isInstanceOf[CasOutcome.Written])
      assert(s.putIfVersionMatches("m", bytes("3"), v1) === CasOutcome.PreconditionFailed)
      assert(text(s.get("m")) === Some("2"))
    }
  }

  test("should retry a 412 whose re-read shows the same tag once in the other form, and keep that form") {
    Using.resource(s3Store()) { s =>
      val learned = s.conditions()
      val right = learned.ifMatchForm
      // As if the endpoint's form had been learned wrong: the first write corrects it.
      learned.learned(IfMatchForm.all.find(_ != right).get)
      val CasOutcome.Written(v1) = s.putIfAbsent("m", bytes("1")): @unchecked
      if (server.kind == "ceph") {
        assert(s.putIfVersionMatches("m", bytes("2"), v1).isInstanceOf[CasOutcome.Written])
        assert(learned.ifMatchForm === right)
      } else { // moto and LocalStack match both forms: the first one tried lands
        assert(s.putIfVersionMatches("m", bytes("2"), v1).isInstanceOf[CasOutcome.Written])
        learned.learned(right)
      }
      assert(text(s.get("m")) === Some("2"))
    }
  }

  test("should take up to 3 412s in a row on a key as conflicts without a HEAD once a replace landed, then check one") {
    // Issue 29: a contended writer's conflicts cost one request each, not two (docs/format.md §8).
    val bucket = server.freshBucket()
    Using.resources(new S3Store(bucket, "p", server.storeConfig), new S3Store(bucket, "p", server.storeConfig)) {
      (s, other) =>
        val CasOutcome.Written(v1) = s.putIfAbsent("m", bytes("1")): @unchecked
        val CasOutcome.Written(v2) = s.putIfVersionMatches("m", bytes("2"), v1): @unchecked
        assert(s.conditions().confirmed === Some(s.conditions().ifMatchForm))
        assert(s.formChecks.get === 0)
        var current = v2
        def moved(): Unit = { // another writer: a real conflict for s
          val CasOutcome.Written(v) = other.putIfVersionMatches("m", bytes(s"o${current.token}"), current): @unchecked
          current = v
        }
        for (_ <- 1 to 3) {
          moved()
          assert(s.putIfVersionMatches("m", bytes("x"), v2) === CasOutcome.PreconditionFailed)
          assert(s.formChecks.get === 0)
        }
        moved()
        assert(s.putIfVersionMatches("m", bytes("x"), v2) === CasOutcome.PreconditionFailed)
        assert(s.formChecks.get === 1) // the 4th in a row is checked; the tag changed, so the count restarts
        assert(s.putIfVersionMatches("m", bytes("x"), v2) === CasOutcome.PreconditionFailed)
        assert(s.formChecks.get === 1)
        assert(s.putIfVersionMatches("m", bytes("3"), current).isInstanceOf[CasOutcome.Written])
    }
  }

  test("should say the server does not honour If-Match when it fails while the tag is unchanged, not 'too many writers'") {
    assume(server.kind != "ceph",
      "the proxy forwards SigV4 signatures over the changed header: only moto and LocalStack skip checking them")
    val (endpoint, proxy) = S3TestServer.ignoringProxy(server.endpoint, drop = "", spoilIfMatch = true)
    val config = S3StoreConfig.fromOptions(server.options + ("fs.s3a.endpoint" -> endpoint))
    try Using.resource(new S3Store(server.freshBucket(), "q", config)) { s =>
        val refused = intercept[ConditionalWritesNotHonouredException](s.conditions())
        assert(refused.getMessage.contains("with If-Match set to its own entity tag"), refused.getMessage)
        // Past the probe (as if it had passed), a write says the same at once, not after the CAS budget.
        EndpointConditions.remember(new EndpointConditions(s.endpoint, IfMatchForm.all, None))
        def consumer() = new osqueue.queue.QueueConsumer(new osqueue.queue.ManifestStore(s, "ingest/manifest"),
          osqueue.queue.RetryPolicy(baseDelayMs = 1, maxDelayMs = 2), osqueue.SystemClock, new osqueue.metrics.MetricsRegistry)
        consumer().initialize(None) // creates the manifest: If-None-Match still works
        val e = intercept[ConditionalWritesNotHonouredException](consumer().initialize(None))
        assert(e.getMessage.contains("while the object did not change") && e.endpoint === s.endpoint, e.getMessage)
      }
    finally {
      proxy.close()
      Using.resource(new S3Store("unused", "", config))(s => EndpointConditions.forget(s.endpoint))
    }
  }

  for ((drop, what) <- Seq(
      "if-match,if-none-match" -> "If-None-Match: * replaced it",
      "if-none-match" -> "If-None-Match: * replaced it",
      "if-match" -> "If-Match set to a wrong entity tag replaced it")) {
    test(s"should refuse a server that ignores conditional writes (dropped: $drop), naming the endpoint and what it did") {
      assume(server.kind != "ceph",
        "the proxy forwards SigV4 signatures over the dropped headers: only moto and LocalStack skip checking them")
      val (endpoint, proxy) = S3TestServer.ignoringProxy(server.endpoint, drop)
      try {
        val config = S3StoreConfig.fromOptions(server.options + ("fs.s3a.endpoint" -> endpoint))
        val bucket = server.freshBucket()
        Using.resource(new S3Store(bucket, "team/q", config)) { s =>
          val e = intercept[ConditionalWritesNotHonouredException](s.putIfAbsent("ingest/manifest", bytes("m")))
          assert(e.kind === ErrorKind.Configuration)
          assert(e.endpoint === s.endpoint && e.getMessage.contains(endpoint), e.getMessage)
          assert(e.getMessage.contains(what) && e.getMessage.contains(s"team/q/${S3Store.ProbeKeyPrefix}"), e.getMessage)
          assert(s.get("ingest/manifest") === None, "nothing written")
          assert(s.list("") === Seq.empty, "the probe deletes its scratch object")
        }
        // The verdict is kept for the endpoint: a queue opened later is refused at its first write,
        // a consumer's takeover at once (not after the CAS loop's budget as "too many writers").
        Using.resource(ObjectStores.open(s"s3a://$bucket/other", server.options + ("fs.s3a.endpoint" -> endpoint))) { s =>
          val consumer = new osqueue.queue.QueueConsumer(new osqueue.queue.ManifestStore(s, "ingest/manifest"),
            osqueue.queue.RetryPolicy(baseDelayMs = 1, maxDelayMs = 2), osqueue.SystemClock, new osqueue.metrics.MetricsRegistry)
          intercept[ConditionalWritesNotHonouredException](consumer.initialize(None))
          assert(s.get("ingest/manifest") === None)
        }
      } finally {
        proxy.close()
        Using.resource(new S3Store("unused", "", S3StoreConfig.fromOptions(server.options + ("fs.s3a.endpoint" -> endpoint))))(s =>
          EndpointConditions.forget(s.endpoint))
      }
    }
  }

  test("should keep keys under the prefix and not see objects outside it") {
    val bucket = server.freshBucket()
    Using.resources(new S3Store(bucket, "/q1/", server.storeConfig), server.newClient()) { (s, client) =>
      assert(s.uri === s"s3://$bucket/q1")
      s.put("ingest/manifest", bytes("m"))
      client.putObject(PutObjectRequest.builder().bucket(bucket).key("q10/other").build(), RequestBody.fromString("x"))
      client.putObject(PutObjectRequest.builder().bucket(bucket).key("q1/dir/").build(), RequestBody.empty())
      val raw = client.getObjectAsBytes(GetObjectRequest.builder().bucket(bucket).key("q1/ingest/manifest").build())
      assert(raw.asUtf8String() === "m")
      assert(keys(s.list("")) === Seq("ingest/manifest"), "neither q10/other nor the directory marker q1/dir/")
      Using.resource(new S3Store(bucket, "", server.storeConfig)) { whole =>
        assert(keys(whole.list("")) === Seq("q1/ingest/manifest", "q10/other"))
      }
    }
  }

  test("should surface S3's 412 as PreconditionFailed") {
    Using.resource(newStore()) { s =>
      s.put("k", bytes("v"))
      assert(s.putIfVersionMatches("k", bytes("w"),
        ObjectVersion("\"0123456789abcdef0123456789abcdef\"")) === CasOutcome.PreconditionFailed)
      assert(s.putIfAbsent("k", bytes("w")) === CasOutcome.PreconditionFailed)
      assert(text(s.get("k")) === Some("v"))
    }
  }

  test("should use the ETag as the version") {
    Using.resource(newStore()) { s =>
      val CasOutcome.Written(v) = s.putIfAbsent("k", bytes("v")): @unchecked
      assert(v.token.contains("\""), s"an ETag is quoted: ${v.token}")
      assert(s.get("k").get.version === v)
    }
  }

  test("should raise StoreException naming the bucket for a missing bucket") {
    Using.resource(new S3Store("osq-no-such-bucket", "", server.storeConfig)) { s =>
      val e = intercept[StoreException](s.get("k"))
      assert(e.getMessage.contains("osq-no-such-bucket"))
      intercept[StoreException](s.putIfAbsent("k", bytes("v")))
      intercept[StoreException](s.list(""))
    }
  }

  test("should raise InterruptedIOException, not StoreException, when the calling thread is interrupted") {
    // What a Spark query's stop() does to a task or the driver's stream thread during a call: the
    // SDK aborts ("Thread was interrupted"); Spark must see an interruption, not a store failure.
    Using.resource(new S3Store(server.freshBucket(), "p", server.storeConfig)) { s =>
      val outcome = new java.util.concurrent.CompletableFuture[Throwable]()
      val t = new Thread(() => {
        Thread.currentThread().interrupt()
        outcome.complete(try { s.get("k"); null }
          catch { case e: Throwable => e })
      })
      t.start()
      val e = outcome.get(30, java.util.concurrent.TimeUnit.SECONDS)
      assert(e.isInstanceOf[java.io.InterruptedIOException], e)
      assert(e.getMessage.contains("/p/k") && e.getMessage.contains("interrupted"), e.getMessage)
    }
  }

  test("should raise StoreException quickly, naming the endpoint, when the endpoint is unreachable") {
    val port = Using.resource(new ServerSocket(0))(_.getLocalPort) // closed again: nothing listens
    val config = S3StoreConfig(
      endpoint = Some(URI.create(s"http://127.0.0.1:$port")),
      region = Some("us-east-1"),
      credentials = Some(S3Credentials("test", "test")),
      pathStyleAccess = true,
      connectTimeout = 1.second,
      socketTimeout = 2.seconds,
      requestTimeout = Some(2.seconds),
      maxAttempts = 2)
    Using.resource(new S3Store("bucket", "p", config)) { s =>
      val start = System.nanoTime()
      val errors = Seq(
        intercept[StoreException](s.get("k")),
        intercept[StoreException](s.put("k", bytes("v"))),
        intercept[StoreException](s.putIfAbsent("k", bytes("v"))),
        intercept[StoreException](s.putIfVersionMatches("k", bytes("v"), ObjectVersion("\"x\""))),
        intercept[StoreException](s.list("")),
        intercept[StoreException](s.delete("k")))
      val elapsed = (System.nanoTime() - start).nanos
      assert(elapsed < 20.seconds, s"took ${elapsed.toMillis} ms")
      errors.foreach(e => assert(e.getMessage.contains(s"127.0.0.1:$port") && e.getMessage.contains("s3://bucket/p/"), e.getMessage))
    }
  }

  test("should raise StoreException, not an interruption, when the server accepts but never answers") {
    // A socket read timeout is a java.net.SocketTimeoutException, an InterruptedIOException: it must
    // still be a store failure the queue resolves, not a "query stopped" interruption.
    Using.resource(new ServerSocket(0)) { silent =>
      val accepted = new java.util.concurrent.CopyOnWriteArrayList[java.net.Socket]()
      val acceptor = new Thread(() =>
        while (!silent.isClosed)
          try accepted.add(silent.accept())
          catch { case _: java.io.IOException => () })
      acceptor.setDaemon(true)
      acceptor.start()
      val config = S3StoreConfig(
        endpoint = Some(URI.create(s"http://127.0.0.1:${silent.getLocalPort}")),
        region = Some("us-east-1"),
        credentials = Some(S3Credentials("test", "test")),
        pathStyleAccess = true,
        connectTimeout = 1.second,
        socketTimeout = 300.millis,
        requestTimeout = None,
        maxAttempts = 1)
      try Using.resource(new S3Store("bucket", "p", config)) { s =>
          val errors = Seq(
            intercept[StoreException](s.get("k")),
            intercept[StoreException](s.putIfVersionMatches("k", bytes("v"), ObjectVersion("\"x\""))))
          errors.foreach { e =>
            val causes = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null).toSeq
            assert(causes.exists(_.isInstanceOf[java.net.SocketTimeoutException]), e.toString)
          }
          assert(!Thread.currentThread().isInterrupted)
        }
      finally accepted.forEach(_.close())
    }
  }

  test("should be opened by ObjectStores.open from fs.s3a options") {
    val bucket = server.freshBucket()
    Using.resource(ObjectStores.open(s"s3a://$bucket/q", server.options.map { case (k, v) => s"spark.hadoop.$k" -> v })) { s =>
      assert(s.uri === s"s3://$bucket/q")
      s.put("k", bytes("v"))
      assert(text(s.get("k")) === Some("v"))
    }
  }
}
