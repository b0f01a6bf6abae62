package osqueue.consumer

import java.nio.file.{Files, Path}

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.{InvalidObjectKeyException, OsqueueException}
import osqueue.format.{BatchCodec, BatchNames, Compression, ManifestCodec, ManifestEdits, NewEntry}
import osqueue.gc.GarbageCollector
import osqueue.store.LocalFileSystemStore
import osqueue.testing.ManualClock

/**
 * Path safety (issue 6): a manifest cannot make a consumer read, or GC delete, anything outside
 * the queue root / the data prefix. Every hostile target holds a VALID batch, so a read through
 * the hostile key would have succeeded: getting InvalidObjectKeyException proves it was not read.
 */
class PathSafetySuite extends AnyFunSuite {
  private val t0 = 1767225600000L
  private val validBatch = BatchCodec.encode(Seq("stolen".getBytes), Compression.None)

  private def withDirs(f: (Path, Path) => Unit): Unit = {
    val base = Files.createTempDirectory("osq-path-safety")
    val root = Files.createDirectories(base.resolve("a/b/queue"))
    try f(base, root)
    finally {
      Files.walk(base).sorted(java.util.Comparator.reverseOrder()).forEach { p => Files.deleteIfExists(p); () }
    }
  }

  private def write(p: Path, bytes: Array[Byte]): Path = {
    Files.createDirectories(p.getParent); Files.write(p, bytes)
  }

  test("the consumer raises InvalidObjectKeyException (naming the key) for entries pointing outside the root") {
    val hostile = Seq("../../etc/passwd", "/etc/passwd", "s3://other-bucket/x", "ingest/../../x",
      "ingest/../../../outside.batch", "./ingest/x.batch", "ingest//x.batch", "ingest\\..\\..\\x")
    // ("file:/etc/passwd" is a plain relative key: <root>/file:/etc/passwd, inside the root.)
    withDirs { (base, root) =>
      // Valid batches where each relative escape would land.
      write(root.resolve("../../etc/passwd").normalize(), validBatch)
      write(root.resolve("../x").normalize(), validBatch)
      write(root.resolve("../../outside.batch").normalize(), validBatch)
      hostile.foreach { loc =>
        val store = new LocalFileSystemStore(root)
        store.put("ingest/manifest", ManifestEdits.append(ManifestCodec.EmptyBytes, Seq(NewEntry(loc, IndexedSeq.empty)), "m")._1)
        val consumer = new Consumer(store, ConsumerConfig(runGc = false), new ManualClock(t0))
        consumer.initialize()
        val e = withClue(s"location '$loc': ")(intercept[OsqueueException](consumer.nextBatch()))
        val cause = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null).collectFirst {
          case k: InvalidObjectKeyException => k
        }
        assert(cause.exists(_.key == loc), s"location '$loc' raised ${e.getClass.getName}: ${e.getMessage}")
        assert(e.getMessage.contains(loc) || cause.get.getMessage.contains(loc))
        store.close()
      }
      assert(Files.readAllBytes(root.resolve("../../etc/passwd").normalize()).sameElements(validBatch))
    }
  }

  test("GC deletes only <ULID>.batch directly under the data prefix, never outside it or through a symlink") {
    withDirs { (base, root) =>
      val store = new LocalFileSystemStore(root)
      val clock = new ManualClock(t0 + 10.days.toMillis)
      def old(prefix: String): String = BatchNames.newKey(prefix, t0)
      val orphan = old("ingest"); store.put(orphan, validBatch)
      val referencedLater = BatchNames.newKey("ingest", t0 + 1.day.toMillis); store.put(referencedLater, validBatch)
      val outsidePrefix = old("other"); store.put(outsidePrefix, validBatch)
      val inSubDir = old("ingest/sub"); store.put(inSubDir, validBatch)
      val sibling = old("ingest2"); store.put(sibling, validBatch)
      // Outside the root altogether, and reachable through a symlink inside the prefix.
      val outsideDir = Files.createDirectories(base.resolve("outside"))
      val outsideFile = write(outsideDir.resolve(BatchNames.newKey("", t0).stripPrefix("/")), validBatch)
      Files.createSymbolicLink(root.resolve("ingest/link"), outsideDir)
      val fileLink = root.resolve("ingest/" + BatchNames.newKey("", t0).stripPrefix("/"))
      Files.createSymbolicLink(fileLink, outsideFile)
      store.put("ingest/manifest", ManifestEdits.append(ManifestCodec.EmptyBytes, Seq(NewEntry(referencedLater, IndexedSeq.empty)), "m")._1)
      // GC ages files by their mtime against the manifest's: every file but the manifest is a day old.
      val dayAgo = java.nio.file.attribute.FileTime.fromMillis(System.currentTimeMillis() - 1.day.toMillis)
      Seq(orphan, referencedLater, outsidePrefix, inSubDir, sibling).foreach(k => Files.setLastModifiedTime(root.resolve(k), dayAgo))
      Files.setLastModifiedTime(outsideFile, dayAgo)

      val gc = new GarbageCollector(store, "ingest/manifest", "ingest", 10.minutes, clock)
      val result = gc.runOnce()
      assert(result.deleted == Seq(orphan), result)
      assert(store.get(orphan).isEmpty)
      Seq(referencedLater, outsidePrefix, inSubDir, sibling).foreach(k => assert(store.get(k).isDefined, k))
      assert(Files.exists(outsideFile) && Files.readAllBytes(outsideFile).sameElements(validBatch))
      assert(Files.isSymbolicLink(fileLink) && Files.isSymbolicLink(root.resolve("ingest/link")))
      store.close()
    }
  }
}
