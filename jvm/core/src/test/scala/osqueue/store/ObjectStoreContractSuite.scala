package osqueue.store

import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.{Executors, TimeUnit}

import scala.concurrent.duration._
import scala.concurrent.{Await, ExecutionContext, Future}
import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import osqueue.InvalidObjectKeyException

/**
 * The behaviour every [[ObjectStore]] must have, run against each implementation by a concrete
 * suite that says how to make a fresh, empty store.
 */
abstract class ObjectStoreContractSuite extends AnyFunSuite {
  /** A new, empty store; the suite closes it. */
  def newStore(): ObjectStore

  /** Increments per thread in the concurrent CAS test. */
  def casIncrementsPerThread: Int = 50

  protected def withStore[T](body: ObjectStore => T): T = {
    val store = newStore()
    try body(store)
    finally store.close()
  }

  protected def bytes(s: String): Array[Byte] = s.getBytes(UTF_8)
  protected def text(o: Option[VersionedObject]): Option[String] = o.map(v => new String(v.bytes, UTF_8))
  protected def keys(objects: Seq[ObjectInfo]): Seq[String] = objects.map(_.key).sorted

  private def written(outcome: CasOutcome): ObjectVersion = outcome match {
    case CasOutcome.Written(v) => v
    case other => fail(s"expected a write, got $other")
  }

  test("should return None for a missing key") {
    withStore { s =>
      assert(s.get("missing") === None)
      assert(s.get("no/such/dir/key") === None)
    }
  }

  test("getIfChanged: not modified at the known version, the new bytes and version after any write, absent when gone") {
    withStore { s =>
      val v1 = written(s.putIfAbsent("m/manifest", bytes("one")))
      assert(s.getIfChanged("m/manifest", v1) === ConditionalRead.NotModified)
      assert(s.getIfChanged("m/manifest", v1) === ConditionalRead.NotModified) // again: nothing is consumed
      // Same size, conditional and unconditional writes: each is seen.
      val v2 = written(s.putIfVersionMatches("m/manifest", bytes("two"), v1))
      s.getIfChanged("m/manifest", v1) match {
        case ConditionalRead.Changed(o) => assert(new String(o.bytes, UTF_8) === "two" && o.version === v2)
        case other => fail(s"expected the new object, got $other")
      }
      assert(s.getIfChanged("m/manifest", v2) === ConditionalRead.NotModified)
      s.put("m/manifest", bytes("six"))
      val v3 = s.get("m/manifest").get.version
      s.getIfChanged("m/manifest", v2) match {
        case ConditionalRead.Changed(o) => assert(new String(o.bytes, UTF_8) === "six" && o.version === v3)
        case other => fail(s"expected the new object, got $other")
      }
      // A version the caller never saw (another object's) is not the current one.
      s.put("m/other", bytes("x"))
      val foreign = s.get("m/other").get.version
      assert(s.getIfChanged("m/manifest", foreign).isInstanceOf[ConditionalRead.Changed])
      s.delete("m/manifest")
      assert(s.getIfChanged("m/manifest", v3) === ConditionalRead.Absent)
      assert(s.getIfChanged("never/written", v3) === ConditionalRead.Absent)
      intercept[InvalidObjectKeyException](s.getIfChanged("../escape", v3))
    }
  }

  test("should read back what put wrote, including empty and binary objects") {
    withStore { s =>
      s.put("a/b", bytes("hello"))
      assert(text(s.get("a/b")) === Some("hello"))
      s.put("a/b", bytes("world"))
      assert(text(s.get("a/b")) === Some("world"))
      s.put("empty", Array.emptyByteArray)
      assert(s.get("empty").map(_.bytes.length) === Some(0))
      val big = new Array[Byte](1 << 20)
      new Random(7).nextBytes(big)
      s.put("big", big)
      assert(s.get("big").map(_.bytes.toSeq) === Some(big.toSeq))
    }
  }

  test("getBuffer should read what getBytes reads, keep its bytes when the object is replaced or deleted, None when absent") {
    withStore { s =>
      def read(b: java.nio.ByteBuffer) = { val out = new Array[Byte](b.remaining); b.duplicate().get(out); out.toSeq }
      assert(s.getBuffer("absent").isEmpty)
      s.put("empty", Array.emptyByteArray)
      assert(s.getBuffer("empty").map(_.remaining) === Some(0))
      val big = new Array[Byte](1 << 20)
      new Random(11).nextBytes(big)
      s.put("big", big)
      val first = s.getBuffer("big").get
      assert(read(first) === big.toSeq && s.getBytes("big").get.toSeq === big.toSeq)
      s.put("big", bytes("replaced"))
      assert(read(s.getBuffer("big").get) === bytes("replaced").toSeq)
      s.delete("big")
      assert(read(first) === big.toSeq, "a buffer read before a replace and a delete keeps the bytes it was read with")
      assert(s.getBuffer("big").isEmpty)
    }
  }

  test("should keep an object's version until its content changes") {
    withStore { s =>
      s.put("k", bytes("one"))
      val v1 = s.get("k").get.version
      assert(s.get("k").get.version === v1, "reading twice gives the same version")
      s.put("k", bytes("two"))
      assert(s.get("k").get.version !== v1)
    }
  }

  test("should create with putIfAbsent only when the key is absent") {
    withStore { s =>
      val v = written(s.putIfAbsent("m/manifest", bytes("first")))
      assert(s.get("m/manifest").map(_.version) === Some(v), "the returned version is the stored one")
      assert(s.putIfAbsent("m/manifest", bytes("second")) === CasOutcome.PreconditionFailed)
      assert(text(s.get("m/manifest")) === Some("first"))
    }
  }

