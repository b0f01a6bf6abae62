package osqueue.compat

import scala.collection.mutable
import scala.language.implicitConversions

/**
 * Scala 2.12 only (src/main/scala-2.12): the few Scala 2.13 collection methods the shared core
 * sources use, so that one source tree builds for Spark 3.5 with Scala 2.12. Each package whose
 * sources need them gets them through its 2.12-only package object; the 2.13 build has none of this.
 */
private[osqueue] trait Scala213Methods {
  implicit final def toMinOptionOps[A](xs: TraversableOnce[A]): Scala213Methods.MinOptionOps[A] =
    new Scala213Methods.MinOptionOps(xs)
  implicit final def toNextOptionOps[A](it: Iterator[A]): Scala213Methods.NextOptionOps[A] =
    new Scala213Methods.NextOptionOps(it)
  implicit final def toFilterInPlaceOps[A](buffer: mutable.Buffer[A]): Scala213Methods.FilterInPlaceOps[A] =
    new Scala213Methods.FilterInPlaceOps(buffer)
  implicit final def toStringOps(s: String): Scala213Methods.StringOps = new Scala213Methods.StringOps(s)
}

private[osqueue] object Scala213Methods {
  final class MinOptionOps[A](private val xs: TraversableOnce[A]) extends AnyVal {
    def minOption[B >: A](implicit ord: Ordering[B]): Option[A] = xs.reduceOption((a, b) => if (ord.lteq(a, b)) a else b)
    def maxOption[B >: A](implicit ord: Ordering[B]): Option[A] = xs.reduceOption((a, b) => if (ord.gteq(a, b)) a else b)
  }
  final class NextOptionOps[A](private val it: Iterator[A]) extends AnyVal {
    def nextOption(): Option[A] = if (it.hasNext) Some(it.next()) else None
  }
  final class FilterInPlaceOps[A](val buffer: mutable.Buffer[A]) extends AnyVal {
    def filterInPlace(keep: A => Boolean): mutable.Buffer[A] = {
      val kept = buffer.filter(keep)
      buffer.clear()
      buffer ++= kept
    }
  }
  final class StringOps(private val s: String) extends AnyVal {
    def toIntOption: Option[Int] =
      try Some(s.toInt)
      catch { case _: NumberFormatException => None }
    def toLongOption: Option[Long] =
      try Some(s.toLong)
      catch { case _: NumberFormatException => None }
  }
}
