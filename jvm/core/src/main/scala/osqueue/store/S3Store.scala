package osqueue.store

import java.io.UncheckedIOException

import scala.jdk.CollectionConverters._
import scala.jdk.DurationConverters._

import software.amazon.awssdk.auth.credentials.{
  AwsBasicCredentials,
  AwsCredentialsProvider,
  AwsSessionCredentials,
  DefaultCredentialsProvider,
  StaticCredentialsProvider
}
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
import software.amazon.awssdk.services.s3.model.{
  Delete,
  DeleteObjectRequest,
  DeleteObjectsRequest,
  GetObjectRequest,
  HeadObjectRequest,
  ListObjectsV2Request,
  NoSuchBucketException,
  NoSuchKeyException,
  ObjectIdentifier,
  PutObjectRequest
}

import osqueue.{ConditionalWritesNotHonouredException, InvalidConfigException, StoreException}

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
 *
 * Before its first conditional write to an endpoint, a store probes the endpoint with a scratch
 * object under its prefix (docs/format.md §8): an endpoint that lets a conditional write through
 * where it must fail is refused with [[osqueue.ConditionalWritesNotHonouredException]]; the probe
 * also learns whether the endpoint matches `If-Match` quoted (S3) or unquoted (Ceph RGW). The
 * verdict is kept per endpoint for the JVM ([[EndpointConditions]]). A 412 on `If-Match` while the
 * object still has the expected tag is retried once in the other form (which is then kept); if
 * that fails too, the endpoint does not honour `If-Match`.
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

  /** The endpoint, as what was learned about its conditional writes is keyed. */
  val endpoint: String = config.endpoint.fold(where)(_.toString)

  private val http: SdkHttpClient = UrlConnectionHttpClient.builder()
    .connectionTimeout(config.connectTimeout.toJava)
    .socketTimeout(config.socketTimeout.toJava)
    .build()
  private val client = S3Store.buildClient(config, http, retries = true)
  private val casClient = S3Store.buildClient(config, http, retries = false)
  // Per key: the 412s in a row taken as conflicts without the form rule's HEAD (§8).
  private val unchecked = new java.util.concurrent.ConcurrentHashMap[String, Int]()
  /** The form rule's HEADs this store has sent (tests). */
  private[store] val formChecks = new java.util.concurrent.atomic.AtomicInteger()

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

  /** GET with `If-None-Match: <known ETag>`: 304 when unchanged. A server ignoring it answers 200, compared here. */
  override def getIfChanged(key: String, known: ObjectVersion): ConditionalRead = {
    val full = fullKey(key)
    try {
      val bytes = client.getObjectAsBytes(GetObjectRequest.builder().bucket(bucket).key(full).ifNoneMatch(known.token).build())
      val version = ObjectVersion(bytes.response().eTag())
      if (version == known) ConditionalRead.NotModified
      else ConditionalRead.Changed(VersionedObject(bytes.asByteArrayUnsafe(), version))
    } catch {
      case e: AwsServiceException if e.statusCode() == 304 => ConditionalRead.NotModified
      case _: NoSuchKeyException => ConditionalRead.Absent
      case e: AwsServiceException if e.statusCode() == 404 && !isNoSuchBucket(e) => ConditionalRead.Absent
      case e @ (_: SdkException | _: UncheckedIOException) => throw failure("GET If-None-Match", full, e)
    }
  }

  override def put(key: String, bytes: Array[Byte]): Unit = {
    val full = fullKey(key)
    try client.putObject(PutObjectRequest.builder().bucket(bucket).key(full).build(), RequestBody.fromBytes(bytes))
    catch { case e @ (_: SdkException | _: UncheckedIOException) => throw failure("PUT", full, e) }
  }

  override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = {
    ObjectKeys.validate(key) // before any I/O, the probe's included
    conditions()
    conditionalPut(key, bytes, "PUT If-None-Match: *")(_.ifNoneMatch("*"))
  }

  override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
    ObjectKeys.validate(key)
    val known = conditions()
    def attempt(form: IfMatchForm): CasOutcome = {
      val value = form.value(expected.token)
      conditionalPut(key, bytes, s"PUT If-Match: $value")(_.ifMatch(value))
    }
    val tried = known.ifMatchForm
    val outcome = attempt(tried)
    if (outcome != CasOutcome.PreconditionFailed) {
      if (outcome.isInstanceOf[CasOutcome.Written]) {
        known.confirmed = Some(tried)
        unchecked.remove(key)
      }
      return outcome
    }
    val inARow = unchecked.getOrDefault(key, 0)
    if (known.confirmed.contains(tried) && inARow < S3Store.TrustedConflicts) {
      // A replace in this form landed on this endpoint: the server takes it, so a 412 is a conflict
      // (docs/format.md §8), taken without the HEAD up to TrustedConflicts in a row per key.
      unchecked.put(key, inARow + 1)
      return outcome
    }
    if (!stillAt(key, expected)) {
      unchecked.put(key, 0)
      return outcome
    }
    // 412 although the object still has the expected tag: this form is not the one the server
    // matches (Ceph RGW matches only unquoted tags). Once in each other form, then give up.
    val retried = known.ifMatchForms.iterator.filterNot(_ == tried).map(form => form -> attempt(form))
      .collectFirst { case (form, written: CasOutcome.Written) => form -> written }
    retried match {
      case Some((form, written)) =>
        known.learned(form); known.confirmed = Some(form); unchecked.remove(key); written
      case None if !stillAt(key, expected) => CasOutcome.PreconditionFailed
      case None => throw new ConditionalWritesNotHonouredException(endpoint,
          s"a PUT of '${fullKey(key)}' in bucket '$bucket' with If-Match set to the object's current entity tag " +
            s"${expected.token} failed with 412 in every form tried (${known.ifMatchForms.mkString(", ")}) " +
            "while the object did not change")
    }
  }

  /**
   * What this store's endpoint does with conditional writes, probed on first use. Throws
   * [[osqueue.ConditionalWritesNotHonouredException]] for an endpoint that does not honour them,
   * StoreException when the probe could not run (nothing is kept; the next call probes again).
   */
  def conditions(): EndpointConditions = {
    EndpointConditions.probed(endpoint)(() => probe())
  }

  /** Whether the object's entity tag (HEAD) is still `version`; false when that cannot be told. */
  private def stillAt(key: String, version: ObjectVersion): Boolean =
    try {
      formChecks.incrementAndGet()
      val tag = client.headObject(HeadObjectRequest.builder().bucket(bucket).key(fullKey(key)).build()).eTag()
      tag != null && IfMatchForm.bare(tag) == IfMatchForm.bare(version.token)
    } catch { case _: SdkException | _: UncheckedIOException => false }

  /**
   * A scratch object under the prefix: a conditional create that must fail, conditional replaces
   * with a wrong tag that must fail (in each form), and one with the object's own tag that must land.
   */
  private def probe(): EndpointConditions = {
    val full = rootPrefix + S3Store.ProbeKeyPrefix + java.util.UUID.randomUUID().toString.replace("-", "").take(16)
    val at = s"'$full' in bucket '$bucket'"
    final class Refused(val detail: String) extends RuntimeException(detail)
    /** The new ETag, or None when the condition failed. */
    def put(body: String, condition: String)(set: PutObjectRequest.Builder => PutObjectRequest.Builder): Option[String] =
      try Some(casClient.putObject(set(PutObjectRequest.builder().bucket(bucket).key(full)).build(), RequestBody.fromString(body)).eTag())
      catch {
        case e: AwsServiceException
            if e.statusCode() == 412 || e.statusCode() == 409 || (e.statusCode() == 404 && !isNoSuchBucket(e)) => None
        case e: AwsServiceException if e.statusCode() == 501 =>
          throw new Refused(s"a PUT of $at with $condition answered 501 (${e.getMessage})")
        case e @ (_: SdkException | _: UncheckedIOException) => throw failure(s"PUT $condition (probing conditional writes)", full, e)
      }
    def refuse(detail: String) = new EndpointConditions(endpoint, Vector.empty, Some(detail))
    try {
      put("osqueue probe 1", "If-None-Match: *")(_.ifNoneMatch("*")) match {
        case None => refuse(s"a PUT of the new object $at with If-None-Match: * failed")
        case Some(created) =>
          if (put("osqueue probe 2", "If-None-Match: *")(_.ifNoneMatch("*")).isDefined)
            refuse(s"a PUT of the existing object $at with If-None-Match: * replaced it (S3 answers 412)")
          else {
            val wrong = java.util.UUID.randomUUID().toString.replace("-", "")
            var current = created
            val honoured = IfMatchForm.all.filter { form =>
              put("osqueue probe 3", s"If-Match: ${form.value(wrong)}")(_.ifMatch(form.value(wrong))) match {
                case None => true
                case Some(replaced) => current = replaced; false // this form is ignored: never sent
              }
            }
            if (honoured.isEmpty) refuse(s"a PUT of $at with If-Match set to a wrong entity tag replaced it (S3 answers 412)")
            else honoured.find(form =>
              put("osqueue probe 4", s"If-Match: ${form.value(current)}")(_.ifMatch(form.value(current))).isDefined) match {
              case Some(form) =>
                val verdict = new EndpointConditions(endpoint, form +: honoured.filterNot(_ == form), None)
                verdict.confirmed = Some(form) // step 4 landed in it
                verdict
              case None =>
                refuse(s"a PUT of $at with If-Match set to its own entity tag $current failed in every form (${honoured.mkString(", ")})")
            }
          }
      }
    } catch {
      case r: Refused => refuse(r.detail)
    } finally {
      // A scratch object left behind is harmless (GC deletes only batch files).
      try client.deleteObject(DeleteObjectRequest.builder().bucket(bucket).key(full).build())
      catch { case _: SdkException | _: UncheckedIOException => () }
    }
  }

  override def list(prefix: String): Seq[ObjectInfo] = {
    ObjectKeys.validatePrefix(prefix)
    val full = rootPrefix + prefix
    try {
      val request = ListObjectsV2Request.builder().bucket(bucket).prefix(full).build()
      client.listObjectsV2Paginator(request).contents().asScala.iterator
        .map(o =>
          ObjectInfo(o.key().substring(rootPrefix.length), o.size().longValue(),
            Option(o.lastModified()).fold(ObjectInfo.UnknownLastModifiedMs)(_.toEpochMilli)))
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

  /**
   * One DeleteObjects request per 1,000 keys (quiet mode: only failures come back); a missing key is no
   * error. A key the server reports as not deleted throws StoreException naming it.
   */
  override def deleteMany(keys: Seq[String]): Unit = keys.grouped(1000).foreach { chunk =>
    val ids = chunk.map(k => ObjectIdentifier.builder().key(fullKey(k)).build())
    val reply =
      try client.deleteObjects(
          DeleteObjectsRequest.builder().bucket(bucket)
            .delete(Delete.builder().objects(ids.asJava).quiet(true).build()).build())
      catch {
        case e @ (_: SdkException | _: UncheckedIOException) => throw failure("DELETE", fullKey(chunk.head), e)
      }
    val errors = reply.errors().asScala.filter(_.code() != "NoSuchKey")
    if (errors.nonEmpty)
      throw new StoreException(
        s"$uri: DeleteObjects left ${errors.size} of ${chunk.size} keys, e.g. '${errors.head.key()}': " +
          s"${errors.head.code()} ${errors.head.message()}")
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
   * 412s in a row on one key taken as conflicts without the form rule's HEAD once a replace in the
   * endpoint's current If-Match form has landed (docs/format.md §8); the next one is checked.
   */
  val TrustedConflicts = 3
  /** The probe's scratch objects: `<prefix>/.osqueue-probe-<random>`. */
  val ProbeKeyPrefix = ".osqueue-probe-"
  /** Probe runs before a store error of the probe is reported; the wait doubles from the backoff. */
  val ProbeAttempts = 4
  val ProbeBackoffMs = 200L

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
