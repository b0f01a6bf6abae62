"""The producer (JVM: ``osqueue.producer``): :class:`Producer` in producer.py, its handles in write_handle.py."""

from osqueue.producer.producer import Producer
from osqueue.producer.write_handle import DurableWrite, WriteHandle

__all__ = [
    "DurableWrite",
    "WriteHandle",
    "Producer",
]
