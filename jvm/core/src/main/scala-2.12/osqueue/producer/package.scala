package osqueue

/** Scala 2.12 only: the 2.13 collection methods this package's shared sources use. */
package object producer extends osqueue.compat.Scala213Methods
