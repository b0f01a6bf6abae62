package osqueue.store.azure

import java.io.{ByteArrayOutputStream, UncheckedIOException}
import java.time.{Duration => JDuration}

import com.azure.core.exception.AzureException
import com.azure.core.http.HttpClient
import com.azure.core.http.jdk.httpclient.JdkHttpClientBuilder
import com.azure.core.util.{BinaryData, Context}
import com.azure.identity.{ClientSecretCredentialBuilder, DefaultAzureCredentialBuilder}
import com.azure.storage.blob.{BlobContainerClient, BlobServiceClientBuilder}
import com.azure.storage.blob.models.{BlobErrorCode, BlobListDetails, BlobRequestConditions, BlobStorageException, ListBlobsOptions}
import com.azure.storage.blob.options.BlockBlobSimpleUploadOptions
import com.azure.storage.common.StorageSharedKeyCredential
import com.azure.storage.common.policy.{RequestRetryOptions, RetryPolicyType}

import osqueue.{ConditionalWritesNotHonouredException, StoreException}
import osqueue.store._

/**
 * An object store in an Azure Blob Storage / ADLS Gen2 container under a key prefix, through
 * Microsoft's SDK (azure-storage-blob, relocated in the shipped jar) on the Blob endpoint.
 *
 * Versions are ETags. Conditional writes are Azure's conditional Put Blob: `If-None-Match: *` to
 * create (409 BlobAlreadyExists or 412 when the blob exists) and `If-Match: <etag>` to replace
 * (412 ConditionNotMet, or 404 when the blob is gone). They go through a client that never retries:
 * a retried PUT whose first try landed would come back 412/409 and hide the success, so an unknown
 * outcome surfaces as a [[osqueue.StoreException]] and the queue resolves it by re-reading. The
 * other operations keep the SDK's retries.
 *
 * As on S3 (docs/format.md §8), a store probes its endpoint with a scratch object under its prefix
 * before its first conditional write (kept per endpoint for the JVM): an endpoint that lets a
 * conditional write through where it must fail is refused with
 * [[osqueue.ConditionalWritesNotHonouredException]].
 */
final class AzureBlobStore(val location: AzureLocation, val config: AzureStoreConfig) extends ObjectStore {
  private val rootPrefix = if (location.prefix.isEmpty) "" else location.prefix + "/"

  override val uri: String = location.uri

  /** The endpoint and container, as what was learned about conditional writes is keyed. */
  val endpoint: String = s"${config.endpoint}/${location.container}"

  private val http: HttpClient = new JdkHttpClientBuilder().connectionTimeout(toJava(config.connectTimeout)).build()
  private val container = AzureBlobStore.containerClient(location, config, http, config.maxTries)
  private val casContainer = AzureBlobStore.containerClient(location, config, http, 1)

  override def get(key: String): Option[VersionedObject] = {
    val full = fullKey(key)
    try {
      val out = new ByteArrayOutputStream()
      val response = container.getBlobClient(full).downloadStreamWithResponse(out, null, null, null, false, null, Context.NONE)
      Some(VersionedObject(out.toByteArray, ObjectVersion(response.getDeserializedHeaders.getETag)))
    } catch {
      case e: BlobStorageException if e.getErrorCode == BlobErrorCode.BLOB_NOT_FOUND => None
      case StoreFailure(e) => throw failure("GET", full, e)
    }
  }

  /** GET with `If-None-Match: <known ETag>`: 304 when unchanged. */
  override def getIfChanged(key: String, known: ObjectVersion): ConditionalRead = {
    val full = fullKey(key)
    try {
      val out = new ByteArrayOutputStream()
      val response = container.getBlobClient(full).downloadStreamWithResponse(out, null, null,
        new BlobRequestConditions().setIfNoneMatch(known.token), false, null, Context.NONE)
      val version = ObjectVersion(response.getDeserializedHeaders.getETag)
      if (version == known) ConditionalRead.NotModified else ConditionalRead.Changed(VersionedObject(out.toByteArray, version))
    } catch {
      case e: BlobStorageException if e.getStatusCode == 304 => ConditionalRead.NotModified
      case e: BlobStorageException if e.getErrorCode == BlobErrorCode.BLOB_NOT_FOUND => ConditionalRead.Absent
      case StoreFailure(e) => throw failure("GET If-None-Match", full, e)
    }
  }

  override def put(key: String, bytes: Array[Byte]): Unit = {
    val full = fullKey(key)
    try { container.getBlobClient(full).getBlockBlobClient.upload(BinaryData.fromBytes(bytes), true); () }
    catch { case StoreFailure(e) => throw failure("PUT", full, e) }
  }

  override def putIfAbsent(key: String, bytes: Array[Byte]): CasOutcome = {
    ObjectKeys.validate(key) // before any I/O, the probe's included
    conditions()
    conditionalPut(key, bytes, "PUT If-None-Match: *", new BlobRequestConditions().setIfNoneMatch("*"))
  }