  test("should overwrite with putIfVersionMatches only when the version is current") {
    withStore { s =>
      val v1 = written(s.putIfAbsent("m", bytes("1")))
      val v2 = written(s.putIfVersionMatches("m", bytes("2"), v1))
      assert(s.get("m").map(_.version) === Some(v2))
      assert(s.putIfVersionMatches("m", bytes("3"), v1) === CasOutcome.PreconditionFailed, "stale version")
      assert(text(s.get("m")) === Some("2"))
      val v3 = written(s.putIfVersionMatches("m", bytes("3"), s.get("m").get.version))
      assert(text(s.get("m")) === Some("3"))
      assert(Set(v1, v2, v3).size === 3)
    }
  }

  test("should fail putIfVersionMatches on a missing key") {
    withStore { s =>
      s.put("gone", bytes("x"))
      val v = s.get("gone").get.version
      s.delete("gone")
      assert(s.putIfVersionMatches("gone", bytes("y"), v) === CasOutcome.PreconditionFailed)
      assert(s.putIfVersionMatches("never", bytes("y"), v) === CasOutcome.PreconditionFailed)
      assert(s.get("gone") === None)
      assert(s.get("never") === None)
    }
  }

  test("should list by prefix with keys relative to the root and sizes") {
    withStore { s =>
      val all = Seq("a/b/c", "a/b/d", "a/bc", "ab", "x/y/z")
      all.foreach(k => s.put(k, bytes(k * 2)))
      // Conditional writes leave no visible internal files (local lock files).
      assert(s.putIfAbsent("a/b/c", bytes("again")) === CasOutcome.PreconditionFailed)
      written(s.putIfAbsent("x/new", bytes("n")))
      assert(keys(s.list("")) === (all :+ "x/new").sorted)
      assert(keys(s.list("a/")) === Seq("a/b/c", "a/b/d", "a/bc"))
      assert(keys(s.list("a/b")) === Seq("a/b/c", "a/b/d", "a/bc"), "partial-name prefix")
      assert(keys(s.list("a/b/")) === Seq("a/b/c", "a/b/d"))
      assert(keys(s.list("a")) === Seq("a/b/c", "a/b/d", "a/bc", "ab"))
      assert(keys(s.list("a/bc")) === Seq("a/bc"))
      assert(keys(s.list("x/y/z")) === Seq("x/y/z"))
      assert(s.list("nothing/").isEmpty)
      assert(s.list("a/b/c/d").isEmpty)
      assert(s.list("a/b/").map(o => o.key -> o.size).toMap === Map("a/b/c" -> 10L, "a/b/d" -> 10L))
    }
  }

  test("should delete, and succeed deleting a missing key") {
    withStore { s =>
      s.put("d/k", bytes("x"))
      s.delete("d/k")
      assert(s.get("d/k") === None)
      assert(s.list("d/").isEmpty)
      s.delete("d/k")
      s.delete("never/existed")
      written(s.putIfAbsent("d/k", bytes("again")))
      assert(text(s.get("d/k")) === Some("again"))
    }
  }

  test("should delete many keys at once, a missing one no error") {
    withStore { s =>
      (0 until 3).foreach(i => s.put(s"m/k$i", bytes("x")))
      s.put("m/kept", bytes("y"))
      s.deleteMany(Seq("m/k0", "m/k1", "m/k2", "never/existed"))
      assert(s.list("m/").map(_.key) === Seq("m/kept"))
      s.deleteMany(Seq.empty)
    }
  }

  test("should reject keys that are not plain relative keys before any I/O") {
    withStore { s =>
      val badKeys = Seq("", "../x", "a/../../x", "/abs", "a//b", "a/./b", "./a", "a/", "a\\b", "..\\x", "a\u0000b", "s3://b/k", ".", "..")
      val v = ObjectVersion("whatever")
      for (k <- badKeys) {
        withClue(s"key '$k': ") {
          intercept[InvalidObjectKeyException](s.get(k))
          intercept[InvalidObjectKeyException](s.put(k, bytes("x")))
          intercept[InvalidObjectKeyException](s.putIfAbsent(k, bytes("x")))
          intercept[InvalidObjectKeyException](s.putIfVersionMatches(k, bytes("x"), v))
          intercept[InvalidObjectKeyException](s.delete(k))
        }
      }
      for (p <- Seq("../", "/abs", "a//", "a/../", "a\\")) withClue(s"prefix '$p': ")(intercept[InvalidObjectKeyException](s.list(p)))
      assert(s.list("").isEmpty, "nothing was written")
    }
  }

  test("should count exactly with 8 threads doing read-modify-CAS increments of one object") {
    withStore { s =>
      val threads = 8
      val pool = Executors.newFixedThreadPool(threads)
      implicit val ec: ExecutionContext = ExecutionContext.fromExecutor(pool)
      try {
        val work =
          Future.sequence((1 to threads).map(_ => Future((1 to casIncrementsPerThread).map(_ => CasCounter.increment(s, "q/counter")))))
        val stats = Await.result(work, 5.minutes).flatten
        assert(CasCounter.value(s, "q/counter") === threads * casIncrementsPerThread)
        info(s"${stats.size} increments took ${stats.map(_.attempts).sum} attempts " +
          s"(${stats.map(_.unknownOutcomes).sum} unknown outcomes resolved by re-reading)")
      } finally {
        pool.shutdownNow()
        pool.awaitTermination(10, TimeUnit.SECONDS)
      }
    }
  }
}
