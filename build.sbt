// osqueue: the protocol core (no Spark) and the Spark DataSource V2 connector.
// Versions: Spark/Scala follow the pinned pyspark (see pyproject.toml and docs/adr/0001).

val osqueueVersion = {
  val src = IO.read(file("python/osqueue/_version.py"))
  """__version__\s*=\s*"([^"]+)"""".r.findFirstMatchIn(src).map(_.group(1))
    .getOrElse(sys.error("cannot read __version__ from python/osqueue/_version.py"))
}

val awsSdkVersion = "2.35.4"
val zstdJniVersion = "1.5.7-4"
val gcsSdkVersion = "2.50.0" // com.google.cloud:google-cloud-storage, in the osqueue-gcs artifact only
val scala212 = "2.12.18" // Spark 3.5's
val scala213 = "2.13.17"

// One connector build per Spark line (see project/SparkLine.scala), compiled against the line's x.y.0.
// The lines are written once, in python/osqueue/_spark_lines.py (the wheel reads it too); each has its
// project below (tests/python/test_spark_lines.py checks both).
val sparkLines = {
  val src = IO.read(file("python/osqueue/_spark_lines.py"))
  val fullScala = Map("2.12" -> scala212, "2.13" -> scala213)
  val lines = """\("(\d+\.\d+)", "(\d+\.\d+)"\)""".r.findAllMatchIn(src).map { m =>
    SparkLine(m.group(1), m.group(1) + ".0", fullScala(m.group(2)))
  }.toVector
  if (lines.isEmpty) sys.error("cannot read SPARK_LINES from python/osqueue/_spark_lines.py")
  lines
}
val newestLine = sparkLines.last

val scalatest = "org.scalatest" %% "scalatest" % "3.2.19" % Test

ThisBuild / organization := "io.github.osqueue"
ThisBuild / version := osqueueVersion
ThisBuild / scalaVersion := scala213
ThisBuild / Test / fork := true
// `publishBuildRepo`: every published module (the core per Scala version, the connector per Spark
// line, each with its fat `assembly` jar) into a Maven repository directory in the build, which the
// --packages tests resolve from.
val buildRepo = settingKey[File]("the Maven repository directory publishBuildRepo writes")
ThisBuild / buildRepo := (ThisBuild / baseDirectory).value / "target" / "maven-repo"
ThisBuild / publishTo := Some(MavenCache("osqueue-build-repo", (ThisBuild / buildRepo).value))
ThisBuild / publishMavenStyle := true
ThisBuild / licenses := Seq("Apache-2.0" -> url("https://www.apache.org/licenses/LICENSE-2.0"))
ThisBuild / description := "osqueue: a stateless object-storage queue, and its Spark connector"
addCommandAlias("publishBuildRepo",
  "core/publish; core_2_12/publish; spark/publish; azure/publish; azure_2_12/publish; gcs/publish; gcs_2_12/publish")
ThisBuild / Test / parallelExecution := false
ThisBuild / Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oD")

// The SDKs osqueue brings are relocated in every fat jar, so that they cannot clash with the AWS SDK
// (v1 or v2 bundle) of hadoop-aws or of a Databricks/EMR runtime on the same classpath. Spark already
// ships zstd-jni (JNI classes cannot be relocated), slf4j, Jackson and the Scala library.
val shadeRules = Seq(
  ShadeRule.rename("software.amazon.awssdk.**" -> "osqueue.shaded.awssdk.@1").inAll,
  ShadeRule.rename("software.amazon.eventstream.**" -> "osqueue.shaded.eventstream.@1").inAll,
  ShadeRule.rename("org.reactivestreams.**" -> "osqueue.shaded.reactivestreams.@1").inAll,
  ShadeRule.rename("com.github.f4b6a3.**" -> "osqueue.shaded.f4b6a3.@1").inAll
)
val fatJarSettings = Seq(
  assemblyPackageScala / assembleArtifact := false,
  assembly / assemblyExcludedJars := (assembly / fullClasspath).value.filter { f =>
    val n = f.data.getName
    n.startsWith("zstd-jni") || n.startsWith("slf4j-")
  },
  assembly / assemblyShadeRules := shadeRulesFor(scalaVersion.value),
  assembly / assemblyMergeStrategy := {
    case PathList("META-INF", "services", _*) => MergeStrategy.concat
    case PathList("META-INF", "versions", _*) => MergeStrategy.first
    case PathList("META-INF", xs @ _*) if xs.lastOption.exists(n => n.endsWith(".SF") || n.endsWith(".DSA") || n.endsWith(".RSA")) =>
      MergeStrategy.discard
    case PathList("META-INF", "MANIFEST.MF") => MergeStrategy.discard
    case PathList(ps @ _*) if ps.last == "module-info.class" => MergeStrategy.discard
    case PathList(ps @ _*) if ps.last.endsWith(".properties") || ps.last == "execution.interceptors" => MergeStrategy.first
    case PathList("codegen-resources", _*) => MergeStrategy.first
    case x => (assembly / assemblyMergeStrategy).value(x)
  },
  assembly / test := {}
)

