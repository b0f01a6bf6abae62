package osqueue.store

import java.io.{BufferedReader, InputStreamReader}
import java.nio.file.{Files, Path, Paths}
import java.security.MessageDigest
import java.util.HexFormat
import java.util.concurrent.{CountDownLatch, TimeUnit}

import scala.collection.mutable.ListBuffer
import scala.concurrent.duration._
import scala.jdk.CollectionConverters._
import scala.util.Using

import org.scalatest.BeforeAndAfterAll

import osqueue.{InvalidObjectKeyException, StoreException}

/** The contract on the local store, plus its on-disk layout, cross-process CAS and path checks. */
class LocalFileSystemStoreSuite extends ObjectStoreContractSuite with BeforeAndAfterAll {
  private val tempDirs = ListBuffer.empty[Path]

  private def tempDir(): Path = synchronized {
    val d = Files.createTempDirectory("osqueue-local-store-").toRealPath()
    tempDirs += d
    d
  }

  override def newStore(): ObjectStore = new LocalFileSystemStore(tempDir())

  override def afterAll(): Unit = tempDirs.foreach(deleteTree)

  private def deleteTree(p: Path): Unit =
    if (Files.exists(p, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
      if (Files.isDirectory(p, java.nio.file.LinkOption.NOFOLLOW_LINKS))
        Using.resource(Files.list(p))(_.iterator().asScala.toList).foreach(deleteTree)
      Files.delete(p)
    }

  private def allFiles(root: Path): Seq[String] =
    Using.resource(Files.walk(root))(_.iterator().asScala.filter(Files.isRegularFile(_)).map(root.relativize(_).toString).toList).sorted

  /** A JVM running `main` from the test classpath. */
  private def startJvm(main: String, args: String*): Process = {
    val java = Paths.get(System.getProperty("java.home"), "bin", "java").toString
    new ProcessBuilder((Seq(java, "-cp", System.getProperty("java.class.path"), main) ++ args).asJava)
      .redirectError(ProcessBuilder.Redirect.INHERIT)
      .start()
  }

  /** Waits for the process's first stdout line. */
  private def firstLine(p: Process): String =
    new BufferedReader(new InputStreamReader(p.getInputStream)).readLine()

  private def python: String = sys.env.getOrElse("OSQUEUE_PYTHON", "python3")

  test("should keep key K as the file <root>/K with a sha256 version and no leftover temp files") {
    val root = tempDir()
    val s = new LocalFileSystemStore(root)
    s.put("ingest/01.batch", bytes("batch"))
    assert(s.putIfAbsent("ingest/manifest", bytes("m1")).isInstanceOf[CasOutcome.Written])
    assert(Files.readString(root.resolve("ingest/01.batch")) === "batch")
    val expected = "sha256:" + HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes("m1")))
    assert(s.get("ingest/manifest").get.version.token === expected)
    assert(s.uri === s"file:$root")
    // The lock file stays (never deleted); temp files are gone.
    assert(allFiles(root) === Seq("ingest/.manifest.lock", "ingest/01.batch", "ingest/manifest"))
  }

  test("getBuffer should map the file (off the heap, read-only) on a local disk, and refuse what get refuses") {
    val root = tempDir()
    val store = new LocalFileSystemStore(root)
    store.put("q/batch-1.batch", Array.fill[Byte](4096)(7))
    val b = store.getBuffer("q/batch-1.batch").get
    assert(b.remaining == 4096 && b.get(4095) == 7)
    val mapped = LocalFileSystemStore.mapsFilesOn(Files.getFileStore(root).`type`(), System.getProperty("os.name"))
    assert(b.isDirect === mapped && b.isReadOnly === mapped, s"${Files.getFileStore(root).`type`()}: mapped = $mapped")
    intercept[InvalidObjectKeyException](store.getBuffer(".hidden"))
    assert(store.getBuffer("q").isEmpty, "a directory is no object")
  }

  test("getBuffer should map files only on a local disk's filesystem, never on Windows") {
    for (t <- Seq("ext4", "xfs", "btrfs", "tmpfs", "apfs")) assert(LocalFileSystemStore.mapsFilesOn(t, "Linux"), t)
    // A file deleted by another host can fault a mapping mid-read; Windows refuses to delete a mapped file.
    for (t <- Seq("nfs", "nfs4", "cifs", "smb2", "fuse", "fuse.dbfs", "9p", "ceph", ""))
      assert(!LocalFileSystemStore.mapsFilesOn(t, "Linux"), t)
    assert(!LocalFileSystemStore.mapsFilesOn("NTFS", "Windows 11") && !LocalFileSystemStore.mapsFilesOn("ext4", "Windows 11"))
  }

  test("should create a missing root on the first write and list nothing before") {
    val root = tempDir().resolve("not/yet")
    val s = new LocalFileSystemStore(root)
    assert(s.list("").isEmpty)
    assert(s.get("k") === None)
    s.delete("k")
    assert(s.putIfAbsent("k", bytes("v")).isInstanceOf[CasOutcome.Written])
    assert(Files.isRegularFile(root.resolve("k")))
  }

  test("should reject names starting with a dot, which are reserved for internal files") {
    val s = newStore()
    for (k <- Seq(".manifest.lock", "a/.b", ".hidden/x"))
      withClue(k)(intercept[InvalidObjectKeyException](s.put(k, bytes("x"))))
  }

  test("should hide files starting with a dot from list") {
    val root = tempDir()
    val s = new LocalFileSystemStore(root)
    s.put("a/b", bytes("x"))
    Files.writeString(root.resolve("a/.other"), "hidden")
    Files.createDirectories(root.resolve(".dir"))
    Files.writeString(root.resolve(".dir/c"), "hidden")
    assert(keys(s.list("")) === Seq("a/b"))
  }

  test("should reject keys that escape the root through a symlink") {
    val root = tempDir()
    val outside = tempDir()
    Files.writeString(outside.resolve("secret"), "secret")
    Files.createSymbolicLink(root.resolve("link"), outside)
    Files.createSymbolicLink(root.resolve("file"), outside.resolve("secret"))
    val s = new LocalFileSystemStore(root)
    for (k <- Seq("link/secret", "link/new", "link/d/new", "file")) withClue(k) {
      intercept[InvalidObjectKeyException](s.get(k))
      intercept[InvalidObjectKeyException](s.put(k, bytes("x")))
      intercept[InvalidObjectKeyException](s.putIfAbsent(k, bytes("x")))
      intercept[InvalidObjectKeyException](s.delete(k))
    }
    intercept[InvalidObjectKeyException](s.list("link/"))
    assert(s.list("").isEmpty, "symlinks are not listed")
    assert(allFiles(outside) === Seq("secret"))
    assert(Files.readString(outside.resolve("secret")) === "secret")
  }

  test("should work through a symlinked root") {
    val real = tempDir()
    val link = tempDir().resolve("root-link")
    Files.createSymbolicLink(link, real)
    val s = new LocalFileSystemStore(link)
    assert(s.putIfAbsent("a/k", bytes("v")).isInstanceOf[CasOutcome.Written])
    assert(text(s.get("a/k")) === Some("v"))
    assert(Files.readString(real.resolve("a/k")) === "v")
  }

  test("should count exactly with 2 processes and 4 local threads doing read-modify-CAS increments") {
    val root = tempDir()
    val perThread = 100
    val processes = (1 to 2).map(_ => startJvm("osqueue.store.LocalCasHammer", root.toString, perThread.toString, "2"))
    val s = new LocalFileSystemStore(root)
    val threads = (1 to 4).map(_ => new Thread(() => (1 to perThread).foreach(_ => CasCounter.increment(s, "counter"))))
    threads.foreach(_.start())
    threads.foreach(_.join())
    for (p <- processes) {
      assert(p.waitFor(5, TimeUnit.MINUTES), "hammer process did not finish")
      assert(p.exitValue() === 0, "hammer process failed (its stack trace is above)")
    }
    assert(CasCounter.value(s, "counter") === (4 + 2 * 2) * perThread)
  }

  test("should raise StoreException, not hang, when another process holds the lock past the timeout") {
    val root = tempDir()
    val s = new LocalFileSystemStore(root, lockTimeout = 300.millis)
    val holder = startJvm("osqueue.store.LocalLockHolder", root.resolve(".m.lock").toString)
    try {
      assert(firstLine(holder) === "locked")
      val start = System.nanoTime()
      val e = intercept[StoreException](s.putIfAbsent("m", bytes("v")))
      val elapsedMs = (System.nanoTime() - start) / 1000000
      assert(elapsedMs >= 300 && elapsedMs < 5000, s"took $elapsedMs ms")
      assert(e.getMessage.contains(".m.lock"))
      assert(s.get("m") === None)
    } finally {
      holder.getOutputStream.close()
      holder.waitFor(30, TimeUnit.SECONDS)
    }
    assert(s.putIfAbsent("m", bytes("v")).isInstanceOf[CasOutcome.Written], "the lock is free once the holder exits")
  }

  test("should raise StoreException when a thread of this JVM holds the lock past the timeout") {
    val root = tempDir()
    val s = new LocalFileSystemStore(root, lockTimeout = 200.millis)
    s.put("m", bytes("v0"))
    val locked = new CountDownLatch(1)
    val release = new CountDownLatch(1)
    val holder = new Thread(() =>
      LocalFileLock.withLock(root.resolve(".m.lock"), 10.seconds, "holder") { locked.countDown(); release.await() })
    holder.start()
    try {
      assert(locked.await(10, TimeUnit.SECONDS))
      val v = s.get("m").get.version
      intercept[StoreException](s.putIfVersionMatches("m", bytes("v1"), v))
      assert(text(s.get("m")) === Some("v0"))
    } finally {
      release.countDown()
      holder.join()
    }
    assert(s.putIfVersionMatches("m", bytes("v1"), s.get("m").get.version).isInstanceOf[CasOutcome.Written])
  }

  test("should exclude Python's fcntl.lockf on the same lock file, both ways") {
    val root = tempDir()
    val lockFile = root.resolve(".m.lock")
    // Python holds the lock: the JVM's conditional write times out.
    val script = "import fcntl,sys; f=open(sys.argv[1],'a'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()"
    val py = new ProcessBuilder(python, "-c", script, lockFile.toString).redirectError(ProcessBuilder.Redirect.INHERIT).start()
    val s = new LocalFileSystemStore(root, lockTimeout = 200.millis)
    try {
      assert(firstLine(py) === "locked")
      intercept[StoreException](s.putIfAbsent("m", bytes("v")))
    } finally {
      py.getOutputStream.close()
      py.waitFor(30, TimeUnit.SECONDS)
    }
    // A JVM holds the lock: Python's non-blocking lockf fails.
    val holder = startJvm("osqueue.store.LocalLockHolder", lockFile.toString)
    try {
      assert(firstLine(holder) === "locked")
      val probe =
        "import fcntl,sys\nf=open(sys.argv[1],'a')\ntry:\n  fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n  sys.exit(3)"
      val p = new ProcessBuilder(python, "-c", probe, lockFile.toString).inheritIO().start()
      assert(p.waitFor() === 3, "Python obtained a lock the JVM holds")
    } finally {
      holder.getOutputStream.close()
      holder.waitFor(30, TimeUnit.SECONDS)
    }
  }
}
