package osqueue.store.gcs

import java.io.FileInputStream

import com.google.auth.oauth2.{GoogleCredentials, ServiceAccountCredentials}
import com.google.cloud.{BaseServiceException, NoCredentials, ServiceOptions}
import com.google.cloud.http.HttpTransportOptions
import com.google.cloud.storage.{BlobId, BlobInfo, Storage, StorageException, StorageOptions}
import com.google.cloud.storage.Storage.{BlobListOption, BlobTargetOption}

import osqueue.{Clock, ConditionalWritesNotHonouredException, InvalidConfigException, RandomSource, StoreException}
import osqueue.{SystemClock, SystemRandomSource}
import osqueue.store._

/**
 * An object store in a Cloud Storage bucket under a prefix, through Google's SDK over the JSON
 * API (relocated in the shipped jar).
 *
 * Versions are object generations. Conditional writes are generation preconditions:
 * `ifGenerationMatch=0` creates, `ifGenerationMatch=<generation>` replaces; 412 (and a 404 on a
 * replace: the object is gone) means the condition failed. They go through a client with SDK
 * retries disabled (the SDK counts a precondition write as idempotent and would retry it, and a
 * retried write whose first attempt landed comes back as 412, hiding the success): an unknown
 * outcome surfaces as a [[osqueue.StoreException]] and the queue resolves it by re-reading. All
 * other operations keep the SDK's retries. Every failure names the operation, the object and the server.
 *
 * Before its first conditional write to a server, a store probes it with a scratch object under
 * its prefix (docs/format.md §8): a server that lets a conditional write through where it must
 * fail (an emulator that ignores preconditions) is refused with
 * [[osqueue.ConditionalWritesNotHonouredException]]. The verdict is kept per server for the JVM.
 */