  override def putIfVersionMatches(key: String, bytes: Array[Byte], expected: ObjectVersion): CasOutcome = {
    ObjectKeys.validate(key)
    conditions()
    conditionalPut(key, bytes, s"PUT If-Match: ${expected.token}", new BlobRequestConditions().setIfMatch(expected.token))
  }

  /**
   * What this store's endpoint does with conditional writes, probed on first use. Throws
   * [[osqueue.ConditionalWritesNotHonouredException]] for an endpoint that does not honour them,
   * StoreException when the probe could not run (nothing is kept; the next call probes again).
   */
  def conditions(): EndpointConditions = {
    EndpointConditions.probed(endpoint)(() => probe())
  }

  /** A scratch object: a create that must fail, a replace with a wrong ETag that must fail, one with its own that must land. */
  private def probe(): EndpointConditions = {
    val full = rootPrefix + S3Store.ProbeKeyPrefix + java.util.UUID.randomUUID().toString.replace("-", "").take(16)
    val at = s"'$full' in container '${location.container}'"
    /** The new ETag, or None when the condition failed. */
    def put(body: String, condition: String, conditions: BlobRequestConditions): Option[String] =
      try Some(upload(casContainer, full, body.getBytes(java.nio.charset.StandardCharsets.UTF_8), conditions))
      catch {
        case e: BlobStorageException if conditionFailed(e) => None
        case StoreFailure(e) => throw failure(s"PUT $condition (probing conditional writes)", full, e)
      }
    def refuse(detail: String) = new EndpointConditions(endpoint, Vector.empty, Some(detail))
    try {
      put("osqueue probe 1", "If-None-Match: *", new BlobRequestConditions().setIfNoneMatch("*")) match {
        case None => refuse(s"a PUT of the new object $at with If-None-Match: * failed")
        case Some(created) =>
          if (put("osqueue probe 2", "If-None-Match: *", new BlobRequestConditions().setIfNoneMatch("*")).isDefined)
            refuse(s"a PUT of the existing object $at with If-None-Match: * replaced it (Azure answers 409)")
          else {
            val wrong = "\"0x" + java.util.UUID.randomUUID().toString.replace("-", "").take(15).toUpperCase + "\""
            put("osqueue probe 3", s"If-Match: $wrong", new BlobRequestConditions().setIfMatch(wrong)) match {
              case Some(_) => refuse(s"a PUT of $at with If-Match set to a wrong ETag replaced it (Azure answers 412)")
              case None =>
                if (put("osqueue probe 4", s"If-Match: $created", new BlobRequestConditions().setIfMatch(created)).isDefined)
                  new EndpointConditions(endpoint, Vector(IfMatchForm.Quoted), None)
                else refuse(s"a PUT of $at with If-Match set to its own ETag $created failed")
            }
          }
      }
    } finally {
      // A scratch object left behind is harmless (GC deletes only batch files).
      try { container.getBlobClient(full).deleteIfExists(); () }
      catch { case StoreFailure(_) => () }
    }
  }

  override def list(prefix: String): Seq[ObjectInfo] = {
    ObjectKeys.validatePrefix(prefix)
    val full = rootPrefix + prefix
    try {
      // Metadata too: on an ADLS Gen2 (hierarchical) account, directories are listed as empty
      // blobs marked hdi_isfolder; they are no objects.
      val options = new ListBlobsOptions().setPrefix(full).setDetails(new BlobListDetails().setRetrieveMetadata(true))
      val out = Vector.newBuilder[ObjectInfo]
      val it = container.listBlobs(options, null).iterator()
      while (it.hasNext) {
        val blob = it.next()
        val folder = Option(blob.getMetadata).exists(m => "true".equalsIgnoreCase(m.get("hdi_isfolder")))
        val key = blob.getName.substring(rootPrefix.length)
        if (!folder && AzureBlobStore.isValidKey(key))
          out += ObjectInfo(key, blob.getProperties.getContentLength.longValue(),
            Option(blob.getProperties.getLastModified).fold(ObjectInfo.UnknownLastModifiedMs)(_.toInstant.toEpochMilli))
      }
      out.result()
    } catch { case StoreFailure(e) => throw failure("LIST", full, e) }
  }

  override def delete(key: String): Unit = {
    val full = fullKey(key)
    try { container.getBlobClient(full).deleteIfExists(); () }
    catch {
      case e: BlobStorageException if e.getErrorCode == BlobErrorCode.BLOB_NOT_FOUND => ()
      case StoreFailure(e) => throw failure("DELETE", full, e)
    }
  }

  override def close(): Unit = () // the JDK HTTP client frees its connections when unreachable

  private def conditionalPut(key: String, bytes: Array[Byte], op: String, conditions: BlobRequestConditions): CasOutcome = {
    val full = fullKey(key)
    try CasOutcome.Written(ObjectVersion(upload(casContainer, full, bytes, conditions)))
    catch {
      case e: BlobStorageException if conditionFailed(e) => CasOutcome.PreconditionFailed
      case StoreFailure(e) => throw failure(op, full, e)
    }
  }