// Java 17 bytecode for every line (Spark 4 needs 17; on Spark 3.5 runtimes that default to Java 8,
// such as Databricks 14.3/15.4, Java 17 must be selected: see README).
def javaRelease(scala: String): String = "17"
def compileSettings(scala: String) = Seq(
  scalaVersion := scala,
  Compile / packageDoc / publishArtifact := false, // scaladoc would double the publish time
  javacOptions ++= Seq("--release", javaRelease(scala)),
  scalacOptions ++= Seq("-release", javaRelease(scala), "-deprecation", "-feature", "-unchecked", "-Xlint:-unused,_")
)

// Scala 2.12 lacks scala.jdk.CollectionConverters: the scala-collection-compat backport gives it to
// the shared sources, and src/main/scala-2.12 the few other 2.13 methods they use.
def scalaCompat(scala: String): Seq[ModuleID] =
  if (scala.startsWith("2.12")) Seq("org.scala-lang.modules" %% "scala-collection-compat" % "2.7.0") else Nil
// In a 2.12 fat jar the backports are relocated too: a runtime may have another scala-collection-compat.
def shadeRulesFor(scala: String) = shadeRules ++ (
  if (scala.startsWith("2.12")) Seq(
    ShadeRule.rename("scala.jdk.**" -> "osqueue.shaded.scalajdk.@1").inAll,
    ShadeRule.rename("scala.collection.compat.**" -> "osqueue.shaded.scalacompat.@1").inAll)
  else Nil)

def coreSettings(scala: String) = compileSettings(scala) ++ Seq(
  name := "osqueue-core",
  libraryDependencies ++= Seq(
    // Spark ships zstd-jni (JNI classes cannot be relocated): provided, so --packages brings no second copy.
    "com.github.luben" % "zstd-jni" % zstdJniVersion % Provided,
    "com.github.f4b6a3" % "ulid-creator" % "5.2.3",
    "software.amazon.awssdk" % "s3" % awsSdkVersion exclude ("software.amazon.awssdk", "netty-nio-client") exclude (
      "software.amazon.awssdk", "apache-client"),
    "software.amazon.awssdk" % "url-connection-client" % awsSdkVersion,
    "org.slf4j" % "slf4j-api" % "2.0.17" % Provided,
    "org.slf4j" % "slf4j-simple" % "2.0.17" % Test,
    "com.fasterxml.jackson.core" % "jackson-databind" % "2.20.0" % Test,
    "org.scalatestplus" %% "scalacheck-1-18" % "3.2.19.0" % Test,
    scalatest
  ) ++ scalaCompat(scala),
  // Tests that talk to a real S3 server get its launcher from the environment (see tests/s3).
  Test / envVars ++= sys.env.filter { case (k, _) => k.startsWith("OSQUEUE_") },
  assembly / assemblyJarName := s"osqueue-core-assembly_${CrossVersion.binaryScalaVersion(scala)}-${osqueueVersion}.jar"
) ++ fatJarSettings

