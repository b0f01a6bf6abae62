// osqueue: the protocol core (no Spark) and the Spark DataSource V2 connector.
// Versions: Spark/Scala follow the pinned pyspark (see pyproject.toml and docs/adr/0001).

val osqueueVersion = {
  val src = IO.read(file("python/osqueue/_version.py"))
  """__version__\s*=\s*"([^"]+)"""".r.findFirstMatchIn(src).map(_.group(1))
    .getOrElse(sys.error("cannot read __version__ from python/osqueue/_version.py"))
}

val sparkVersion = "4.1.3"
val awsSdkVersion = "2.35.4"
val zstdJniVersion = "1.5.7-4"

ThisBuild / organization := "io.github.osqueue"
ThisBuild / version := osqueueVersion
ThisBuild / scalaVersion := "2.13.17"
ThisBuild / javacOptions ++= Seq("--release", "17")
ThisBuild / scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature", "-unchecked", "-Xlint:-unused,_")
ThisBuild / Test / fork := true
ThisBuild / Test / parallelExecution := false
ThisBuild / Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oD")

val scalatest = "org.scalatest" %% "scalatest" % "3.2.19" % Test

lazy val core = (project in file("jvm/core"))
  .settings(
    name := "osqueue-core",
    libraryDependencies ++= Seq(
      "com.github.luben" % "zstd-jni" % zstdJniVersion,
      "com.github.f4b6a3" % "ulid-creator" % "5.2.3",
      "software.amazon.awssdk" % "s3" % awsSdkVersion exclude ("software.amazon.awssdk", "netty-nio-client") exclude ("software.amazon.awssdk", "apache-client"),
      "software.amazon.awssdk" % "url-connection-client" % awsSdkVersion,
      "org.slf4j" % "slf4j-api" % "2.0.17" % Provided,
      "org.slf4j" % "slf4j-simple" % "2.0.17" % Test,
      "com.fasterxml.jackson.core" % "jackson-databind" % "2.20.0" % Test,
      "org.scalatestplus" %% "scalacheck-1-18" % "3.2.19.0" % Test,
      scalatest
    ),
    // Tests that talk to a real S3 server get its launcher from the environment (see tests/s3).
    Test / envVars ++= sys.env.filter { case (k, _) => k.startsWith("OSQUEUE_") }
  )

lazy val spark = (project in file("jvm/spark"))
  .dependsOn(core % "compile->compile;test->test")
  .settings(
    name := "osqueue-spark",
    libraryDependencies ++= Seq(
      "org.apache.spark" %% "spark-sql" % sparkVersion % Provided,
      scalatest
    ),
    // The jar shipped in the Python wheel and to --jars: core + connector + relocated SDKs.
    // Spark already ships zstd-jni (JNI classes cannot be relocated), slf4j and Jackson.
    assemblyPackageScala / assembleArtifact := false, // Spark ships the Scala library
    assembly / assemblyJarName := s"osqueue-spark_2.13-${osqueueVersion}.jar",
    assembly / assemblyExcludedJars := (assembly / fullClasspath).value.filter { f =>
      val n = f.data.getName
      n.startsWith("zstd-jni") || n.startsWith("slf4j-")
    },
    assembly / assemblyShadeRules := Seq(
      ShadeRule.rename("software.amazon.awssdk.**" -> "osqueue.shaded.awssdk.@1").inAll,
      ShadeRule.rename("software.amazon.eventstream.**" -> "osqueue.shaded.eventstream.@1").inAll,
      ShadeRule.rename("org.reactivestreams.**" -> "osqueue.shaded.reactivestreams.@1").inAll,
      ShadeRule.rename("com.github.f4b6a3.**" -> "osqueue.shaded.f4b6a3.@1").inAll
    ),
    assembly / assemblyMergeStrategy := {
      case PathList("META-INF", "services", _*) => MergeStrategy.concat
      case PathList("META-INF", "versions", _*) => MergeStrategy.first
      case PathList("META-INF", xs @ _*) if xs.lastOption.exists(n => n.endsWith(".SF") || n.endsWith(".DSA") || n.endsWith(".RSA")) => MergeStrategy.discard
      case PathList("META-INF", "MANIFEST.MF") => MergeStrategy.discard
      case PathList(ps @ _*) if ps.last == "module-info.class" => MergeStrategy.discard
      case PathList(ps @ _*) if ps.last.endsWith(".properties") || ps.last == "execution.interceptors" => MergeStrategy.first
      case PathList("codegen-resources", _*) => MergeStrategy.first
      case x => (assembly / assemblyMergeStrategy).value(x)
    },
    assembly / test := {}
  )

lazy val root = (project in file("."))
  .aggregate(core, spark)
  .settings(name := "osqueue", publish / skip := true)
