package osqueue.format

import java.nio.file.Files

import com.fasterxml.jackson.databind.ObjectMapper
import org.scalatest.funsuite.AnyFunSuite

import osqueue.testing.RepoFiles

/**
 * The writers section and writer-sequence records of cooperative commit (docs/format.md §2.1 type 4, §2.3,
 * docs/adr/0007 part 1): the JVM's solo appends must carry both byte for byte (tests/golden/head_v3_writers.bin,
 * described in intents.json); the cooperative committer's own cases are in osqueue.queue.CooperativeCommitSuite.
 */
class WritersSectionSuite extends AnyFunSuite {
  private val spec = new ObjectMapper().readTree(RepoFiles.golden.resolve("intents.json").toFile).get("head_v3_writers.bin")
  private val bytes = Files.readAllBytes(RepoFiles.golden.resolve("head_v3_writers.bin"))

  test("should decode a head with a writers section, its entries' records verified") {
    val h = ManifestHead.parse(bytes, "m")
    assert(h.version == 3 && h.nextSequence == spec.get("next_sequence").asLong && h.epoch == spec.get("epoch").asLong)
    assert(h.sections.opaque.map(_.sectionType) == Seq(4))
    val body = h.sections.opaque.head.body
    assert(body.length == 4 + 32 * spec.get("writers").size)
    h.tailEntries.foreach(e => BatchIntegrity.verifyEntry(e, "m"))
  }

  test("should carry the writers section and the type-4 records byte for byte through a solo append") {
    val h = ManifestHead.parse(bytes, "m")
    val (appended, first) = h.appended(Seq(NewEntry("ingest/x.batch", IndexedSeq.empty)), 2048, _ => fail("no seal"), _ => fail())
    val a = ManifestHead.parse(appended, "m")
    assert(first == h.nextSequence && a.sections.opaque.map(_.body.toSeq) == h.sections.opaque.map(_.body.toSeq))
    assert(a.tailEntries.take(2).map(_.extension.toSeq) == h.tailEntries.map(_.extension.toSeq))
  }
}
