package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.{Callable, Executors, TimeUnit, TimeoutException}

import com.github.luben.zstd.Zstd
import org.scalacheck.{Gen, Shrink}
import org.scalatest.funsuite.AnyFunSuite
import org.scalatestplus.scalacheck.ScalaCheckDrivenPropertyChecks

import osqueue.{CorruptBatchException, CorruptManifestException, UnsupportedFormatVersionException}

/**
 * Property tests of the two decoders (issue 6): whatever the bytes, `decode` returns a value or
 * raises one of the typed format exceptions: never another exception, never a hang (each call is
 * bounded), never an allocation sized by a count read from the object.
 */
class DecoderPropertiesSuite extends AnyFunSuite with ScalaCheckDrivenPropertyChecks {
  implicit override val generatorDrivenConfig: PropertyCheckConfiguration =
    PropertyCheckConfiguration(minSuccessful = 2000, sizeRange = 300)
  // Shrinking random bytes is slow and unhelpful here: failures print the hex of the input.
  implicit def noShrink[T]: Shrink[T] = Shrink.shrinkAny

  private val key = "ingest/manifest"
  private val batchKey = "ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch"
  private val CallTimeoutMs = 5000L
  private val pool = Executors.newSingleThreadExecutor { (r: Runnable) =>
    val t = new Thread(r, "decoder-property"); t.setDaemon(true); t
  }

  private def hex(b: Array[Byte]): String =
    if (b.length > 256) b.take(256).map("%02x".format(_)).mkString + s"... (${b.length} bytes)"
    else b.map("%02x".format(_)).mkString

  /** Runs `f` bounded in time; returns the typed failure (if any), fails the test on anything else. */
  private def bounded[A](what: String, bytes: Array[Byte])(f: => A): Either[Throwable, A] = {
    val fut = pool.submit(new Callable[A] { def call(): A = f })
    try Right(fut.get(CallTimeoutMs, TimeUnit.MILLISECONDS))
    catch {
      case _: TimeoutException =>
        fut.cancel(true)
        fail(s"$what did not return within $CallTimeoutMs ms on ${hex(bytes)}")
      case e: java.util.concurrent.ExecutionException => e.getCause match {
          case t @ (_: CorruptManifestException | _: CorruptBatchException | _: UnsupportedFormatVersionException) => Left(t)
          case other => fail(s"$what threw ${other.getClass.getName}: ${other.getMessage} on ${hex(bytes)}", other)
        }
    }
  }

  private def decodeManifest(bytes: Array[Byte]): Either[Throwable, Manifest] = {
    val r = bounded("ManifestCodec.decode", bytes)(ManifestCodec.decode(bytes, key))
    r.left.foreach {
      case e: CorruptManifestException => assert(e.key == key && e.getMessage.contains(key))
      case e: UnsupportedFormatVersionException => assert(e.key == key)
      case e => fail(s"ManifestCodec.decode raised a batch error: $e")
    }
    // A manifest that decodes re-encodes to the same bytes (the format has one encoding).
    r.foreach(m => assert(ManifestCodec.encode(m).sameElements(bytes), s"re-encoding differs for ${hex(bytes)}"))
    r
  }

  private def decodeBatch(bytes: Array[Byte]): Either[Throwable, IndexedSeq[Array[Byte]]] = {
    val r = bounded("BatchCodec.decode", bytes)(BatchCodec.decode(bytes, batchKey))
    r.left.foreach {
      case e: CorruptBatchException => assert(e.key == batchKey && e.getMessage.contains(batchKey))
      case e: UnsupportedFormatVersionException => assert(e.key == batchKey)
      case e => fail(s"BatchCodec.decode raised a manifest error: $e")
    }
    r
  }

  // ---- generators --------------------------------------------------------------------------

  private val genBytes: Gen[Array[Byte]] = Gen.sized { n =>
    Gen.choose(0, n).flatMap(k => Gen.containerOfN[Array, Byte](k, Gen.choose(Byte.MinValue, Byte.MaxValue)))
  }
  private def genBytesUpTo(max: Int): Gen[Array[Byte]] =
    Gen.choose(0, max).flatMap(k => Gen.containerOfN[Array, Byte](k, Gen.choose(Byte.MinValue, Byte.MaxValue)))

  private val genLocation: Gen[String] = Gen.oneOf(
    Gen.listOfN(26, Gen.oneOf("0123456789ABCDEFGHJKMNPQRSTVWXYZ")).map(cs => s"ingest/${cs.mkString}.batch"),
    Gen.stringOf(Gen.oneOf(Gen.alphaNumChar, Gen.oneOf('é', '/', '☃', '\uD83D'))).map(_.filter(!Character.isSurrogate(_))),
    Gen.const(""))

