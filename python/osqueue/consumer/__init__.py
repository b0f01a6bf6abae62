"""The consumer (JVM: ``osqueue.consumer``): :class:`Consumer` in consumer.py, fetching in batch_fetcher.py."""

from osqueue.consumer.batch_fetcher import ConsumedBatch, FetchHandle
from osqueue.consumer.consumer import ACK_DEQUEUE_INTERVAL, Consumer

__all__ = [
    "ACK_DEQUEUE_INTERVAL",
    "Consumer",
    "ConsumedBatch",
    "FetchHandle",
]
