package osqueue.queue

import java.nio.file.Files

import org.scalatest.funsuite.AnyFunSuite

import osqueue.SystemClock
import osqueue.metrics.{MetricNames, MetricsRegistry}
import osqueue.store.{CasOutcome, InMemoryStore, LocalFileSystemStore, ObjectStore, ObjectVersion}
import osqueue.testing.FaultInjectingStore
import osqueue.testing.FaultInjectingStore.Fault

/** The CAS register under the manifest, on the in-memory and the local file store. */
class CasObjectSuite extends AnyFunSuite {
  private val key = "ingest/manifest.writers/w"
  private val stores: Seq[(String, () => ObjectStore)] = Seq(
    "in-memory" -> (() => InMemoryStore.fresh()),
    "local" -> (() => new LocalFileSystemStore(Files.createTempDirectory("osq-cas"))))
  private val fastRetry = RetryPolicy(baseDelayMs = 0, maxDelayMs = 0, maxAttempts = 5)

  for ((name, open) <- stores) {
    test(s"$name: should read a missing object as its absent bytes at no version, then create it once") {
      val obj = new CasObject(open(), key, absent = Array[Byte](9))
      val missing = obj.read()
      assert(missing.version.isEmpty && missing.raw.toSeq == Seq[Byte](9))
      assert(obj.write(Array[Byte](1), missing).isInstanceOf[CasOutcome.Written])
      val created = obj.read()
      assert(created.raw.toSeq == Seq[Byte](1) && created.version.isDefined)
      // A second create from the same (absent) snapshot loses: the object exists now.
      assert(obj.write(Array[Byte](2), missing) == CasOutcome.PreconditionFailed)
      assert(obj.read().raw.toSeq == Seq[Byte](1))
    }

    test(s"$name: should overwrite only the version it read") {
      val obj = new CasObject(open(), key)
      assert(obj.write(Array[Byte](1), obj.read()).isInstanceOf[CasOutcome.Written])
      val first = obj.read()
      val written = obj.write(Array[Byte](2), first)
      assert(written.isInstanceOf[CasOutcome.Written])
      assert(obj.write(Array[Byte](3), first) == CasOutcome.PreconditionFailed, "a stale snapshot must conflict")
      val now = obj.read()
      assert(now.raw.toSeq == Seq[Byte](2) && now.version.contains(written.asInstanceOf[CasOutcome.Written].version))
      assert(obj.readIfChanged(now.version.get).isEmpty, "unchanged: no bytes")
      assert(obj.readIfChanged(first.version.get).map(_.raw.toSeq).contains(Seq[Byte](2)))
    }

    test(s"$name: a CasLoop should settle a create of unknown outcome by re-reading the object") {
      val inner = open()
      val store = new FaultInjectingStore(inner, (_, n) => if (n == 0) Fault.ApplyThenError else Fault.None)
      val loop = new CasLoop(new CasObject(store, key), fastRetry, SystemClock, CasCounters.uncounted)
      var steps = 0
      val result = loop.run[String] { (snapshot, _) =>
        steps += 1
        if (snapshot.version.isDefined) CasStep.Done(new String(snapshot.raw, "UTF-8"))
        else CasStep.Write("mine".getBytes("UTF-8"), () => "written")
      }
      assert(store.injected.get() == 1, "the fault did not fire")
      assert(result == "mine" && steps == 2, "the re-read found the create that landed")
      assert(inner.get(key).map(o => new String(o.bytes, "UTF-8")).contains("mine"))
    }

    test(s"$name: a CasLoop should re-read after a conflict and count it on the counters it was given") {
      val inner = open()
      assert(inner.putIfAbsent(key, Array[Byte](1)).isInstanceOf[CasOutcome.Written])
      // Another writer lands between this loop's read and its write, once.
      var raced = false
      val racing = new FaultInjectingStore(inner, (_, _) => Fault.None) {
        override def putIfVersionMatches(k: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
          if (!raced) { raced = true; inner.put(k, Array[Byte](7)) }
          super.putIfVersionMatches(k, bytes, expected)
        }
      }
      val metrics = new MetricsRegistry
      val loop = new CasLoop(new CasObject(racing, key), fastRetry, SystemClock, CasCounters.manifest(metrics, "test"))
      val seen = loop.run[Seq[Byte]]((s, _) => CasStep.Write(Array[Byte](3), () => s.raw.toSeq))
      assert(seen == Seq[Byte](7), "the write that landed was based on the other writer's bytes")
      assert(inner.get(key).map(_.bytes.toSeq).contains(Seq[Byte](3)))
      assert(metrics.counterValue(MetricNames.ManifestConflicts, "role" -> "test") == 1)
      assert(metrics.counterValue(MetricNames.ManifestWrites, "role" -> "test") == 1)
    }
  }
}