  private val genMetadata: Gen[IndexedSeq[MetadataItem]] = for {
    n <- Gen.choose(0, 4)
    starts <- Gen.listOfN(n, Gen.choose(0, Int.MaxValue))
    items <- Gen.sequence[List[MetadataItem], MetadataItem](starts.sorted.map { s =>
      for { t <- Gen.choose(Long.MinValue, Long.MaxValue); p <- genBytesUpTo(40) } yield MetadataItem(s, t, p)
    })
  } yield items.toIndexedSeq

  private val genSinkTag: Gen[Array[Byte]] = for {
    writer <- Gen.alphaNumStr
    batch <- Gen.choose(0L, Long.MaxValue)
    attempt <- Gen.listOfN(26, Gen.alphaNumChar).map(_.mkString)
  } yield {
    val w = writer.getBytes(UTF_8); val a = attempt.getBytes(UTF_8)
    val b = ByteBuffer.allocate(4 + 1 + 2 + w.length + 8 + 1 + a.length).order(ByteOrder.LITTLE_ENDIAN)
    b.put("OSQ1".getBytes(UTF_8)).put(1.toByte).putShort(w.length.toShort).put(w).putLong(batch).put(a.length.toByte).put(a)
    b.array()
  }

  private val genManifest: Gen[Manifest] = for {
    first <- Gen.oneOf(Gen.choose(0L, 1000L), Gen.choose(0L, Long.MaxValue - 100))
    n <- Gen.choose(0, 8)
    gap <- Gen.choose(0L, 5L)
    epoch <- Gen.choose(Long.MinValue, Long.MaxValue)
    entries <- Gen.sequence[List[ManifestEntry], ManifestEntry]((0 until n).map { i =>
      for {
        loc <- genLocation
        meta <- genMetadata
        ext <- Gen.frequency(4 -> Gen.const(Array.emptyByteArray), 2 -> genBytesUpTo(30), 1 -> genSinkTag)
      } yield ManifestEntry(first + i, loc, meta, ext)
    })
  } yield Manifest(entries.toIndexedSeq, if (n == 0) math.min(Long.MaxValue, first + gap) else first + n, epoch)

  private val genRecords: Gen[Seq[Array[Byte]]] = Gen.sized { n =>
    Gen.choose(0, math.max(1, n / 4)).flatMap(k =>
      Gen.listOfN(k, Gen.frequency(2 -> Gen.const(Array.emptyByteArray), 5 -> genBytesUpTo(64))))
  }
  private val genCompression: Gen[Compression] = Gen.oneOf(Compression.None, Compression.Zstd)

  private val genValidManifestBytes: Gen[Array[Byte]] = genManifest.map(ManifestCodec.encode)
  private val genValidBatchBytes: Gen[Array[Byte]] =
    for { r <- genRecords; c <- genCompression } yield BatchCodec.encode(r, c)

