package osqueue.store

import java.io.UncheckedIOException

import scala.jdk.CollectionConverters._
import scala.jdk.DurationConverters._

import software.amazon.awssdk.auth.credentials.{AwsBasicCredentials, AwsCredentialsProvider, AwsSessionCredentials, DefaultCredentialsProvider, StaticCredentialsProvider}
import software.amazon.awssdk.awscore.exception.AwsServiceException
import software.amazon.awssdk.awscore.retry.AwsRetryStrategy
import software.amazon.awssdk.core.checksums.{RequestChecksumCalculation, ResponseChecksumValidation}
import software.amazon.awssdk.core.client.config.ClientOverrideConfiguration
import software.amazon.awssdk.core.exception.SdkException
import software.amazon.awssdk.core.interceptor.{Context, ExecutionAttributes, ExecutionInterceptor}
import software.amazon.awssdk.core.sync.RequestBody
import software.amazon.awssdk.http.{SdkHttpClient, SdkHttpRequest}
import software.amazon.awssdk.http.urlconnection.UrlConnectionHttpClient
import software.amazon.awssdk.regions.Region
import software.amazon.awssdk.regions.providers.DefaultAwsRegionProviderChain
import software.amazon.awssdk.services.s3.{S3Client, S3Configuration}
import software.amazon.awssdk.services.s3.model.{DeleteObjectRequest, GetObjectRequest, ListObjectsV2Request, NoSuchBucketException, NoSuchKeyException, PutObjectRequest}

import osqueue.{InvalidConfigException, StoreException}

/**
 * An object store in an S3 bucket (or an S3-compatible server) under a key prefix, through the
 * AWS SDK v2 (relocated in the shipped jar).
 *
 * Versions are ETags. Conditional writes are S3's conditional PUTs (`If-None-Match: *`,
 * `If-Match: <etag>`); 412, 409 (ConditionalRequestConflict) and a 404 on If-Match mean the
 * condition failed. They go through a client with SDK retries disabled: a retried PUT whose first
 * attempt landed would come back as 412 and hide the success, so an unknown outcome surfaces as
 * a [[osqueue.StoreException]] and the queue resolves it by re-reading. All other operations keep
 * the SDK's retries. Every failure names the operation, the object and the endpoint.
 */
final class S3Store(val bucket: String, prefix: String, val config: S3StoreConfig) extends ObjectStore {
  if (bucket == null || bucket.isEmpty || bucket.contains("/"))
    throw new InvalidConfigException("path", s"s3://$bucket", "expected s3a://bucket/prefix")
  private val keyPrefix: String = {
    val p = Option(prefix).getOrElse("").stripPrefix("/").stripSuffix("/")
    if (p.nonEmpty) ObjectKeys.validate(p)
    p
  }
  /** What every key starts with in the bucket: "" or "prefix/". */
  private val rootPrefix = if (keyPrefix.isEmpty) "" else keyPrefix + "/"

  override val uri: String = if (keyPrefix.isEmpty) s"s3://$bucket" else s"s3://$bucket/$keyPrefix"

  private val where: String = config.endpoint match {
    case Some(e) => s"endpoint $e"
    case None => s"AWS S3${config.region.fold("")(r => s" ($r)")}"
  }

  private val http: SdkHttpClient = UrlConnectionHttpClient.builder()
    .connectionTimeout(config.connectTimeout.toJava)
    .socketTimeout(config.socketTimeout.toJava)
    .build()
  private val client = S3Store.buildClient(config, http, retries = true)
  private val casClient = S3Store.buildClient(config, http, retries = false)

  override def get(key: String): Option[VersionedObject] = {
    val full = fullKey(key)
    try {
      val bytes = client.getObjectAsBytes(GetObjectRequest.builder().bucket(bucket).key(full).build())
      Some(VersionedObject(bytes.asByteArrayUnsafe(), ObjectVersion(bytes.response().eTag())))
    } catch {
      case _: NoSuchKeyException => None
      case e: AwsServiceException if e.statusCode() == 404 && !isNoSuchBucket(e) => None
      case e @ (_: SdkException | _: UncheckedIOException) => throw failure("GET", full, e)
    }
  }

