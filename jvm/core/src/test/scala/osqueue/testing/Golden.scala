package osqueue.testing

import java.nio.file.{Files, Path, Paths}

/** Locates repository files (golden vectors, scripts) from the test's working directory. */
object RepoFiles {
  lazy val root: Path = {
    var dir = Paths.get("").toAbsolutePath
    while (dir != null && !Files.exists(dir.resolve("build.sbt"))) dir = dir.getParent
    require(dir != null, "cannot find the repository root (build.sbt) above the working directory")
    dir
  }
  def golden: Path = root.resolve("tests/golden")
}
