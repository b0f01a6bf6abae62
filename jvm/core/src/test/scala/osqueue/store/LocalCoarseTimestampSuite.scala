package osqueue.store

import java.nio.file.{Files, Path}

import scala.sys.process._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.testing.ManualClock

/**
 * [[LocalFileSystemStore.getIfChanged]] on a filesystem with coarse timestamps: a loop-mounted ext4
 * made with 128-byte inodes (1-second mtimes), where a rename reuses the inode freed by the one
 * before it. Needs root (mount); cancelled with the reason otherwise.
 */
class LocalCoarseTimestampSuite extends AnyFunSuite {

  /** Runs `body` on a fresh ext4 with 1-second timestamps mounted in a directory this creates and removes. */
  private def withCoarseExt4(body: Path => Unit): Unit = {
    val dir = Files.createTempDirectory("osqueue-coarse-ext4-")
    val image = dir.resolve("fs.img")
    val mount = Files.createDirectory(dir.resolve("mnt"))
    val log = new StringBuilder
    val logger = ProcessLogger(l => log.append(l).append('\n'), l => log.append(l).append('\n'))
    def run(cmd: String*): Boolean = util.Try(Process(cmd).!(logger) == 0).getOrElse(false)
    try {
      if ("id -u".!!.trim != "0") cancel("needs root to loop-mount an ext4 image")
      val mounted = run("truncate", "-s", "16M", image.toString) &&
        run("mkfs.ext4", "-q", "-F", "-I", "128", image.toString) &&
        run("mount", "-o", "loop", image.toString, mount.toString)
      if (!mounted) cancel(s"could not loop-mount an ext4 image with 128-byte inodes: $log")
      try body(mount)
      finally run("umount", mount.toString)
    } finally {
      Files.deleteIfExists(image)
      Files.deleteIfExists(mount)
      Files.deleteIfExists(dir)
    }
  }

  test("getIfChanged sees every same-size rewrite on ext4 with 1-second timestamps (inode reuse)") {
    withCoarseExt4 { root =>
      val store = new LocalFileSystemStore(root)
      val trials = 40
      val stale = (0 until trials).count { trial =>
        val key = s"q$trial/manifest"
        def bytes(tag: Char) = Array.fill[Byte](64)(tag.toByte)
        store.put(key, bytes('a'))
        val v1 = store.get(key).get.version
        assert(store.getIfChanged(key, v1) == ConditionalRead.NotModified) // read at v1, attributes remembered
        store.put(key, bytes('b')) // frees v1's inode
        store.put(key, bytes('c')) // may take it again: same inode, same size, same second
        store.getIfChanged(key, v1) match {
          case ConditionalRead.Changed(o) => assert(o.bytes.sameElements(bytes('c'))); false
          case other => assert(other == ConditionalRead.NotModified, other); true
        }
      }
      assert(stale == 0, s"$stale of $trials same-size rewrites read as not modified")
    }
  }

  test("getIfChanged trusts a settled file's attributes: an idle poll is a stat, no read") {
    val root = Files.createTempDirectory("osqueue-settled-")
    try {
      val clock = new ManualClock(System.currentTimeMillis())
      val store = new LocalFileSystemStore(root, clock = clock)
      store.put("m", Array.fill[Byte](8)(1))
      val v1 = store.get("m").get.version
      val file = root.resolve("m")
      val mtime = Files.getLastModifiedTime(file)
      clock.advance(LocalFileSystemStore.TimestampGranularityMs + 1000) // the file is settled now
      assert(store.getIfChanged("m", v1) == ConditionalRead.NotModified) // read once, attributes remembered
      // Same inode, size and mtime, other bytes: only a poll that trusts the attributes misses it.
      Files.write(file, Array.fill[Byte](8)(2))
      Files.setLastModifiedTime(file, mtime)
      assert(Files.getLastModifiedTime(file) == mtime)
      assert(store.getIfChanged("m", v1) == ConditionalRead.NotModified, "the poll read the file")
    } finally {
      Files.deleteIfExists(root.resolve("m"))
      Files.list(root).forEach(p => Files.deleteIfExists(p))
      Files.deleteIfExists(root)
    }
  }
}
