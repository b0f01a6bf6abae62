package osqueue.tools

import java.nio.charset.StandardCharsets.UTF_8

import scala.concurrent.duration._

import osqueue.{OsqueueException, SystemClock}
import osqueue.consumer.{Consumer, ConsumerConfig}
import osqueue.format.{Compression, ManifestHead}
import osqueue.producer.{Producer, ProducerConfig}
import osqueue.store.ObjectStores

/**
 * A command-line driver of the JVM core, used by cross-language tests and benchmarks:
 *
 * {{{
 * QueueTool produce <uri> <tag> <count> [--per-call N] [--flush-ms N] [--compression zstd] [--sync true]
 *     [--keep-going true] [--segment-entries K] [--spool-dir D] [--durability local] [--print-returned true]
 *     [--commit-mode cooperative]
 *     [--opt k=v]...
 *                                           with --keep-going: one durable/failed line per entry, exit 3 if any failed;
 *                                           with --print-returned: each entry's index once its produce() returned
 *                                           (a spool's replay: `produce <uri> <tag> 0 --spool-dir D`)
 * QueueTool consume <uri> [--subscription S] [--fail-on-data-loss false] [--opt k=v]...
 *                                           prints "sequence<TAB>index<TAB>utf8 value" per entry, acks all;
 *                                           a range retention cut before it was read: "lost<TAB>first<TAB>count"
 * }}}
 *
 * Produced entries are `<tag>-<i>` with metadata `<tag>`; `--sync true` waits for each call to be
 * durable before the next (one manifest write each: maximum contention). Errors print one line and exit 2.
 */
object QueueTool {
  def main(args: Array[String]): Unit = {
    val exit =
      try { run(args.toList); 0 }
      catch {
        case e: OsqueueException => System.err.println(s"osqueue: error: ${e.getMessage}"); 2
        case e: IllegalArgumentException => System.err.println(s"osqueue: error: ${e.getMessage}"); 2
      }
    System.out.flush()
    sys.exit(exit)
  }

  private def run(args: List[String]): Unit = args match {
    case "produce" :: uri :: tag :: count :: rest =>
      val flags = parseFlags(rest)
      val config = ProducerConfig(
        flushInterval = flags.get("flush-ms").map(_.toLong.millis).getOrElse(20.millis),
        compression = flags.get("compression").map(Compression.parse("compression", _)).getOrElse(Compression.None),
        // a segmented manifest above K queued entries (docs/format.md §2.2); off unless given
        manifestSegmentEntries = flags.get("segment-entries").map(_.toInt).getOrElse(ManifestHead.DefaultSegmentEntries),
        spoolDir = flags.get("spool-dir"),
        durability = flags.getOrElse("durability", "queue"),
        commitMode = flags.getOrElse("commit-mode", "solo"))
      val perCall = flags.get("per-call").map(_.toInt).getOrElse(1)
      val store = ObjectStores.open(uri, storeOptions(rest))
      val producer = new Producer(store, config, SystemClock)
      val sync = flags.get("sync").contains("true")
      val printReturned = flags.get("print-returned").contains("true")
      if (flags.get("keep-going").contains("true")) {
        keepGoing(producer, tag, count.toInt, perCall, sync)
        store.close()
        return
      }
      val handles = (0 until count.toInt).grouped(perCall).map { is =>
        val h = producer.produce(is.map(i => s"$tag-$i".getBytes(UTF_8)), tag.getBytes(UTF_8))
        if (sync) h.awaitDurable(5.minutes)
        if (printReturned) { is.foreach(i => println(i)); Console.flush() }
        h
      }.toVector
      handles.foreach(_.awaitDurable(5.minutes))
      producer.close()
      store.close()
      println(s"produced ${count.toInt} entries")
    case "consume" :: uri :: rest =>
      val flags = parseFlags(rest)
      val store = ObjectStores.open(uri, storeOptions(rest))
      val config = ConsumerConfig(runGc = false, subscription = flags.get("subscription"),
        failOnDataLoss = !flags.get("fail-on-data-loss").contains("false"),
        onDataLoss = e => println(s"lost\t${e.first}\t${e.count}"))
      val consumer = new Consumer(store, config, SystemClock)
      consumer.initialize()
      Iterator.continually(consumer.nextBatch()).takeWhile(_.isDefined).flatten.foreach { b =>
        b.entries.zipWithIndex.foreach { case (v, i) => println(s"${b.sequence}\t$i\t${new String(v, UTF_8)}") }
        consumer.ack(b.sequence)
      }
      consumer.close()
      store.close()
    case _ =>
      throw new IllegalArgumentException(
        "usage: QueueTool produce <uri> <tag> <count> [--per-call N] [--flush-ms N] [--compression none|zstd] " +
          "[--sync true] [--keep-going true] [--segment-entries K] [--commit-mode solo|cooperative] [--opt k=v]... " +
          "| QueueTool consume <uri> [--subscription S] [--fail-on-data-loss false] [--opt k=v]...")
  }

  /**
   * `--keep-going true`: a failed handle does not stop the run. Prints per entry
   * "durable<TAB>sequence<TAB>location<TAB>value" or "failed<TAB>ErrorClass<TAB>value", then
   * "produced N entries, F failed"; exits 3 when some handle failed.
   */
  private def keepGoing(producer: Producer, tag: String, count: Int, perCall: Int, sync: Boolean): Unit = {
    def report(values: IndexedSeq[String], h: osqueue.producer.WriteHandle): Int =
      try {
        val d = h.awaitDurable(5.minutes)
        values.foreach(v => println(s"durable\t${d.sequence}\t${d.location}\t$v"))
        0
      } catch {
        case e: OsqueueException =>
          values.foreach(v => println(s"failed\t${e.getClass.getSimpleName}\t$v"))
          values.size
      }
    var failed = 0
    val pending = Vector.newBuilder[(IndexedSeq[String], osqueue.producer.WriteHandle)]
    (0 until count).grouped(perCall).foreach { is =>
      val values = is.map(i => s"$tag-$i")
      val h = producer.produce(values.map(_.getBytes(UTF_8)), tag.getBytes(UTF_8))
      if (sync) failed += report(values, h) else pending += (values -> h)
    }
    pending.result().foreach { case (values, h) => failed += report(values, h) }
    try producer.close()
    catch { case e: OsqueueException => System.err.println(s"osqueue: close: ${e.getMessage}") }
    println(s"produced $count entries, $failed failed")
    System.out.flush()
    if (failed > 0) sys.exit(3)
  }

  private def parseFlags(args: List[String]): Map[String, String] =
    args.sliding(2, 2).collect { case s"--$k" :: v :: Nil if k != "opt" => k -> v }.toMap

  private def storeOptions(args: List[String]): Map[String, String] =
    args.sliding(2, 2).collect { case "--opt" :: kv :: Nil =>
      val (k, v) = kv.span(_ != '=')
      k -> v.drop(1)
    }.toMap
}
