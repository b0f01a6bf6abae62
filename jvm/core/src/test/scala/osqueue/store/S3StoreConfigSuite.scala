package osqueue.store

import java.net.URI

import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import osqueue.InvalidConfigException

/** Reading the `fs.s3a.*` options into an [[S3StoreConfig]]. */
class S3StoreConfigSuite extends AnyFunSuite {
  private def read(options: (String, String)*): S3StoreConfig = S3StoreConfig.fromOptions(options.toMap, "b", env = Map.empty)

  test("should default to AWS with the SDK's region and credentials chains") {
    assert(read() === S3StoreConfig())
  }

  test("should read a full set of options, with or without the spark.hadoop. prefix") {
    val c = read(
      "spark.hadoop.fs.s3a.endpoint" -> "http://127.0.0.1:9000",
      "fs.s3a.endpoint.region" -> "eu-west-1",
      "fs.s3a.access.key" -> "AK",
      "spark.hadoop.fs.s3a.secret.key" -> "SK",
      "fs.s3a.session.token" -> "TOK",
      "fs.s3a.path.style.access" -> "TRUE",
      "fs.s3a.connection.establish.timeout" -> "5s",
      "fs.s3a.connection.timeout" -> "200s",
      "fs.s3a.connection.request.timeout" -> "60000")
    assert(c === S3StoreConfig(
      endpoint = Some(URI.create("http://127.0.0.1:9000")),
      region = Some("eu-west-1"),
      credentials = Some(S3Credentials("AK", "SK", Some("TOK"))),
      pathStyleAccess = true,
      connectTimeout = 5.seconds,
      socketTimeout = 200.seconds,
      requestTimeout = Some(60.seconds)))
    assert(!c.toString.contains("SK") && !c.toString.contains("TOK"), "secrets are not printed")
  }

  test("should prefer the plain key, then per-bucket options over global ones") {
    assert(read("fs.s3a.region" -> "a", "spark.hadoop.fs.s3a.region" -> "b").region === Some("a"))
    assert(read("fs.s3a.region" -> "a", "fs.s3a.bucket.b.region" -> "c").region === Some("c"))
    assert(read("fs.s3a.endpoint.region" -> "e", "fs.s3a.region" -> "a").region === Some("e"))
  }

  test("should add https to a bare endpoint unless SSL is disabled") {
    assert(read("fs.s3a.endpoint" -> "s3.example.com").endpoint === Some(URI.create("https://s3.example.com")))
    assert(read("fs.s3a.endpoint" -> "minio:9000", "fs.s3a.connection.ssl.enabled" -> "false").endpoint === Some(
      URI.create("http://minio:9000")))
    assert(read("fs.s3a.endpoint" -> "").endpoint === None, "Hadoop's empty default means AWS")
  }

  test("should take the region from AWS_REGION, else us-east-1, when only an endpoint is set") {
    val opts = Map("fs.s3a.endpoint" -> "http://localhost:4566")
    assert(S3StoreConfig.fromOptions(opts, env = Map("AWS_REGION" -> "ap-south-1")).region === Some("ap-south-1"))
    assert(S3StoreConfig.fromOptions(opts, env = Map.empty).region === Some("us-east-1"))
  }

  test("should parse Hadoop duration forms") {
    val cases =
      Map("60000" -> 60.seconds, "200s" -> 200.seconds, "5m" -> 5.minutes, "1h" -> 1.hour, "250ms" -> 250.millis, " 2S " -> 2.seconds)
    for ((v, d) <- cases) assert(S3StoreConfig.parseDuration("o", v) === d, v)
    assert(read("fs.s3a.connection.request.timeout" -> "0").requestTimeout === None, "0 disables the request timeout")
  }

  test("should read the retries per request from fs.s3a.attempts.maximum (S3A counts retries)") {
    assert(read().maxAttempts === 3)
    assert(read("fs.s3a.attempts.maximum" -> "7").maxAttempts === 8)
    assert(read("fs.s3a.attempts.maximum" -> "0").maxAttempts === 1)
  }

  test("should reject invalid values naming the option and the value") {
    val bad = Seq(
      "fs.s3a.connection.timeout" -> "soon",
      "fs.s3a.connection.request.timeout" -> "-5s",
      "fs.s3a.connection.timeout" -> "99999999999999999999",
      "fs.s3a.path.style.access" -> "yes",
      "fs.s3a.connection.ssl.enabled" -> "1",
      "fs.s3a.endpoint" -> "ftp://host",
      "fs.s3a.endpoint" -> "http://",
      "fs.s3a.attempts.maximum" -> "-1",
      "fs.s3a.attempts.maximum" -> "many")
    for ((k, v) <- bad) {
      val e = intercept[InvalidConfigException](read(k -> v))
      assert(e.option === k && e.value === v && e.getMessage.contains(v), e.getMessage)
    }
  }

  test("should require both keys of static credentials") {
    assert(intercept[InvalidConfigException](read("fs.s3a.access.key" -> "AK")).option === "fs.s3a.secret.key")
    assert(intercept[InvalidConfigException](read("fs.s3a.secret.key" -> "SK")).option === "fs.s3a.access.key")
  }

  test("should accept the standard credential providers equivalent to ours, including Hadoop's default list") {
    val hadoopDefault = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider,\n" +
      " org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider, " +
      "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider," +
      "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider"
    assert(read("fs.s3a.aws.credentials.provider" -> hadoopDefault) === S3StoreConfig())
    assert(read("spark.hadoop.fs.s3a.aws.credentials.provider" ->
      "com.amazonaws.auth.InstanceProfileCredentialsProvider").credentials === None)
  }

  test("should refuse a credential provider it cannot honour, naming the option and the class") {
    val assumed = "org.apache.hadoop.fs.s3a.auth.AssumedRoleCredentialProvider"
    val e = intercept[InvalidConfigException](read(
        "fs.s3a.aws.credentials.provider" -> s"org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider,$assumed"))
    assert(e.option == "fs.s3a.aws.credentials.provider")
    assert(e.getMessage.contains(s"unsupported: $assumed") && !e.getMessage.contains("unsupported: org.apache.hadoop.fs.s3a.Simple"))
    val perBucket = intercept[InvalidConfigException](read(
        "fs.s3a.bucket.b.aws.credentials.provider" -> "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"))
    assert(perBucket.getMessage.contains("AnonymousAWSCredentialsProvider"))
  }
}
