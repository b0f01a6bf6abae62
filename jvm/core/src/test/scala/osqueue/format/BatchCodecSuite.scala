package osqueue.format

import java.nio.{ByteBuffer, ByteOrder}

import com.github.luben.zstd.Zstd
import org.scalatest.funsuite.AnyFunSuite

import osqueue.{CorruptBatchException, InvalidConfigException, UnsupportedFormatVersionException}

class BatchCodecSuite extends AnyFunSuite {
  private val key = "ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch"
  private val records = IndexedSeq("alpha", "", "gamma" * 100).map(_.getBytes("UTF-8"))

  private def decoded(bytes: Array[Byte]) = BatchCodec.decode(bytes, key).map(new String(_, "UTF-8"))

  test("should round-trip records with and without zstd, keeping empty records") {
    for (c <- Seq(Compression.None, Compression.Zstd)) {
      val bytes = BatchCodec.encode(records, c)
      assert(bytes(bytes.length - 7) == c.id)
      assert(decoded(bytes) == records.map(new String(_, "UTF-8")))
    }
    assert(BatchCodec.encode(records, Compression.Zstd).length < BatchCodec.encode(records, Compression.None).length)
  }

  test("should write one zstd frame with its content size, and read several concatenated frames") {
    val block = BatchCodec.encode(records, Compression.None).dropRight(7)
    val zstd = BatchCodec.encode(records, Compression.Zstd).dropRight(7)
    assert(Zstd.getFrameContentSize(zstd) == block.length)
    val half = block.length / 2
    val twoFrames = Zstd.compress(block.take(half), 1) ++ Zstd.compress(block.drop(half), 1)
    val footer = BatchCodec.encode(records, Compression.Zstd).takeRight(7)
    assert(decoded(twoFrames ++ footer).size == 3)
  }

  private def footer(compression: Int, count: Int, version: Int) =
    ByteBuffer.allocate(7).order(ByteOrder.LITTLE_ENDIAN).put(compression.toByte).putInt(count).putShort(version.toShort).array()

  private def rejects[T <: Throwable](bytes: Array[Byte], fragment: String)(implicit ct: reflect.ClassTag[T]): Unit = {
    val e = intercept[T](BatchCodec.decode(bytes, key))
    assert(e.getMessage.contains(key) && e.getMessage.contains(fragment), e.getMessage)
  }

  test("should reject every corrupt form with a typed error naming the object") {
    val good = BatchCodec.encode(records, Compression.None)
    rejects[CorruptBatchException](Array[Byte](1, 2, 3), "shorter than the 7-byte footer")
    rejects[UnsupportedFormatVersionException](footer(0, 0, 7), "format version 7")
    rejects[CorruptBatchException](footer(2, 0, 1), "unknown compression type 0x02")
    rejects[CorruptBatchException](footer(0xFF, 0, 1), "unknown compression type 0xff")
    rejects[CorruptBatchException](good.dropRight(7) ++ footer(0, 4, 1), "record 3 of 4")
    rejects[CorruptBatchException](good.dropRight(7) ++ Array[Byte](0) ++ footer(0, 3, 1), "trailing bytes")
    rejects[CorruptBatchException](Array[Byte](1, 2, 3, 4, 5) ++ footer(1, 1, 1), "does not decompress")
    val lying = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(Int.MaxValue).array()
    rejects[CorruptBatchException](lying ++ footer(0, 1, 1), "run past the block")
    rejects[CorruptBatchException](footer(0, Int.MaxValue, 1), "cannot fit")
  }

  test("should hand out a block's records as fresh copies, checked as decode checks them, with their summed length") {
    for (c <- Seq(Compression.None, Compression.Zstd)) {
      val block = BatchCodec.decodeBlock(BatchCodec.encode(records, c), key)
      assert(block.map(new String(_, "UTF-8")) == records.map(new String(_, "UTF-8")))
      assert(block.byteLength == records.map(_.length.toLong).sum && BatchCodec.recordBytes(block) == block.byteLength)
      val first = block(0)
      first(0) = 'X'.toByte
      assert(new String(block(0), "UTF-8") == "alpha" && (block(2) ne block(2)))
      intercept[IndexOutOfBoundsException](block(3))
    }
    val empty = BatchCodec.decodeBlock(BatchCodec.encode(IndexedSeq.empty, Compression.None), key)
    assert(empty.isEmpty && empty.byteLength == 0)
    val good = BatchCodec.encode(records, Compression.None)
    val e = intercept[CorruptBatchException](BatchCodec.decodeBlock(good.dropRight(7) ++ Array[Byte](0) ++ footer(0, 3, 1), key))
    assert(e.getMessage.contains("trailing bytes"))
    assert(BatchCodec.recordBytes(records) == records.map(_.length.toLong).sum)
  }

  test("should parse compression options and name a bad one") {
    assert(Compression.parse("compression", "ZSTD") == Compression.Zstd)
    val e = intercept[InvalidConfigException](Compression.parse("compression", "lz4"))
    assert(e.getMessage.contains("'compression'") && e.getMessage.contains("lz4"))
  }

  test("should recognise only <ULID>.batch names directly under the prefix") {
    val k = BatchNames.newKey("ingest", 1767225600000L)
    assert(BatchNames.ulidTimeMs(k).contains(1767225600000L))
    assert(BatchNames.isBatchUnder("ingest", k))
    assert(!BatchNames.isBatchUnder("ingest", "ingest/sub/" + k.stripPrefix("ingest/")))
    assert(BatchNames.ulidTimeMs("ingest/manifest").isEmpty)
    assert(BatchNames.ulidTimeMs("ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch.tmp").isEmpty)
    assert(BatchNames.ulidTimeMs("ingest/81J5T4R3KXBMZ7QV9N2WG8YDHP.batch").isEmpty)
    assert(BatchNames.ulidTimeMs("ingest/01J5T4R3KXBMZ7QV9N2WG8YDHU.batch").isEmpty) // U is not Crockford
  }
}