  override def put(key: String, bytes: Array[Byte]): Unit = {
    val full = fullKey(key)
    try client.putObject(PutObjectRequest.builder().bucket(bucket).key(full).build(), RequestBody.fromBytes(bytes))
    catch { case e @ (_: SdkException | _: UncheckedIOException) => throw failure("PUT", full, e) }
  }

  override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome =
    conditionalPut(key, bytes, "PUT If-None-Match: *")(_.ifNoneMatch("*"))

  override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome =
    conditionalPut(key, bytes, s"PUT If-Match: ${expected.token}")(_.ifMatch(expected.token))

  override def list(prefix: String): Seq[ObjectInfo] = {
    ObjectKeys.validatePrefix(prefix)
    val full = rootPrefix + prefix
    try {
      val request = ListObjectsV2Request.builder().bucket(bucket).prefix(full).build()
      client.listObjectsV2Paginator(request).contents().asScala.iterator
        .map(o => ObjectInfo(o.key().substring(rootPrefix.length), o.size().longValue()))
        // Skip what no key can name (directory markers "dir/", "a//b" written by other tools).
        .filter(o => S3Store.isValidKey(o.key))
        .toVector
    } catch { case e @ (_: SdkException | _: UncheckedIOException) => throw failure("LIST", full, e) }
  }

  override def delete(key: String): Unit = {
    val full = fullKey(key)
    try client.deleteObject(DeleteObjectRequest.builder().bucket(bucket).key(full).build())
    catch {
      case e: AwsServiceException if e.statusCode() == 404 && !isNoSuchBucket(e) => ()
      case e @ (_: SdkException | _: UncheckedIOException) => throw failure("DELETE", full, e)
    }
  }

  override def close(): Unit =
    try {
      client.close()
      casClient.close()
    } finally http.close()

  private def conditionalPut(key: String, bytes: Array[Byte], op: String)(
      condition: PutObjectRequest.Builder => PutObjectRequest.Builder): CasOutcome = {
    val full = fullKey(key)
    try {
      val request = condition(PutObjectRequest.builder().bucket(bucket).key(full)).build()
      val etag = casClient.putObject(request, RequestBody.fromBytes(bytes)).eTag()
      if (etag == null) throw new StoreException(s"S3 $op of s3://$bucket/$full via $where returned no ETag")
      CasOutcome.Written(ObjectVersion(etag))
    } catch {
      // 412: the condition failed. 409 ConditionalRequestConflict: a concurrent conditional write
      // won. 404 on If-Match: the object is gone (S3 answers NoSuchKey rather than 412).
      case e: AwsServiceException
          if e.statusCode() == 412 || e.statusCode() == 409 || (e.statusCode() == 404 && !isNoSuchBucket(e)) =>
        CasOutcome.PreconditionFailed
      case e @ (_: SdkException | _: UncheckedIOException) => throw failure(op, full, e)
    }
  }

  private def fullKey(key: String): String = rootPrefix + ObjectKeys.validate(key)

  private def isNoSuchBucket(e: AwsServiceException): Boolean =
    e.isInstanceOf[NoSuchBucketException] || Option(e.awsErrorDetails()).exists(_.errorCode() == "NoSuchBucket")

  /**
   * A StoreException, except for an interrupted call (a Spark query being stopped): that is an
   * InterruptedIOException, which Spark takes for a normal stop instead of a query failure.
   */
  private def failure(op: String, fullKey: String, e: Throwable): Exception = {
    val causes = Iterator.iterate(e)(_.getCause).takeWhile(_ != null).take(20).toSeq
    if (Thread.currentThread().isInterrupted || causes.exists(S3Store.isInterruption)) {
      val interrupted = new java.io.InterruptedIOException(s"S3 $op of s3://$bucket/$fullKey was interrupted")
      interrupted.initCause(e)
      return interrupted
    }
    val hint = e match {
      case s: AwsServiceException if s.statusCode() == 403 && op == "GET" =>
        " (S3 also answers 403 for a missing object when the credentials lack s3:ListBucket)"
      case _ => ""
    }
    new StoreException(s"S3 $op of s3://$bucket/$fullKey via $where failed: ${e.getMessage}$hint", e)
  }
}

