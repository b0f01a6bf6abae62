package osqueue.spark

import java.io.{ByteArrayOutputStream, PrintStream}
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import javax.tools.ToolProvider
import org.scalatest.funsuite.AnyFunSuite

import osqueue.testing.RepoFiles

/**
 * The benchmark harness runs the Java programs in bench/jvm with java's source launcher, outside sbt, and Java
 * gets no Scala default arguments: a new constructor or case-class field breaks them silently
 * until that benchmark runs. Compiled here against the core and Spark (the newest line's test classpath), so the quick tier sees it.
 */
class BenchProgramsCompileSuite extends AnyFunSuite {
  private val sources =
    Files.list(RepoFiles.root.resolve("bench/jvm")).iterator().asScala.filter(_.toString.endsWith(".java")).toSeq.sorted

  test("should find the bench programs") {
    assert(sources.size >= 4, sources)
  }

  for (source <- sources) {
    test(s"${source.getFileName} compiles against the core and Spark") {
      val javac = ToolProvider.getSystemJavaCompiler
      assume(javac != null, "needs a JDK (javac), not a JRE")
      val out = Files.createTempDirectory("bench-javac")
      val errors = new ByteArrayOutputStream()
      val args = Seq("-proc:none", "-cp", System.getProperty("java.class.path"), "-d", out.toString, source.toString)
      val rc =
        try javac.run(null, null, new PrintStream(errors), args: _*)
        finally Files.walk(out).sorted(java.util.Comparator.reverseOrder()).forEach(p => Files.delete(p))
      assert(rc == 0, s"${source.getFileName}:\n${errors.toString.takeRight(2000)}")
    }
  }
}
