package osqueue

/** Scala 2.12 only (Spark 3.5): the 2.13 collection and string methods the shared connector sources use. */
package object spark extends osqueue.compat.Scala213Methods
