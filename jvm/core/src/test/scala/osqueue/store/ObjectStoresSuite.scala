package osqueue.store

import java.nio.file.{Files, Paths}

import org.scalatest.funsuite.AnyFunSuite

import osqueue.InvalidConfigException

/** Opening stores from the URIs of docs/format.md §1 (S3 URIs are also opened in [[S3StoreSuite]]). */
class ObjectStoresSuite extends AnyFunSuite {
  test("should open local paths in all their forms") {
    val dir = Files.createTempDirectory("osqueue-open-").toRealPath()
    for (uri <- Seq(dir.toString, s"file:$dir", s"file://$dir", s"file://localhost$dir")) {
      val store = ObjectStores.open(uri, Map.empty)
      assert(store.isInstanceOf[LocalFileSystemStore], uri)
      assert(store.uri === s"file:$dir", uri)
    }
    val s = ObjectStores.open(s"file://$dir/sub/", Map.empty)
    s.put("k", "v".getBytes)
    assert(Files.readString(dir.resolve("sub/k")) === "v")
  }

  test("should resolve a relative local path against the working directory") {
    val store = ObjectStores.open("some/rel/dir", Map.empty)
    assert(store.uri === s"file:${Paths.get("").toAbsolutePath.resolve("some/rel/dir")}")
  }

  test("should open the same memory store for the same name") {
    val name = s"open-${System.nanoTime()}"
    val a = ObjectStores.open(s"memory://$name", Map.empty)
    a.put("k", "v".getBytes)
    assert(ObjectStores.open(s"memory://$name", Map.empty).get("k").map(o => new String(o.bytes)) === Some("v"))
  }

  test("should open s3:// and s3a:// URIs with the bucket and prefix") {
    val opts = Map("fs.s3a.endpoint" -> "http://127.0.0.1:1", "fs.s3a.access.key" -> "a", "fs.s3a.secret.key" -> "s")
    for ((uri, expected) <- Seq("s3://b/p/q" -> "s3://b/p/q", "s3a://b/p/" -> "s3://b/p", "s3a://b" -> "s3://b", "s3://b/" -> "s3://b")) {
      val s = ObjectStores.open(uri, opts)
      try {
        assert(s.isInstanceOf[S3Store], uri)
        assert(s.uri === expected, uri)
      } finally s.close()
    }
  }

  test("should reject other URIs as an invalid path") {
    for (uri <- Seq("", "hdfs://nn/q", "gs://b/q", "file:rel", "file://host/q", "s3://", "s3a:///p", "s3://b/a//c", "s3://b/../x",
        "memory://", "abfs://c@a/q")) {
      val e = intercept[InvalidConfigException](ObjectStores.open(uri, Map.empty))
      assert(e.option === "path" && e.value === uri, e.getMessage)
    }
  }

  test("should name the artifact to add for a cloud scheme whose provider is not on the classpath") {
    for ((uri, artifact) <- Seq("gs://b/q" -> "osqueue-gcs", "abfss://c@a.dfs.core.windows.net/q" -> "osqueue-azure",
        "wasbs://c@a.blob.core.windows.net/q" -> "osqueue-azure")) {
      val e = intercept[InvalidConfigException](ObjectStores.open(uri, Map.empty))
      assert(e.option === "path" && e.getMessage.contains(artifact), e.getMessage)
    }
  }

  test("should open a scheme through the ObjectStoreProvider registered on the context class loader") {
    val dir = Files.createTempDirectory("osqueue-provider-")
    val services = dir.resolve("META-INF/services/osqueue.store.ObjectStoreProvider")
    Files.createDirectories(services.getParent)
    Files.writeString(services, classOf[MemorySchemeProvider].getName + "\n")
    val loader = new java.net.URLClassLoader(Array(dir.toUri.toURL), getClass.getClassLoader)
    val thread = Thread.currentThread()
    val previous = thread.getContextClassLoader
    thread.setContextClassLoader(loader)
    try {
      val store = ObjectStores.open("testmem://q1", Map("k" -> "v"))
      assert(store.uri === "memory://provided-q1-v")
      intercept[InvalidConfigException](ObjectStores.open("othermem://q1", Map.empty))
    } finally thread.setContextClassLoader(previous)
  }

  test("should reject invalid S3 options when opening") {
    val e = intercept[InvalidConfigException](ObjectStores.open("s3a://b/q", Map("fs.s3a.path.style.access" -> "maybe")))
    assert(e.option === "fs.s3a.path.style.access")
  }
}

/** Registered only by the provider test: `testmem://name` opens a memory store. */
class MemorySchemeProvider extends ObjectStoreProvider {
  override def schemes: Set[String] = Set("testmem")
  override def open(uri: String, options: Map[String, String]): ObjectStore =
    InMemoryStore.named(s"provided-${uri.stripPrefix("testmem://")}-${options.getOrElse("k", "")}")
}