  /** Mutations of a valid encoding: bit flips, truncation, insertion, deletion, overwriting a u32/u64. */
  private def mutate(valid: Array[Byte]): Gen[Array[Byte]] = {
    val n = valid.length
    val flip = for { i <- Gen.choose(0, math.max(0, n - 1)); bit <- Gen.choose(0, 7) } yield {
      val b = valid.clone(); if (n > 0) b(i) = (b(i) ^ (1 << bit)).toByte; b
    }
    val flips = Gen.choose(1, 8).flatMap(k => Gen.listOfN(k, Gen.zip(Gen.choose(0, math.max(0, n - 1)), Gen.choose(0, 7)))).map { fs =>
      val b = valid.clone(); if (n > 0) fs.foreach { case (i, bit) => b(i) = (b(i) ^ (1 << bit)).toByte }; b
    }
    val truncateEnd = Gen.choose(0, n).map(k => valid.take(k))
    val truncateStart = Gen.choose(0, n).map(k => valid.drop(k))
    val insert = for { at <- Gen.choose(0, n); ins <- genBytesUpTo(16).suchThat(_.nonEmpty) } yield valid.take(at) ++ ins ++ valid.drop(at)
    val delete = for { at <- Gen.choose(0, n); k <- Gen.choose(1, 16) } yield valid.take(at) ++ valid.drop(at + k)
    // A "huge" value written over 4 or 8 bytes (lengths, counts, sequences): the OOM cases.
    val hugeField = for {
      at <- Gen.choose(0, math.max(0, n - 4))
      width <- Gen.oneOf(2, 4, 8)
      v <- Gen.oneOf(-1L, Int.MaxValue.toLong, 0x80000000L, Long.MaxValue, Long.MinValue, 0xFFFFL, 0x7FFFFFF0L)
    } yield {
      val b = valid.clone()
      val bb = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN)
      if (at + width <= n) width match {
        case 2 => bb.putShort(at, v.toShort)
        case 4 => bb.putInt(at, v.toInt)
        case _ => bb.putLong(at, v)
      }
      b
    }
    Gen.oneOf(flip, flips, truncateEnd, truncateStart, insert, delete, hugeField)
  }

  private def le(n: Int) = ByteBuffer.allocate(n).order(ByteOrder.LITTLE_ENDIAN)
  private def manifestFooter(count: Long, next: Long, epoch: Long, version: Int = 1) =
    le(22).putInt(count.toInt).putLong(next).putLong(epoch).putShort(version.toShort).array()
  private def batchFooter(compression: Int, count: Long, version: Int = 1) =
    le(7).put(compression.toByte).putInt(count.toInt).putShort(version.toShort).array()

  // ---- arbitrary bytes ------------------------------------------------------------------------

  test("ManifestCodec.decode: arbitrary bytes give a manifest or a typed error") {
    forAll(genBytes)(b => decodeManifest(b))
  }

  test("ManifestCodec.decode: arbitrary entries before a valid footer give a manifest or a typed error") {
    val gen = for {
      body <- genBytes
      count <- Gen.oneOf(Gen.choose(0L, 10L), Gen.oneOf(0xFFFFFFFFL, 0x7FFFFFFFL, 0x10000000L))
      next <- Gen.oneOf(Gen.choose(0L, 20L), Gen.const(Long.MaxValue), Gen.const(-1L))
    } yield body ++ manifestFooter(count, next, 0)
    forAll(gen)(b => decodeManifest(b))
  }

  test("BatchCodec.decode: arbitrary bytes give records or a typed error") {
    forAll(genBytes)(b => decodeBatch(b))
  }

  test("BatchCodec.decode: arbitrary blocks before a valid footer give records or a typed error") {
    val gen = for {
      body <- genBytes
      compression <- Gen.oneOf(0, 1)
      count <- Gen.oneOf(Gen.choose(0L, 10L), Gen.oneOf(0xFFFFFFFFL, 0x7FFFFFFFL, 0x10000000L))
    } yield body ++ batchFooter(compression, count)
    forAll(gen)(b => decodeBatch(b))
  }

  test("BatchCodec.decode: arbitrary bytes after a zstd frame magic give records or a typed error") {
    val magic = Array[Byte](0x28, 0xB5.toByte, 0x2F, 0xFD.toByte)
    val gen = for { body <- genBytes; count <- Gen.choose(0L, 10L) } yield magic ++ body ++ batchFooter(1, count)
    forAll(gen)(b => decodeBatch(b))
  }

  // ---- mutations of valid encodings -----------------------------------------------------------

  test("ManifestCodec.decode: mutated valid manifests give a manifest or a typed error") {
    forAll(genValidManifestBytes.flatMap(v => mutate(v)))(b => decodeManifest(b))
  }

  test("BatchCodec.decode: mutated valid batches (none and zstd) give records or a typed error") {
    forAll(genValidBatchBytes.flatMap(v => mutate(v)))(b => decodeBatch(b))
  }

  test("ManifestEdits should reject mutated manifests with typed errors only") {
    forAll(genValidManifestBytes.flatMap(v => mutate(v)), Gen.choose(-1L, 20L)) { (b, through) =>
      bounded("ManifestEdits.dequeueThrough", b)(ManifestEdits.dequeueThrough(b, through, key))
      bounded("ManifestEdits.append", b)(ManifestEdits.append(b, Seq(NewEntry("ingest/x.batch", IndexedSeq.empty)), key))
    }
  }

  // ---- hostile footers and frames: no out-of-memory -------------------------------------------

  test("hostile counts and lengths are rejected without allocating by them") {
    val hostileManifests = Seq(
      manifestFooter(0xFFFFFFFFL, 10, 0),
      Array.fill[Byte](40)(0) ++ manifestFooter(0xFFFFFFFFL, 10, 0),
      le(4).putInt(-1).array() ++ Array.fill[Byte](14)(0) ++ manifestFooter(1, 10, 0),
      le(4).putInt(0x7FFFFFF0).array() ++ Array.fill[Byte](14)(0) ++ manifestFooter(1, 10, 0),
      // one entry, location "", metadata_count = 2^32 - 1
      le(18).putInt(14).putLong(0).putShort(0).putInt(-1).array() ++ manifestFooter(1, 1, 0),
      // one entry with a metadata item whose payload_len is 2^31 - 1
      le(34).putInt(30).putLong(0).putShort(0).putInt(1).putInt(0).putLong(0).putInt(Int.MaxValue).array() ++ manifestFooter(1, 1, 0))
    hostileManifests.foreach(b => assert(decodeManifest(b).isLeft, hex(b)))
    val hostileBatches = Seq(
      batchFooter(0, 0xFFFFFFFFL),
      le(4).putInt(-1).array() ++ batchFooter(0, 1),
      le(4).putInt(Int.MaxValue).array() ++ batchFooter(0, 1),
      Zstd.compress(Array.fill[Byte](16)(0)) ++ batchFooter(1, 0x7FFFFFFFL))
    hostileBatches.foreach(b => assert(decodeBatch(b).isLeft, hex(b)))
  }

  test("a zstd frame whose header claims a huge content size is rejected without allocating it") {
    val block = le(7).putInt(3).put("abc".getBytes(UTF_8)).array()
    val frame = Zstd.compress(block, 3)
    // Frame header (RFC 8878): magic(4) | descriptor(1) | [window descriptor] | [dict id] | [content size].
    val fhd = frame(4) & 0xFF
    val singleSegment = (fhd & 0x20) != 0
    val fcsBytes = (fhd >>> 6) match { case 0 => if (singleSegment) 1 else 0; case 1 => 2; case 2 => 4; case _ => 8 }
    val dictBytes = Seq(0, 1, 2, 4)(fhd & 3)
    val blocks = frame.drop(5 + (if (singleSegment) 0 else 1) + dictBytes + fcsBytes)
    val checksumBit = fhd & 0x04
    val magic = frame.take(4)
    val claims = Seq(
      // 8-byte content size 2^63 - 1 with a 16 MiB window
      magic ++ Array(((3 << 6) | checksumBit).toByte, 0x70.toByte) ++ le(8).putLong(Long.MaxValue).array() ++ blocks,
      // single segment: the window is the content size, 2^64 - 1
      magic ++ Array(((3 << 6) | 0x20 | checksumBit).toByte) ++ le(8).putLong(-1L).array() ++ blocks,
      // content size 4 GiB, single segment
      magic ++ Array(((3 << 6) | 0x20 | checksumBit).toByte) ++ le(8).putLong(1L << 32).array() ++ blocks,
      // a window descriptor claiming a 2^41-byte window
      magic ++ Array(checksumBit.toByte, 0xF8.toByte) ++ blocks)
    // Bounded and typed; a decoder may accept a wrong claim as long as the block itself is valid.
    claims.foreach { f =>
      decodeBatch(f ++ batchFooter(1, 1)).foreach(r => assert(r.map(_.toSeq) == Seq("abc".getBytes(UTF_8).toSeq), hex(f)))
    }
  }

  test("a zstd bomb within the limit decodes only as far as the record block is valid") {
    // 64 MiB of zeros compresses to a few KiB; as a record block it is 16 Mi zero-length records,
    // but the footer claims 1 record: trailing bytes. Bounded time and memory, typed error.
    val zeros = new Array[Byte](64 << 20)
    val b = Zstd.compress(zeros, 3) ++ batchFooter(1, 1)
    assert(b.length < (1 << 20))
    assert(decodeBatch(b).isLeft)
  }

  // ---- round trips ----------------------------------------------------------------------------

  test("generated manifests (metadata, extension bytes, sink tags) round-trip exactly") {
    forAll(genManifest) { m =>
      val bytes = ManifestCodec.encode(m)
      val back = decodeManifest(bytes)
      assert(back == Right(m))
      // Appends carry existing entries (extensions included) byte for byte.
      val (appended, first) = ManifestEdits.append(bytes, Seq(NewEntry("ingest/y.batch", IndexedSeq.empty, Array[Byte](1, 2))), key)
      assert(first == m.nextSequence)
      val a = ManifestCodec.decode(appended, key)
      assert(a.entries.dropRight(1) == m.entries && a.epoch == m.epoch && a.nextSequence == m.nextSequence + 1)
      assert(a.entries.last == ManifestEntry(m.nextSequence, "ingest/y.batch", IndexedSeq.empty, Array[Byte](1, 2)))
    }
  }

  test("generated batches (none/zstd, empty records) round-trip exactly") {
    forAll(genRecords, genCompression) { (records, c) =>
      val bytes = BatchCodec.encode(records, c)
      val back = decodeBatch(bytes)
      assert(back.isRight, s"${back.left.toOption}")
      val got = back.toOption.get
      assert(got.size == records.size && got.zip(records).forall { case (a, b) => a.sameElements(b) })
    }
  }

  test("batches with concatenated zstd frames decode to the concatenated blocks") {
    forAll(genRecords, genRecords) { (r1, r2) =>
      val block = BatchCodec.encode(r1, Compression.None).dropRight(7)
      val block2 = BatchCodec.encode(r2, Compression.None).dropRight(7)
      val bytes = Zstd.compress(block, 3) ++ Zstd.compress(block2, 1) ++ batchFooter(1, r1.size + r2.size)
      val got = decodeBatch(bytes).toOption.get
      assert(got.map(_.toSeq) == (r1 ++ r2).map(_.toSeq))
    }
  }
}