// The fat jar is published too, as the `assembly` classifier (for cluster libraries).
val publishAssembly = Seq(
  Compile / assembly / artifact := (Compile / assembly / artifact).value.withClassifier(Some("assembly"))
) ++ addArtifact(Compile / assembly / artifact, assembly)

// The protocol core, Scala 2.13 (the full JVM suite runs here) ...
lazy val core = (project in file("jvm/core")).settings(coreSettings(scala213))

// ... and the same sources for Scala 2.12 (Spark 3.5's default Scala), built into its own target.
lazy val core_2_12 = Project("core_2_12", file("jvm/core"))
  .settings(coreSettings(scala212))
  .settings(
    target := baseDirectory.value / "target" / "cross-2.12",
    Test / sources := Nil, // the suite runs on 2.13; the Spark 3.5/2.12 line suite covers this build
    // The command-line tool (Scala 2.13 string patterns) ships in the 2.13 build only.
    Compile / unmanagedSources / excludeFilter := HiddenFileFilter || "QueueTool.scala",
    publish / skip := false
  )

// A cloud store's artifact (osqueue-azure_<scala>, osqueue-gcs_<scala>): its own, so that its SDK grows
// neither the core nor the connector. The published jar IS the relocated fat jar, and its POM lists no
// dependencies: `--packages io.github.osqueue:osqueue-<store>_<scala>:<version>`
// (configure_spark_with_osqueue(stores=[...])) brings one self-contained jar, never an unrelocated SDK
// next to Spark's Jackson/Netty. The core is provided (the connector brings it), and so are what
// Spark ships (zstd-jni, slf4j, the Scala library).
def storeArtifactSettings(rules: Seq[com.eed3si9n.jarjarabrams.ShadeRule]) = fatJarSettings ++ Seq(
  assembly / assemblyShadeRules := rules,
  assembly / assemblyExcludedJars := (assembly / fullClasspath).value.filter { f =>
    val n = f.data.getName
    n.startsWith("zstd-jni") || n.startsWith("slf4j-") || n.startsWith("scala-")
  },
  Compile / packageBin := assembly.value,
  pomPostProcess := { (node: _root_.scala.xml.Node) =>
    new _root_.scala.xml.transform.RuleTransformer(new _root_.scala.xml.transform.RewriteRule {
      override def transform(n: _root_.scala.xml.Node): Seq[_root_.scala.xml.Node] = if (n.label == "dependencies") Nil else n
    }).transform(node).head
  }
)

// The Azure Blob Storage / ADLS Gen2 store (abfss://, wasbs://): the Azure SDK, its HTTP client and
// their Jackson/Reactor/MSAL are relocated under osqueue.shaded.azure, so they cannot clash with
// hadoop-azure's or a Databricks runtime's.
val azureBlobVersion = "12.33.0"
val azureIdentityVersion = "1.18.1"
val azureShadeRules = Seq("com.azure", "com.microsoft.aad", "com.microsoft.azure", "com.fasterxml.jackson", "reactor",
  "org.reactivestreams", "com.nimbusds", "net.minidev", "net.jcip", "com.github.stephenc", "org.objectweb.asm",
  "com.ctc.wstx", "org.codehaus.stax2", "io.netty").map(p => ShadeRule.rename(s"$p.**" -> s"osqueue.shaded.azure.$p.@1").inAll)
def azureSettings(scala: String) = compileSettings(scala) ++ Seq(
  name := "osqueue-azure",
  libraryDependencies ++= Seq(
    // The JDK's own HTTP client instead of the SDK's default Netty one (Spark ships another Netty).
    "com.azure" % "azure-storage-blob" % azureBlobVersion exclude ("com.azure", "azure-core-http-netty"),
    "com.azure" % "azure-core-http-jdk-httpclient" % "1.0.4",
    // OAuth client credentials and the default credential chain. Its token-cache persistence
    // (JNA, native code that cannot be relocated) is not used.
    "com.azure" % "azure-identity" % azureIdentityVersion exclude ("com.azure", "azure-core-http-netty")
      exclude ("com.microsoft.azure", "msal4j-persistence-extension") exclude ("net.java.dev.jna", "jna-platform") exclude (
        "net.java.dev.jna", "jna"),
    "com.github.luben" % "zstd-jni" % zstdJniVersion % Provided,
    "org.slf4j" % "slf4j-api" % "2.0.17" % Provided,
    "org.slf4j" % "slf4j-simple" % "2.0.17" % Test,
    scalatest
  ),
  Test / envVars ++= sys.env.filter { case (k, _) => k.startsWith("OSQUEUE_") },
  assembly / assemblyJarName := s"osqueue-azure-assembly_${CrossVersion.binaryScalaVersion(scala)}-${osqueueVersion}.jar"
) ++ storeArtifactSettings(azureShadeRules)