  /** A conditional Put Blob; returns the new ETag. */
  private def upload(client: BlobContainerClient, full: String, bytes: Array[Byte], conditions: BlobRequestConditions): String = {
    val options = new BlockBlobSimpleUploadOptions(BinaryData.fromBytes(bytes)).setRequestConditions(conditions)
    val etag = client.getBlobClient(full).getBlockBlobClient.uploadWithResponse(options, null, Context.NONE).getValue.getETag
    if (etag == null) throw new StoreException(s"Azure PUT of ${location.uri}/$full via ${config.endpoint} returned no ETag")
    etag
  }

  /** 412: the ETag did not match; 409 BlobAlreadyExists: If-None-Match: * on an existing blob; 404 on If-Match: it is gone. */
  private def conditionFailed(e: BlobStorageException): Boolean =
    e.getStatusCode == 412 || e.getErrorCode == BlobErrorCode.BLOB_ALREADY_EXISTS || e.getErrorCode == BlobErrorCode.BLOB_NOT_FOUND

  private def fullKey(key: String): String = rootPrefix + ObjectKeys.validate(key)

  /** A StoreException naming the operation, object and endpoint; an InterruptedIOException for an interrupted call (a stopping query). */
  private def failure(op: String, fullKey: String, e: Throwable): Exception = {
    val causes = Iterator.iterate(e)(_.getCause).takeWhile(_ != null).take(20).toSeq
    if (Thread.currentThread().isInterrupted || causes.exists(S3Store.isInterruption)) {
      val interrupted = new java.io.InterruptedIOException(s"Azure $op of ${location.uri} key '$fullKey' was interrupted")
      interrupted.initCause(e)
      return interrupted
    }
    val hint = e match {
      case s: BlobStorageException if s.getErrorCode == BlobErrorCode.CONTAINER_NOT_FOUND =>
        s" (the container '${location.container}' does not exist: osqueue does not create containers)"
      case s: BlobStorageException if s.getStatusCode == 403 =>
        s" (check the credentials: ${AzureStoreConfig.AccountKey}.${location.host}, a SAS token or OAuth; using ${config.auth})"
      case _ => ""
    }
    val detail = e match {
      case s: BlobStorageException => s"${s.getStatusCode} ${Option(s.getErrorCode).getOrElse("")}"
      case other => // the root cause says what happened (Reactor wraps a ConnectException...)
        val root = causes.last
        s"${root.getClass.getSimpleName}: ${Option(root.getMessage).getOrElse("")}".linesIterator.take(1).mkString
    }
    new StoreException(s"Azure $op of '$fullKey' in ${location.uri} via ${config.endpoint} failed: $detail$hint", e)
  }

  private def toJava(d: scala.concurrent.duration.FiniteDuration): JDuration = JDuration.ofMillis(d.toMillis)
}

/**
 * What the SDK throws when a call fails: its own exceptions, and I/O errors, which its blocking calls
 * rethrow wrapped by Reactor (a RuntimeException around a ConnectException).
 */
private object StoreFailure {
  def unapply(t: Throwable): Option[Throwable] = t match {
    case _: AzureException | _: UncheckedIOException => Some(t)
    case r: RuntimeException
        if r.getClass.getName.contains("reactor.core.Exceptions") ||
          Iterator.iterate[Throwable](r)(_.getCause).takeWhile(_ != null).take(20).exists(_.isInstanceOf[java.io.IOException]) =>
      Some(t)
    case _ => None
  }
}

object AzureBlobStore {
  private def isValidKey(key: String): Boolean =
    try { ObjectKeys.validate(key); true }
    catch { case _: osqueue.InvalidObjectKeyException => false }

  private def containerClient(location: AzureLocation, config: AzureStoreConfig, http: HttpClient, tries: Int): BlobContainerClient = {
    val retry = new RequestRetryOptions(RetryPolicyType.EXPONENTIAL, Integer.valueOf(math.max(1, tries)),
      Integer.valueOf(math.max(1, config.tryTimeout.toSeconds.toInt)), java.lang.Long.valueOf(200L), java.lang.Long.valueOf(8000L), null)
    val builder = new BlobServiceClientBuilder().endpoint(config.endpoint).httpClient(http).retryOptions(retry)
    config.auth match {
      case AzureAuth.SharedKey(account, key) => builder.credential(new StorageSharedKeyCredential(account, key))
      case AzureAuth.Sas(token) => builder.sasToken(token)
      case AzureAuth.ClientSecret(tenant, id, secret, authority) =>
        builder.credential(new ClientSecretCredentialBuilder().tenantId(tenant).clientId(id).clientSecret(secret)
            .authorityHost(authority).httpClient(http).build())
      case AzureAuth.DefaultChain => builder.credential(new DefaultAzureCredentialBuilder().httpClient(http).build())
    }
    builder.buildClient().getBlobContainerClient(location.container)
  }
}