final class GcsStore(
    val bucket: String,
    prefix: String,
    val config: GcsStoreConfig,
    clock: Clock = SystemClock,
    random: RandomSource = SystemRandomSource)
    extends ObjectStore {
  if (!GcsStore.isBucketName(bucket))
    throw new InvalidConfigException("path", s"gs://$bucket", "expected gs://bucket/prefix with a valid GCS bucket name")
  private val keyPrefix: String = {
    val p = Option(prefix).getOrElse("").stripPrefix("/").stripSuffix("/")
    if (p.nonEmpty) ObjectKeys.validate(p)
    p
  }
  private val rootPrefix = if (keyPrefix.isEmpty) "" else keyPrefix + "/"

  override val uri: String = if (keyPrefix.isEmpty) s"gs://$bucket" else s"gs://$bucket/$keyPrefix"

  /** The server, as what was learned about its conditional writes is keyed and as failures name it. */
  val endpoint: String = config.rootUrl.fold("Google Cloud Storage")(_.toString.stripSuffix("/"))

  private val client: Storage = GcsStore.buildClient(config, retries = true)
  private val casClient: Storage = GcsStore.buildClient(config, retries = false)

  override def get(key: String): Option[VersionedObject] = {
    val full = fullKey(key)
    // Metadata, then the bytes of that very generation: a replace in between makes the second
    // read miss (404), and the pair is read again, so bytes and version always belong together.
    // Each miss means a writer made progress; a short random pause lets this reader through
    // when writers keep replacing the object (the SDK's readAllBytes returns no generation).
    var attempt = 0
    while (attempt < GcsStore.ReadAttempts) {
      attempt += 1
      val blob = call("GET (metadata)", full)(client.get(BlobId.of(bucket, full)))
      if (blob == null) return None
      val generation: Long = blob.getGeneration
      try return Some(VersionedObject(client.readAllBytes(BlobId.of(bucket, full, generation)), ObjectVersion(generation.toString)))
      catch {
        case e: StorageException if e.getCode == 404 => // replaced or deleted meanwhile
          clock.sleepMillis(1L + (random.nextDouble() * (1L + math.min(200L, 5L << math.min(attempt, 6)))).toLong)
        case e: RuntimeException => throw failure("GET", full, e)
      }
    }
    throw new StoreException(s"GCS GET of gs://$bucket/$full via $endpoint failed: the object was replaced " +
      s"between reading its generation and its bytes ${GcsStore.ReadAttempts} times in a row")
  }

  /** The metadata's generation first (no bytes): unchanged, nothing more is read. */
  override def getIfChanged(key: String, known: ObjectVersion): ConditionalRead = {
    val full = fullKey(key)
    val blob = call("GET (metadata)", full)(client.get(BlobId.of(bucket, full)))
    if (blob == null) ConditionalRead.Absent
    else if (blob.getGeneration.toString == known.token) ConditionalRead.NotModified
    else get(key) match {
      case None => ConditionalRead.Absent
      case Some(o) => if (o.version == known) ConditionalRead.NotModified else ConditionalRead.Changed(o)
    }
  }

  override def getBytes(key: String): Option[Array[Byte]] = {
    val full = fullKey(key)
    try Some(client.readAllBytes(BlobId.of(bucket, full)))
    catch {
      case e: StorageException if e.getCode == 404 && !GcsStore.isMissingBucket(e) => None
      case e: RuntimeException => throw failure("GET", full, e)
    }
  }

  override def put(key: String, bytes: Array[Byte]): Unit = {
    val full = fullKey(key)
    call("PUT", full)(client.create(BlobInfo.newBuilder(bucket, full).build(), bytes))
    ()
  }

  override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = {
    ObjectKeys.validate(key) // before any I/O, the probe's included
    conditions()
    conditionalPut(fullKey(key), bytes, generation = 0L)
  }

  override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
    ObjectKeys.validate(key)
    conditions()
    // A version that is no generation (from another store) cannot be the object's current one.
    scala.util.Try(expected.token.toLong).toOption.filter(_ > 0) match {
      case Some(generation) => conditionalPut(fullKey(key), bytes, generation)
      case None => CasOutcome.PreconditionFailed
    }
  }

  /**
   * What this store's server does with conditional writes, probed on first use. Throws
   * [[osqueue.ConditionalWritesNotHonouredException]] for a server that does not honour them,
   * StoreException when the probe could not run (nothing is kept; the next call probes again).
   */
  def conditions(): EndpointConditions = {
    EndpointConditions.probed(endpoint, _.getMessage.contains(GcsStore.MissingBucket))(() => probe())
  }

  /**
   * A scratch object under the prefix: a create that must fail on the existing object, a replace
   * with a wrong generation that must fail, and one with the object's own generation that must land.
   */
  private def probe(): EndpointConditions = {
    val full = rootPrefix + S3Store.ProbeKeyPrefix + java.util.UUID.randomUUID().toString.replace("-", "").take(16)
    val at = s"'$full' in bucket '$bucket'"
    def refuse(detail: String) = new EndpointConditions(endpoint, Vector.empty, Some(detail))
    try {
      conditionalPut(full, "osqueue probe 1".getBytes, 0L) match {
        case CasOutcome.PreconditionFailed => refuse(s"creating the new object $at with ifGenerationMatch=0 failed")
        case CasOutcome.Written(created) =>
          val generation = created.token.toLong
          if (conditionalPut(full, "osqueue probe 2".getBytes, 0L) != CasOutcome.PreconditionFailed)
            refuse(s"a write of the existing object $at with ifGenerationMatch=0 replaced it (GCS answers 412)")
          else conditionalPut(full, "osqueue probe 3".getBytes, generation + 1000003L) match {
            case CasOutcome.Written(_) =>
              refuse(s"a write of $at with ifGenerationMatch set to a wrong generation replaced it (GCS answers 412)")
            case CasOutcome.PreconditionFailed =>
              if (conditionalPut(full, "osqueue probe 4".getBytes, generation) == CasOutcome.PreconditionFailed)
                refuse(s"a write of $at with ifGenerationMatch set to its own generation $generation failed")
              else new EndpointConditions(endpoint, Vector.empty, None)
          }
      }
    } finally {
      // A scratch object left behind is harmless (GC deletes only batch files).
      try { client.delete(BlobId.of(bucket, full)); () }
      catch { case _: RuntimeException => () }
    }
  }

  override def list(prefix: String): Seq[ObjectInfo] = {
    ObjectKeys.validatePrefix(prefix)
    val full = rootPrefix + prefix
    call("LIST", full) {
      val out = Vector.newBuilder[ObjectInfo]
      val blobs = client.list(bucket, BlobListOption.prefix(full)).iterateAll().iterator()
      while (blobs.hasNext) {
        val b = blobs.next()
        val key = b.getName.substring(rootPrefix.length)
        // Skip what no key can name (directory placeholders "dir/" written by other tools).
        if (GcsStore.isValidKey(key))
          out += ObjectInfo(key, Option(b.getSize).fold(0L)(_.longValue),
            Option(b.getUpdateTimeOffsetDateTime).fold(ObjectInfo.UnknownLastModifiedMs)(_.toInstant.toEpochMilli))
      }
      out.result()
    }
  }

  override def delete(key: String): Unit = {
    val full = fullKey(key)
    call("DELETE", full)(client.delete(BlobId.of(bucket, full)))
    ()
  }

  override def close(): Unit = {
    try client.close()
    finally casClient.close()
  }

  /** A write with `ifGenerationMatch=generation` (0: only if absent), never retried by the SDK. */
  private def conditionalPut(full: String, bytes: Array[Byte], generation: Long): CasOutcome = {
    val op = s"PUT ifGenerationMatch=$generation"
    try {
      val blob =
        casClient.create(BlobInfo.newBuilder(BlobId.of(bucket, full, generation)).build(), bytes, BlobTargetOption.generationMatch())
      CasOutcome.Written(ObjectVersion(blob.getGeneration.toString))
    } catch {
      // 412: the condition failed. 404 on a replace: the object is gone (no current generation).
      case e: StorageException if e.getCode == 412 || (e.getCode == 404 && generation != 0L && !GcsStore.isMissingBucket(e)) =>
        CasOutcome.PreconditionFailed
      case e: RuntimeException => throw failure(op, full, e)
    }
  }

  private def call[T](op: String, full: String)(body: => T): T =
    try body
    catch { case e: RuntimeException if !e.isInstanceOf[osqueue.OsqueueException] => throw failure(op, full, e) }

  private def fullKey(key: String): String = rootPrefix + ObjectKeys.validate(key)

  /**
   * A StoreException, except for an interrupted call (a Spark query being stopped): that is an
   * InterruptedIOException, which Spark takes for a normal stop instead of a query failure.
   */
  private def failure(op: String, full: String, e: Throwable): Exception = {
    val causes = Iterator.iterate(e)(_.getCause).takeWhile(_ != null).take(20).toSeq
    if (Thread.currentThread().isInterrupted || causes.exists(GcsStore.isInterruption)) {
      val interrupted = new java.io.InterruptedIOException(s"GCS $op of gs://$bucket/$full was interrupted")
      interrupted.initCause(e)
      return interrupted
    }
    val hint = e match {
      case s: BaseServiceException if GcsStore.isMissingBucket(s) => s" (${GcsStore.MissingBucket}: create it first)"
      case s: BaseServiceException if s.getCode == 401 || s.getCode == 403 =>
        s" (check the credentials: ${GcsStoreConfig.AuthType}, ${GcsStoreConfig.JsonKeyFile}, or Application Default Credentials)"
      case _ => ""
    }
    new StoreException(s"GCS $op of gs://$bucket/$full via $endpoint failed: ${e.getMessage}$hint", e)
  }
}