lazy val azure = (project in file("jvm/azure"))
  .dependsOn(core % "provided->compile;test->test")
  .settings(azureSettings(scala213))
lazy val azure_2_12 = Project("azure_2_12", file("jvm/azure"))
  .dependsOn(core_2_12 % "provided->compile")
  .settings(azureSettings(scala212))
  .settings(target := baseDirectory.value / "target" / "cross-2.12", Test / sources := Nil)

/** The connector for one Spark line: the shared sources plus those of the line, and its artifact. */
def sparkLineProject(l: SparkLine, coreDep: ClasspathDep[ProjectReference], full: Boolean): Project =
  Project(l.id, file("jvm/spark"))
    .dependsOn(coreDep)
    .settings(
      name := l.artifact,
      moduleName := l.artifact, // as written: sbt would turn "3.5" into "3-5"
      target := baseDirectory.value / "target" / s"line-${l.dir}",
      libraryDependencies ++= Seq(
        "org.apache.spark" %% "spark-sql" % l.sparkVersion % Provided,
        scalatest
      ),
      // Where the Spark API differs: src/main/spark-<major>.x (e.g. spark-4.x), then src/main/spark-<line>.
      // Real-time mode (SupportsRealTimeMode, Spark 4.1+): src/main/spark-4.1plus; older lines get the
      // micro-batch-only stream factory of src/main/spark-pre4.1.
      Compile / unmanagedSourceDirectories ++= Seq(s"spark-${l.line.takeWhile(_ != '.')}.x", s"spark-${l.line}",
        if (l.hasRealTimeMode) "spark-4.1plus" else "spark-pre4.1")
        .map(d => baseDirectory.value / "src" / "main" / d / "scala"),
      // The line's identity, for SparkVersionCheck: which Spark/Scala it is for and what to use instead.
      Compile / sourceGenerators += Def.task {
        val out = (Compile / sourceManaged).value / "osqueue" / "spark" / "BuiltFor.scala"
        val lines = sparkLines.map(x => s"${x.line}_${x.scalaBinary}").mkString(",")
        IO.write(out,
          s"""package osqueue.spark
             |
             |/** Generated by build.sbt: the Spark line and Scala version of this connector build. */
             |private[spark] object BuiltFor {
             |  final val SparkLine = "${l.line}"
             |  final val ScalaBinary = "${l.scalaBinary}"
             |  final val Artifact = "${l.artifact}_${l.scalaBinary}"
             |  final val NewestLine = "${newestLine.line}"
             |  /** Every line built, as `<spark line>_<scala binary>`, comma-separated. */
             |  final val Lines = "$lines"
             |  final val Version = "$osqueueVersion"
             |}
             |""".stripMargin)
        Seq(out)
      }.taskValue,
      // Every line runs the StreamTest-style suite in src/test-lines; the newest also the full suite.
      Test / unmanagedSourceDirectories := Seq(baseDirectory.value / "src" / "test-lines" / "scala") ++
        (if (full) Seq(baseDirectory.value / "src" / "test" / "scala") else Nil),
      Test / javaOptions ++= Seq("-Xmx2g", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.util=ALL-UNNAMED",
        "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED", "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED"),
      // Spark's local dirs and the JVM's temp files in the line's target, deleted after the tests: a
      // forked JVM that dies cannot delete its own /tmp/spark-*. SPARK_LOCAL_DIRS, when set, still wins.
      Test / javaOptions ++= {
        val scratch = target.value / "spark-scratch"
        IO.createDirectory(scratch)
        Seq(s"-Djava.io.tmpdir=$scratch", s"-Dspark.local.dir=$scratch")
      },
      Test / testOptions += {
        val scratch = target.value / "spark-scratch"
        Tests.Cleanup(() => IO.delete(scratch))
      },
      assembly / assemblyJarName := s"${l.artifact}-assembly_${l.scalaBinary}-${osqueueVersion}.jar"
    )
    .settings(compileSettings(l.scala) ++ fatJarSettings ++ publishAssembly)

