package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8

import org.scalatest.funsuite.AnyFunSuite

import osqueue.StoreException
import osqueue.store.{CasOutcome, InMemoryStore}
import osqueue.testing.FaultInjectingStore
import osqueue.testing.FaultInjectingStore.Fault

/** The queue id sidecar: created once, and a create with an unknown outcome is settled by reading. */
class OsqueueStoresSuite extends AnyFunSuite {
  private val location = QueueLocation("memory://q", "ingest/manifest", "ingest", Map.empty)
  private val key = "ingest/manifest.queue-id"

  test("should settle a queue-id create whose reply was lost by reading the id that landed") {
    val inner = InMemoryStore.fresh()
    val store = new FaultInjectingStore(inner, (_, n) => if (n == 0) Fault.ApplyThenError else Fault.None)
    val id = OsqueueStores.queueId(store, location, create = true)
    assert(store.injected.get() == 1, "the fault did not fire")
    assert(id.contains(new String(inner.get(key).get.bytes, UTF_8)), "not the id that landed")
    assert(OsqueueStores.queueId(store, location, create = true) == id, "the id changed")
  }

  test("should retry a queue-id create that failed before it was applied") {
    val inner = InMemoryStore.fresh()
    val store = new FaultInjectingStore(inner, (_, n) => if (n < 2) Fault.FailBefore else Fault.None)
    val id = OsqueueStores.queueId(store, location, create = true)
    assert(store.injected.get() == 2 && id.isDefined && id.contains(new String(inner.get(key).get.bytes, UTF_8)))
  }

  test("should give up with StoreException naming the key when the store keeps failing") {
    val store = new FaultInjectingStore(InMemoryStore.fresh(), (_, _) => Fault.FailBefore)
    val e = intercept[StoreException](OsqueueStores.queueId(store, location, create = true))
    assert(e.getMessage.contains(key))
  }

  test("should only read without create") {
    val inner = InMemoryStore.fresh()
    assert(OsqueueStores.queueId(inner, location, create = false).isEmpty && inner.get(key).isEmpty)
    assert(inner.putIfAbsent(key, "abc".getBytes(UTF_8)).isInstanceOf[CasOutcome.Written])
    assert(OsqueueStores.queueId(inner, location, create = false).contains("abc"))
  }
}
