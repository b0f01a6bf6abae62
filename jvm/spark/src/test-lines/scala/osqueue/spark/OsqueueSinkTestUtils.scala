package osqueue.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Path, Paths}
import java.nio.file.attribute.FileTime

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.streaming.{StreamingQuery, Trigger}
import org.scalatest.Suite

import osqueue.consumer.Consumer
import osqueue.format.ManifestEntry
import osqueue.queue.ManifestStore
import osqueue.store.ObjectStores

/**
 * What the sink and batch-read suites share: text-file input for streaming writes (one file per
 * micro-batch), writes and reads through `format("osqueue")`, and looks at the queue from the
 * core (the manifest, a native consumer, the writer states).
 */
trait OsqueueSinkTestUtils extends LocalSparkSuite { self: Suite =>
  protected val manifestKey = "ingest/manifest"

  /** `files` text files of `lines` lines `<tag><f>-line<i>`, oldest first; the lines in that order. */
  protected def makeInput(inputDir: String, files: Int, lines: Int, tag: String = "f", firstFile: Int = 0): Seq[String] = {
    val d = Files.createDirectories(Paths.get(inputDir))
    (firstFile until firstFile + files).flatMap { f =>
      val rows = (0 until lines).map(i => s"$tag$f-line$i")
      val file = d.resolve(s"$tag$f.txt")
      Files.write(file, rows.mkString("", "\n", "\n").getBytes(UTF_8))
      // the file source reads the oldest first
      Files.setLastModifiedTime(file, FileTime.fromMillis(1700000000000L + f * 10000L))
      rows
    }
  }

  /**
   * The lines of the files in `inputDir` as `value`, one file per micro-batch, each with its file's
   * name as `metadata` (`f0.txt` for `f0-line3`).
   */
  protected def lines(inputDir: String): DataFrame =
    spark.readStream.option("maxFilesPerTrigger", "1").text(inputDir)
      .selectExpr("cast(value as binary) as value", "cast(concat(substring_index(value, '-', 1), '.txt') as binary) as metadata")

  /** Starts a streaming write of [[lines]] into `queuePath` (AvailableNow unless a trigger is given). */
  protected def startSink(inputDir: String, queuePath: String, checkpoint: String, options: Map[String, String] = Map.empty,
      trigger: Trigger = Trigger.AvailableNow()): StreamingQuery =
    lines(inputDir).writeStream.format("osqueue").option("checkpointLocation", checkpoint).options(options).trigger(trigger)
      .start(queuePath)

  /** [[startSink]] run to its end; a failure is thrown. */
  protected def runSink(inputDir: String, queuePath: String, checkpoint: String, options: Map[String, String] = Map.empty)
      : StreamingQuery = {
    val q = startSink(inputDir, queuePath, checkpoint, options)
    try assert(q.awaitTermination(180000), "the AvailableNow sink query did not finish")
    finally if (q.isActive) q.stop()
    q
  }

  /** One `df.write` of `values` (one task) with `options`. */
  protected def batchWrite(queuePath: String, values: Seq[String], options: Map[String, String] = Map.empty): Unit = {
    val session = spark
    import session.implicits._
    values.toDF("value").coalesce(1).write.format("osqueue").mode("append").options(options).save(queuePath)
  }

  /** A batch read of the queue: (value, metadata) in queue order. */
  protected def readRows(queuePath: String, options: Map[String, String] = Map.empty): Seq[(String, String)] =
    spark.read.format("osqueue").options(options).load(queuePath).orderBy("sequence", "index").collect().toSeq
      .map(r => (text(r.getAs[Array[Byte]]("value")), Option(r.getAs[Array[Byte]]("metadata")).map(text).orNull))

  protected def readValues(queuePath: String, options: Map[String, String] = Map.empty): Seq[String] =
    readRows(queuePath, options).map(_._1)

  /** What a native consumer reads, acking (and so dequeuing) everything. */
  protected def nativeValues(queuePath: String): Seq[String] = {
    val consumer = new Consumer(ObjectStores.open(queuePath))
    try {
      consumer.initialize()
      Iterator.continually(consumer.nextBatch()).takeWhile(_.isDefined).map(_.get).flatMap { b =>
        consumer.ack(b.sequence)
        b.entries.map(text)
      }.toVector
    } finally consumer.close()
  }

  /** Every queued entry (all segments read). */
  protected def entries(queuePath: String): IndexedSeq[ManifestEntry] = {
    val store = ObjectStores.open(queuePath)
    try {
      val manifests = new ManifestStore(store, manifestKey)
      val snapshot = manifests.read()
      if (snapshot.version.isEmpty) IndexedSeq.empty else manifests.decode(snapshot).entries
    } finally store.close()
  }

  protected def nextSequence(queuePath: String): Long = {
    val store = ObjectStores.open(queuePath)
    try {
      val manifests = new ManifestStore(store, manifestKey)
      val snapshot = manifests.read()
      if (snapshot.version.isEmpty) 0L else manifests.head(snapshot).nextSequence
    } finally store.close()
  }

  /** Manifest entries whose batch file is gone. */
  protected def missingFiles(queuePath: String): Seq[String] =
    entries(queuePath).map(_.location).filterNot(l => Files.exists(Paths.get(queuePath).resolve(l)))

  /** Every batch file under `root` (data prefix and staging alike). */
  protected def batchFiles(root: String): Seq[Path] =
    if (!Files.exists(Paths.get(root))) Nil
    else {
      val s = Files.walk(Paths.get(root))
      try s.iterator().asScala.filter(_.toString.endsWith(".batch")).toVector
      finally s.close()
    }

  /** The sink writer state of `writerId`, if one was written. */
  protected def writerState(queuePath: String, writerId: String): Option[OsqueueSinkCommitter.WriterState] = {
    val key = OsqueueSinkCommitter.stateKey(manifestKey, writerId)
    val file = Paths.get(queuePath).resolve(key)
    if (Files.exists(file)) Some(OsqueueSinkCommitter.decodeState(key, Files.readAllBytes(file))) else None
  }

  /** Writer states written under the queue (lock files aside). */
  protected def writerStateCount(queuePath: String): Int = {
    val d = Paths.get(queuePath).resolve(manifestKey + ".writers")
    if (!Files.exists(d)) 0
    else {
      val s = Files.list(d)
      try s.iterator().asScala.count(!_.getFileName.toString.startsWith("."))
      finally s.close()
    }
  }

  /** The connector's test-only fault hook (see `OsqueueSinkFaults`), set in this JVM while `body` runs. */
  protected def withFault[T](kind: String, point: String)(body: => T): T = {
    val key = s"osqueue.test.$kind"
    System.setProperty(key, point)
    try body
    finally System.clearProperty(key)
  }

  /** The messages of `e` and its causes, for matching an error however Spark wrapped it. */
  protected def messages(e: Throwable): String =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).take(20).map(t => s"${t.getClass.getName}: ${t.getMessage}")
      .mkString("\n")

  /** Runs `body`, which must fail; the messages of the failure and its causes. */
  protected def failure(body: => Any): String = {
    val e = intercept[Throwable](body)
    messages(e)
  }

  protected def text(bytes: Array[Byte]): String = new String(bytes, UTF_8)
}