lazy val spark35_212 = sparkLineProject(sparkLines(0), core_2_12, full = false)
lazy val spark35_213 = sparkLineProject(sparkLines(1), core, full = false)
lazy val spark40_213 = sparkLineProject(sparkLines(2), core, full = false)
lazy val spark41_213 = sparkLineProject(sparkLines(3), core, full = false)
lazy val spark42_213 = sparkLineProject(newestLine, core % "compile->compile;test->test", full = true)
lazy val lineProjects = Seq[ProjectReference](spark35_212, spark35_213, spark40_213, spark41_213, spark42_213)

// `spark/assembly`, `spark/test`, `spark/package`: every line at once.
lazy val spark = (project in file("jvm/spark/target/all-lines"))
  .aggregate(lineProjects: _*)
  .disablePlugins(sbtassembly.AssemblyPlugin)
  .settings(publish / skip := true)

// The GCS store (gs://), packaged as Azure's (storeArtifactSettings): Google's SDK is relocated under
// osqueue.shaded.gcs, so that it cannot clash with the GCS connector's on Dataproc.
val gcsShadeRules = Seq("com.google", "io.grpc", "io.opencensus", "io.opentelemetry", "org.threeten", "io.perfmark",
  "com.fasterxml.jackson", "org.apache.http", "org.apache.commons.codec", "org.checkerframework", "javax.annotation", "org.codehaus.mojo",
  "org.json", "android.annotation")
  .map(p => ShadeRule.rename(s"$p.**" -> s"osqueue.shaded.gcs.$p.@1").inAll)
def gcsSettings(scala: String) = compileSettings(scala) ++ Seq(
  name := "osqueue-gcs",
  libraryDependencies ++= Seq(
    // HTTP (JSON API) transport only: the gRPC transport's native, unrelocatable pieces stay out.
    ("com.google.cloud" % "google-cloud-storage" % gcsSdkVersion)
      .exclude("io.grpc", "grpc-netty-shaded").exclude("org.conscrypt", "conscrypt-openjdk-uber"),
    "org.slf4j" % "slf4j-api" % "2.0.17" % Provided,
    "org.slf4j" % "slf4j-simple" % "2.0.17" % Test,
    "com.github.luben" % "zstd-jni" % zstdJniVersion % Test,
    scalatest
  ),
  Test / envVars ++= sys.env.filter { case (k, _) => k.startsWith("OSQUEUE_") },
  assembly / assemblyJarName := s"osqueue-gcs-assembly_${CrossVersion.binaryScalaVersion(scala)}-${osqueueVersion}.jar"
) ++ storeArtifactSettings(gcsShadeRules)

lazy val gcs = (project in file("jvm/gcs"))
  .dependsOn(core % "provided->compile;test->test")
  .settings(gcsSettings(scala213))
lazy val gcs_2_12 = Project("gcs_2_12", file("jvm/gcs"))
  .dependsOn(core_2_12 % "provided->compile")
  .settings(gcsSettings(scala212))
  .settings(target := baseDirectory.value / "target" / "cross-2.12", Test / sources := Nil)

lazy val root = (project in file("."))
  .aggregate((Seq[ProjectReference](core, core_2_12, azure, azure_2_12, gcs, gcs_2_12) ++ lineProjects): _*)
  .disablePlugins(sbtassembly.AssemblyPlugin)
  .settings(name := "osqueue", publish / skip := true)
