package osqueue.producer

import java.nio.channels.{FileChannel, FileLock, OverlappingFileLockException}
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, NoSuchFileException, Path, StandardCopyOption, StandardOpenOption}

import scala.collection.mutable
import scala.concurrent.duration._

import osqueue.{Clock, InvalidConfigException, QueueFullException, RandomSource, SystemRandomSource}
import osqueue.metrics.{MetricNames, MetricsRegistry}

/** One unsettled call: its record, its size against the cap, its file, its batch (None: none yet; -1: being batched). */
final class SpooledCall(val record: EntriesRecord, val size: Long, val path: Path, var batchNo: Option[Long] = None)

/** One unsettled batch: its (latest) BATCH record, the files that hold its records, its ATTEMPT records. */
final class SpooledBatch(var record: BatchRecord) {
  val paths: mutable.Set[Path] = mutable.Set.empty
  val attempts: mutable.ArrayBuffer[AttemptRecord] = mutable.ArrayBuffer.empty
}

/**
 * A producer's local spool (docs/adr/0006 part 2, docs/format.md §9; Python: `osqueue.producer.spool`):
 * the directory, its lock, the calls and batches it holds, the cap.
 *
 * {{{
 * <spoolDir>/.lock        POSIX record lock (fcntl, via FileChannel.tryLock), held while the producer lives
 * <spoolDir>/owner.json   {"version":1,"pid":…,"host":…,"startedAtMs":…}, for the error message
 * <spoolDir>/writer.id    16 random bytes, hex; written once, never changed
 * <spoolDir>/<20-digit first record no>.log   the log ([[SpoolLog]])
 * }}}
 *
 * A call (one `produce()`) is settled once its batch is LANDED or it was DROPPED; a log file whose
 * calls and batches are all settled is deleted (truncation). The cap counts the bytes of the
 * unsettled calls' records (`buffer.spool_bytes`): what a landing or a drop frees.
 *
 * Throws [[InvalidConfigException]] on `spoolDir` when another producer (of any process or language)
 * holds the directory, naming it, and [[osqueue.CorruptSpoolException]] when a log file is damaged in its middle.
 */
