"""Garbage collection of batch files (JVM: ``osqueue.gc``): :class:`GarbageCollector` in garbage_collector.py."""

from osqueue.gc.garbage_collector import GarbageCollector, GcResult

__all__ = [
    "GcResult",
    "GarbageCollector",
]
