package osqueue.store

/** The contract on the in-memory store, plus its `memory://name` registry. */
class InMemoryStoreSuite extends ObjectStoreContractSuite {
  override def newStore(): ObjectStore = InMemoryStore.fresh()

  test("should resolve the same name to the same instance") {
    val name = s"suite-${System.nanoTime()}"
    val a = InMemoryStore.named(name)
    a.put("k", bytes("v"))
    assert(InMemoryStore.named(name) eq a)
    assert(text(InMemoryStore.named(name).get("k")) === Some("v"))
    assert(a.uri === s"memory://$name")
    InMemoryStore.drop(name)
    assert(InMemoryStore.named(name).get("k") === None)
  }

  test("should copy bytes so callers cannot change stored objects") {
    val s = InMemoryStore.fresh()
    val data = bytes("abc")
    s.put("k", data)
    data(0) = 'z'.toByte
    s.get("k").get.bytes(1) = 'z'.toByte
    assert(text(s.get("k")) === Some("abc"))
  }

  test("should never reuse a version after delete and re-create") {
    val s = InMemoryStore.fresh()
    s.put("k", bytes("same"))
    val v1 = s.get("k").get.version
    s.delete("k")
    s.put("k", bytes("same"))
    assert(s.get("k").get.version !== v1)
  }
}