final class Spool(
    dir: Path,
    maxBytes: Long = Spool.DefaultMaxBytes,
    fullPolicy: String = "backpressure",
    fullTimeout: FiniteDuration = Spool.DefaultFullTimeout,
    clock: Clock,
    random: RandomSource = SystemRandomSource,
    metrics: MetricsRegistry = new MetricsRegistry,
    onDrop: Seq[Long] => Unit = _ => (),
    rotateBytes: Long = SpoolLog.DefaultRotateBytes) {
  if (maxBytes <= 0) throw new InvalidConfigException("spoolMaxBytes", maxBytes.toString, "must be a positive number of bytes")
  if (!Spool.FullPolicies.contains(fullPolicy))
    throw new InvalidConfigException("spoolFullPolicy", fullPolicy, "use 'backpressure' or 'drop_oldest'")
  if (fullTimeout < Duration.Zero)
    throw new InvalidConfigException("spoolFullTimeout", fullTimeout.toString, "must be >= 0")

  val directory: Path = dir.toAbsolutePath.normalize
  private val lock = new Object
  private val bytesGauge = metrics.gauge(MetricNames.SpoolBytes) // set on every call: looked up once
  private val ageGauge = metrics.gauge(MetricNames.SpoolOldestEntryAgeSeconds)
  Files.createDirectories(directory)
  private var lockChannel: FileChannel = _
  private var fileLock: FileLock = _
  takeLock()
  /** Unsettled calls and batches, in call / batch order. */
  private val calls = mutable.TreeMap.empty[Long, SpooledCall]
  private val batches = mutable.TreeMap.empty[Long, SpooledBatch]
  private var nextCall = 0L
  private var nextBatch = 0L
  private var liveBytes = 0L
  private val log = new SpoolLog(directory, rotateBytes)
  val writerId: String =
    try {
      val id = readWriterId()
      replay()
      id
    } catch { case e: Throwable => releaseLock(); throw e }

  // -- directory --

  private def takeLock(): Unit = {
    val heldHere = Spool.held.synchronized(!Spool.held.add(directory))
    if (heldHere) throw new InvalidConfigException("spoolDir", directory.toString, s"owned by ${owner()}")
    var channel: FileChannel = null
    try {
      channel = FileChannel.open(directory.resolve(".lock"), StandardOpenOption.READ, StandardOpenOption.WRITE,
        StandardOpenOption.CREATE)
      val taken =
        try channel.tryLock()
        catch { case _: OverlappingFileLockException => null }
      if (taken == null) throw new InvalidConfigException("spoolDir", directory.toString, s"owned by ${owner()}")
      val host =
        try java.net.InetAddress.getLocalHost.getHostName
        catch { case _: java.io.IOException => "unknown" }
      val json = s"""{"version": 1, "pid": ${ProcessHandle.current().pid()}, "host": "${host.replace("\\", "\\\\")
          .replace("\"", "\\\"")}", "startedAtMs": ${clock.nowMillis()}}"""
      Spool.atomicWrite(directory.resolve("owner.json"), json.getBytes(UTF_8))
      lockChannel = channel; fileLock = taken
    } catch {
      case e: Throwable =>
        if (channel != null) channel.close()
        Spool.held.synchronized(Spool.held.remove(directory))
        e match {
          case io: java.io.IOException =>
            throw new InvalidConfigException("spoolDir", directory.toString, s"cannot lock it: $io")
          case other => throw other
        }
    }
  }

  private def owner(): String =
    try {
      val text = new String(Files.readAllBytes(directory.resolve("owner.json")), UTF_8)
      def field(name: String, pattern: String): String =
        s""""$name"\\s*:\\s*$pattern""".r.findFirstMatchIn(text).map(_.group(1))
          .getOrElse(throw new IllegalArgumentException(name))
      s"pid ${field("pid", "(\\d+)")} on ${field("host", "\"([^\"]*)\"")} since ${field("startedAtMs", "(\\d+)")} " +
        "(epoch ms); another producer uses it"
    } catch {
      case _: java.io.IOException | _: IllegalArgumentException => "another producer (owner.json unreadable)"
    }

  private def readWriterId(): String = {
    val path = directory.resolve("writer.id")
    val existing =
      try Some(new String(Files.readAllBytes(path), UTF_8).trim)
      catch { case _: NoSuchFileException => None }
    existing match {
      case Some(text) if text.length == 32 && text.forall(c => Character.digit(c, 16) >= 0) => text
      case Some(text) if text.length % 2 != 0 || !text.forall(c => Character.digit(c, 16) >= 0) =>
        throw new InvalidConfigException("spoolDir", directory.toString, s"writer.id is not 16 bytes of hex: '$text'")
      case _ =>
        val bytes = new Array[Byte](16)
        random.nextBytes(bytes)
        val text = bytes.map(b => f"${b & 0xFF}%02x").mkString
        Spool.atomicWrite(path, text.getBytes(UTF_8))
        text
    }
  }

  private def releaseLock(): Unit = if (lockChannel != null) {
    try { fileLock.release(); lockChannel.close() }
    finally {
      lockChannel = null; fileLock = null
      Spool.held.synchronized(Spool.held.remove(directory))
    }
  }

  // -- replay --

  private def replay(): Unit = lock.synchronized {
    val landed = mutable.Set.empty[Long]
    val dropped = mutable.ArrayBuffer.empty[(Long, Long)]
    log.readAll().foreach {
      case (path, r: EntriesRecord) =>
        calls(r.callNo) = new SpooledCall(r, Spool.sizeOf(r), path)
        nextCall = math.max(nextCall, r.callNo + 1)
      case (path, r: BatchRecord) =>
        // re-named on replay (other bytes): the new name is the one to PUT
        val b = batches.getOrElseUpdate(r.batchNo, new SpooledBatch(r))
        b.record = r
        b.paths += path
        nextBatch = math.max(nextBatch, r.batchNo + 1)
      case (path, r: AttemptRecord) =>
        r.batchNos.foreach(n => batches.get(n).foreach { b => b.attempts += r; b.paths += path })
      case (_, r: LandedRecord) => landed ++= r.batchNos
      case (_, r: DroppedRecord) => dropped += ((r.firstCall, r.lastCall))
    }
    dropped.foreach { case (first, last) => (first to last).foreach(calls.remove) }
    batches.toSeq.foreach { case (n, b) =>
      (b.record.firstCall to b.record.lastCall).foreach(c => calls.get(c).foreach(_.batchNo = Some(n)))
      if (landed.contains(n)) settle(n)
    }
    liveBytes = calls.valuesIterator.map(_.size).sum
    gauges()
    truncate()
  }

  /** Batches named but not known to have landed, in batch order (replay's work). */
  def pendingBatches(): Seq[BatchRecord] = lock.synchronized(batches.valuesIterator.map(_.record).toSeq)

  /** Spooled calls in no batch, in call order (replay batches them again). */
  def unbatchedCalls(): Seq[EntriesRecord] =
    lock.synchronized(calls.valuesIterator.filter(_.batchNo.isEmpty).map(_.record).toSeq)

  def attemptsOf(batchNo: Long): Seq[AttemptRecord] =
    lock.synchronized(batches.get(batchNo).fold(Seq.empty[AttemptRecord])(_.attempts.toSeq))

  def batchCalls(batchNo: Long): Seq[EntriesRecord] = lock.synchronized {
    val b = batches(batchNo).record
    (b.firstCall to b.lastCall).flatMap(c => calls.get(c).map(_.record))
  }

  // -- the producer's steps --

  /**
   * Step 1: spools one call (cap first); returns (callNo, ticket): `sync(ticket)` makes it durable.
   * Throws [[QueueFullException]] with `backpressure` when the spool stayed full for `spoolFullTimeout`.
   */
  def appendEntries(entries: Seq[Array[Byte]], metadata: Array[Byte], timeMs: Long): (Long, Long) = lock.synchronized {
    val record = EntriesRecord(nextCall, timeMs, metadata, entries)
    val data = SpoolLog.encodeEntries(record.callNo, timeMs, metadata, entries)
    val size = data.length - 4L // Spool.sizeOf(record), the cap's measure, without another pass over the entries
    makeRoom(size)
    nextCall += 1
    val (ticket, path) = log.appendEncoded(data, 1)
    calls(record.callNo) = new SpooledCall(record, size, path)
    liveBytes += size
    gauges()
    (record.callNo, ticket)
  }

  def sync(ticket: Long): Unit = log.sync(ticket)

  private def fits(size: Long): Boolean = liveBytes == 0 || liveBytes + size <= maxBytes

  private def makeRoom(size: Long): Unit = {
    if (fits(size)) return
    if (fullPolicy == "drop_oldest") {
      val run = mutable.ArrayBuffer.empty[Long]
      val droppable = calls.valuesIterator.filter(_.batchNo.isEmpty)
      var stop = false
      while (!stop && droppable.hasNext) {
        val c = droppable.next()
        if (liveBytes + size <= maxBytes || (run.nonEmpty && c.record.callNo != run.last + 1)) stop = true
        else { run += c.record.callNo; liveBytes -= c.size }
      }
      if (run.nonEmpty) {
        log.write(Seq(DroppedRecord(run.head, run.last))) // fsync'd before the space is reused
        val entries = run.map(n => calls.remove(n).get.record.entries.size.toLong).sum
        metrics.counter(MetricNames.SpoolDroppedEntries).add(entries)
        gauges()
        onDrop(run.toSeq)
        truncate()
      }
    }
    if (fits(size)) return
    metrics.counter(MetricNames.SpoolFullWaits).increment()
    val deadline = clock.nanoTime() + fullTimeout.toNanos
    while (!fits(size)) {
      val left = deadline - clock.nanoTime()
      if (left <= 0)
        throw new QueueFullException(
          s"producer spool '$directory' is full: $liveBytes of spoolMaxBytes $maxBytes bytes wait for the store, " +
            s"and none were freed within spoolFullTimeout $fullTimeout (spoolFullPolicy=$fullPolicy)")
      lock.wait(math.max(1L, left / 1000000L))
    }
  }

  /** Marks the calls as about to be batched (so `drop_oldest` leaves them); the dropped ones of the range. */
  def claimBatch(firstCall: Long, lastCall: Long): Seq[Long] = lock.synchronized {
    val gone = (firstCall to lastCall).filterNot(calls.contains)
    (firstCall to lastCall).foreach(c => calls.get(c).foreach(_.batchNo = Some(-1L)))
    gone
  }

  /**
   * Step 2: names a batch of calls before its PUT; its batchNo. The record is not forced before the PUT:
   * the ATTEMPT record's force, before any manifest CAS that could carry the name, makes it durable
   * (docs/adr/0006 part 2).
   */
  def nameBatch(firstCall: Long, lastCall: Long, byteLength: Long, crc: Long, location: String): Long =
    lock.synchronized {
      val record = BatchRecord(nextBatch, firstCall, lastCall, byteLength, crc, location)
      nextBatch += 1
      val (_, path) = log.append(Seq(record))
      named(record, path)
      record.batchNo
    }

  def renameBatch(record: BatchRecord): Long = {
    val path = log.write(Seq(record))
    lock.synchronized(named(record, path))
    record.batchNo
  }

  private def named(record: BatchRecord, path: Path): Unit = {
    val b = batches.getOrElseUpdate(record.batchNo, new SpooledBatch(record))
    b.record = record
    b.paths += path
    (record.firstCall to record.lastCall).foreach(c => calls.get(c).foreach(_.batchNo = Some(record.batchNo)))
  }

  /** Step 4: before a manifest CAS that carries these batches (forced). */
  def recordAttempt(base: Long, batchNos: Seq[Long], locations: Seq[String]): Unit = {
    val record = AttemptRecord(base, batchNos, locations)
    val path = log.write(Seq(record))
    lock.synchronized(batchNos.foreach(n => batches.get(n).foreach { b => b.attempts += record; b.paths += path }))
  }

  /** Step 6: writes the LANDED record of batches in the manifest, not forced; its ticket (`sync` it, then `settleLanded`). */
  def appendLanded(firstSequence: Long, batchNos: Seq[Long]): Long = log.append(Seq(LandedRecord(firstSequence, batchNos)))._1

  /**
   * Once their LANDED record is on disk: the batches are settled, then truncation (step 7). Never before:
   * truncation must not unlink a file whose LANDED record could still be lost.
   */
  def settleLanded(batchNos: Seq[Long]): Unit = {
    lock.synchronized {
      batchNos.foreach(settle)
      gauges()
      truncate()
      lock.notifyAll()
    }
  }

  private def settle(batchNo: Long): Unit = batches.remove(batchNo).foreach { b =>
    (b.record.firstCall to b.record.lastCall).foreach(c => calls.remove(c).foreach(call => liveBytes -= call.size))
  }

  /** Deletes the oldest log files that hold nothing unsettled; rotates first when all is settled. */
  private def truncate(): Unit = {
    if (calls.isEmpty && batches.isEmpty) log.rotate()
    val needed = calls.valuesIterator.map(_.path).toSet ++ batches.valuesIterator.flatMap(_.paths)
    log.delete(log.logFiles.dropRight(1).takeWhile(p => !needed.contains(p)))
  }

  /** `buffer.spool_bytes` and `buffer.spool_oldest_entry_age_seconds` (0 when nothing waits). */
  private def gauges(): Unit = {
    bytesGauge.set(liveBytes)
    val age = calls.headOption.fold(0L) { case (_, c) => (clock.nowMillis() - c.record.ingestionTimeMs) / 1000 }
    ageGauge.set(math.max(0L, age))
  }

  def logFiles: Seq[Path] = log.logFiles

  def currentLiveBytes: Long = lock.synchronized(liveBytes)

  def close(): Unit = {
    log.close()
    releaseLock()
  }
}

object Spool {
  val DefaultMaxBytes: Long = 1L << 30
  val DefaultFullTimeout: FiniteDuration = 30.seconds
  val FullPolicies: Seq[String] = Seq("backpressure", "drop_oldest")

  /** FileChannel locks are per process: this excludes a second spool on a directory in this JVM. */
  private val held = mutable.Set.empty[Path]

  /** An ENTRIES record's bytes, as the cap counts them. */
  def sizeOf(r: EntriesRecord): Long = SpoolLog.Overhead + 20L + r.metadata.length + r.entries.map(4L + _.length).sum

  private[producer] def atomicWrite(path: Path, data: Array[Byte]): Unit = {
    val tmp = path.resolveSibling(path.getFileName.toString + ".tmp")
    val ch = FileChannel.open(tmp, StandardOpenOption.WRITE, StandardOpenOption.CREATE,
      StandardOpenOption.TRUNCATE_EXISTING)
    try {
      val buf = java.nio.ByteBuffer.wrap(data)
      while (buf.hasRemaining) ch.write(buf)
      ch.force(true)
    } finally ch.close()
    Files.move(tmp, path, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE)
  }
}
