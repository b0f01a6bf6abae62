"""The consumer: reads batches in queue order, acknowledges them, dequeues them.

Constructing a :class:`Consumer` initializes the queue: it bumps the manifest's epoch (fencing
every older consumer) and applies the resume point (docs/format.md §5). Then:

* serial path: :meth:`Consumer.next_batch` returns the next batch; :meth:`Consumer.ack` acks
  in order and dequeues every 100 acks; :meth:`Consumer.flush` dequeues what was acked;
* read-ahead path: :meth:`Consumer.next_descriptors` hands out manifest entries without
  fetching them, :meth:`Consumer.fetch_handle` fetches them from any thread, and
  :meth:`Consumer.ack_through` moves the ack frontier in one dequeue write.

A fenced consumer's manifest operations raise :class:`~osqueue.errors.FencedError`; none of its
writes can land, because every write is a compare-and-swap against an epoch-checked read.

Like the Spark source, the consumer applies the sink's reader rule (docs/adr/0002,
:class:`~osqueue.format.Delivered`): a replayed copy of a sink batch is never handed out and
counts as acknowledged. The delivered-copies map lives in memory for the consumer's lifetime
only: a consumer started with ``last_acked_sequence`` begins with an empty map.
"""

from osqueue.consumer.batch_fetcher import ConsumedBatch, FetchHandle
from osqueue.consumer.consumer import ACK_DEQUEUE_INTERVAL, Consumer

__all__ = [
    "ACK_DEQUEUE_INTERVAL",
    "Consumer",
    "ConsumedBatch",
    "FetchHandle",
]