object GcsStore {
  /** Reads of an object's metadata and bytes before giving up on a key replaced in between each time. */
  val ReadAttempts = 30
  private val MissingBucket = "the bucket does not exist"
  private val BucketName = """[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]""".r

  def isBucketName(name: String): Boolean = name != null && BucketName.pattern.matcher(name).matches()

  /**
   * Whether a 404 is Cloud Storage's "The specified bucket does not exist." (a missing object is
   * "No such object"). An emulator may say neither: its missing bucket then reads as missing objects.
   */
  private def isMissingBucket(e: BaseServiceException): Boolean =
    e.getCode == 404 && Option(e.getMessage).exists(_.toLowerCase(java.util.Locale.ROOT).contains("bucket does not exist"))

  private def isValidKey(key: String): Boolean =
    try { ObjectKeys.validate(key); true }
    catch { case _: osqueue.InvalidObjectKeyException => false }

  /** Whether a cause means the calling thread was interrupted (timeouts are store failures). */
  private def isInterruption(t: Throwable): Boolean = t match {
    case _: java.net.SocketTimeoutException => false
    case t: java.io.InterruptedIOException if t.getClass.getName.contains("Timeout") => false
    case _: InterruptedException | _: java.io.InterruptedIOException | _: java.nio.channels.ClosedByInterruptException => true
    case _ => false
  }

  private def buildClient(config: GcsStoreConfig, retries: Boolean): Storage = {
    val builder = StorageOptions.http()
      .setTransportOptions(HttpTransportOptions.newBuilder()
          .setConnectTimeout(config.connectTimeout.toMillis.min(Int.MaxValue).toInt)
          .setReadTimeout(config.readTimeout.toMillis.min(Int.MaxValue).toInt)
          .build())
      .setRetrySettings(ServiceOptions.getDefaultRetrySettings.toBuilder
          .setMaxAttempts(if (retries) math.max(1, config.maxAttempts) else 1).build())
    config.rootUrl.foreach(u => builder.setHost(u.toString.stripSuffix("/")))
    config.projectId.foreach(p => builder.setProjectId(p))
    config.credentials match {
      case GcsCredentials.DefaultChain => () // the SDK's Application Default Credentials
      case GcsCredentials.Unauthenticated => builder.setCredentials(NoCredentials.getInstance())
      case GcsCredentials.JsonKeyFile(path) =>
        val in = new FileInputStream(path)
        try builder.setCredentials(GoogleCredentials.fromStream(in))
        catch {
          case e: java.io.IOException =>
            throw new InvalidConfigException(GcsStoreConfig.JsonKeyFile, path, s"not a service account JSON key file: ${e.getMessage}")
        } finally in.close()
      case GcsCredentials.ServiceAccountKey(email, keyId, key) =>
        try builder.setCredentials(ServiceAccountCredentials.fromPkcs8(null, email, key, keyId.orNull,
              java.util.Collections.emptyList[String]()))
        catch {
          case e: java.io.IOException =>
            throw new InvalidConfigException(GcsStoreConfig.PrivateKey, "<private key>", s"not a PKCS#8 private key: ${e.getMessage}")
        }
    }
    builder.build().getService
  }
}
