"""The producer: buffers ``produce()`` calls, flushes batches, enqueues their locations.

``produce(entries, metadata)`` puts one input into a bounded buffer (``max_buffered_inputs``;
a full buffer blocks the caller) and returns a :class:`WriteHandle`. One daemon thread,
``osqueue-producer-flush``, moves inputs into the open batch and flushes it when it reaches
``flush_size_bytes``, when ``flush_interval`` has passed since its first input (measured on the
real monotonic clock; the injected clock gives ingestion times and batch names), on
:meth:`Producer.flush` and on :meth:`Producer.close`. A flush uploads the batch under a fresh
``<data_path_prefix>/<ULID>.batch`` key and hands the location to the process's group
committer (:class:`osqueue.queue.QueueProducer`); the handles of the batch complete when the
manifest write lands, or all fail with the same error.
"""

from osqueue.producer.producer import Producer
from osqueue.producer.write_handle import DurableWrite, WriteHandle

__all__ = [
    "DurableWrite",
    "WriteHandle",
    "Producer",
]
