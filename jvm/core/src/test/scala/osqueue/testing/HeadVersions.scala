package osqueue.testing

import java.nio.{ByteBuffer, ByteOrder}
import java.util.zip.CRC32

/**
 * A segmented head in the two versions it has had (docs/format.md §2.2, §2.3): writers write v3 without
 * sections since docs/adr/0006 item 3; v2 is what older writers wrote, still read. Built from the bytes,
 * not by the codec under test.
 */
object HeadVersions {
  private def le(n: Int) = ByteBuffer.allocate(n).order(ByteOrder.LITTLE_ENDIAN)

  /** A v3 head without sections as the v2 head of the same refs, tail and footer. */
  def asV2(v3: Array[Byte]): Array[Byte] = {
    val in = ByteBuffer.wrap(v3).order(ByteOrder.LITTLE_ENDIAN)
    val at = v3.length - 22 - 28
    require(in.getInt(at) == 0 && in.getInt(at + 4) == 0, "a head with sections has no v2 form")
    val trailer = le(16).putInt(in.getInt(at + 8)).putInt(in.getInt(at + 12)).putLong(in.getLong(at + 16)).array()
    val footer = v3.takeRight(22).clone()
    footer(20) = 2; footer(21) = 0
    v3.take(at) ++ trailer ++ footer
  }

  /** A v2 head as writers now write it: version 3, no section, head_crc32. */
  def asV3(v2: Array[Byte]): Array[Byte] = {
    val in = ByteBuffer.wrap(v2).order(ByteOrder.LITTLE_ENDIAN)
    val at = v2.length - 22 - 16
    val before = v2.take(at) ++ le(24).putInt(0).putInt(0).putInt(in.getInt(at)).putInt(in.getInt(at + 4))
      .putLong(in.getLong(at + 8)).array()
    val footer = v2.takeRight(22).clone()
    footer(20) = 3; footer(21) = 0
    val crc = new CRC32()
    crc.update(before); crc.update(footer)
    before ++ le(4).putInt(crc.getValue.toInt).array() ++ footer
  }
}