object S3Store {

  /**
   * Whether a cause means the calling thread was interrupted. Socket and connect timeouts are
   * InterruptedIOExceptions too, but they are store failures like any other (resolved by re-reading).
   */
  private[store] def isInterruption(t: Throwable): Boolean = t match {
    case _: java.net.SocketTimeoutException => false
    case t: java.io.InterruptedIOException if t.getClass.getName.contains("Timeout") => false
    case _: software.amazon.awssdk.core.exception.AbortedException | _: InterruptedException |
        _: java.io.InterruptedIOException | _: java.nio.channels.ClosedByInterruptException => true
    case _ => false
  }
  private def isValidKey(key: String): Boolean =
    try { ObjectKeys.validate(key); true }
    catch { case _: osqueue.InvalidObjectKeyException => false }

  private def buildClient(config: S3StoreConfig, http: SdkHttpClient, retries: Boolean): S3Client = {
    val attempts = if (retries) math.max(1, config.maxAttempts) else 1
    val overrides = ClientOverrideConfiguration.builder()
      .retryStrategy(
        if (retries) AwsRetryStrategy.standardRetryStrategy().toBuilder.maxAttempts(attempts).build()
        else AwsRetryStrategy.doNotRetry())
    config.requestTimeout.foreach { t =>
      overrides.apiCallAttemptTimeout(t.toJava).apiCallTimeout((t * attempts.toLong).toJava)
    }
    val builder = S3Client.builder()
      .httpClient(http)
      .credentialsProvider(credentialsProvider(config))
      // Plain (signed) bodies rather than aws-chunked ones on http:// endpoints: LocalStack may
      // answer a failed condition before reading a chunked body, and the 412 is then lost.
      .serviceConfiguration(S3Configuration.builder().pathStyleAccessEnabled(config.pathStyleAccess).chunkedEncodingEnabled(false).build())
      // Checksums only where S3 requires them: S3-compatible servers often reject the newer
      // trailing-checksum uploads (S3A's default too).
      .requestChecksumCalculation(RequestChecksumCalculation.WHEN_REQUIRED)
      .responseChecksumValidation(ResponseChecksumValidation.WHEN_REQUIRED)
    if (!retries) overrides.addExecutionInterceptor(NoExpectContinue)
    builder.overrideConfiguration(overrides.build())
    config.endpoint.foreach(e => builder.endpointOverride(e))
    config.region match {
      case Some(r) => builder.region(Region.of(r))
      case None =>
        // No region configured: guess one, and let the SDK follow S3's redirects to the bucket's.
        val guess =
          try DefaultAwsRegionProviderChain.builder().build().getRegion
          catch { case _: SdkException => Region.US_EAST_1 }
        builder.region(guess).crossRegionAccessEnabled(true)
    }
    builder.build()
  }

  /**
   * Removes the `Expect: 100-continue` the SDK adds to PUTs, on the conditional client only. A
   * server that sends "100 Continue" and then a 412 before reading the body (LocalStack) makes
   * the URL-connection client fail with "Error writing request body": the 412 would become an
   * unknown outcome. A manifest body is small, so it is sent outright. Unconditional (batch) PUTs
   * keep the header, so a rejected upload is not sent in full and its error stays readable.
   */
  private object NoExpectContinue extends ExecutionInterceptor {
    override def modifyHttpRequest(context: Context.ModifyHttpRequest, attributes: ExecutionAttributes): SdkHttpRequest =
      if (context.httpRequest().firstMatchingHeader("Expect").isPresent) context.httpRequest().toBuilder.removeHeader("Expect").build()
      else context.httpRequest()
  }

  private def credentialsProvider(config: S3StoreConfig): AwsCredentialsProvider = config.credentials match {
    case Some(S3Credentials(a, s, Some(token))) => StaticCredentialsProvider.create(AwsSessionCredentials.create(a, s, token))
    case Some(S3Credentials(a, s, None)) => StaticCredentialsProvider.create(AwsBasicCredentials.create(a, s))
    case None => DefaultCredentialsProvider.builder().build()
  }
}
