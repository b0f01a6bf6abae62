"""Fetching and decoding batch files (JVM: ``BatchFetcher``, ``ConsumedBatch``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from osqueue import metrics as m
from osqueue.clock import Clock, SystemClock
from osqueue.errors import BatchNotFoundError
from osqueue.format.batch_codec import decode_batch
from osqueue.format.batch_integrity import verify
from osqueue.format.manifest import MetadataItem
from osqueue.queue.queue_consumer import BatchDescriptor
from osqueue.store.object_store import ObjectStore


@dataclass(frozen=True)
class ConsumedBatch:
    """A fetched batch.

    Attributes:
        entries: The records, in order.
        sequence: The manifest entry's sequence (ack it when processed).
        location: The batch key.
        metadata: The per-range metadata items.
    """

    entries: list[bytes]
    sequence: int
    location: str
    metadata: list[MetadataItem] = field(default_factory=list)

    def metadata_for(self, index: int) -> MetadataItem | None:
        """The metadata of record ``index``: the last item with ``start_index <= index``."""
        found = None
        for item in self.metadata:
            if item.start_index <= index:
                found = item
            else:
                break
        return found


class FetchHandle:
    """Fetches and decodes batches; thread-safe, touches no consumer cursor, checks no epoch.

    Args:
        store: The object store.
        manifest_key: The manifest's key (named in errors about bad locations).
        metrics: Metrics registry.
        clock: Time seam (fetch durations).
    """

    def __init__(
        self,
        store: ObjectStore,
        manifest_key: str,
        metrics: m.MetricsRegistry | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._manifest_key = manifest_key
        self._metrics = metrics or m.REGISTRY
        self._clock = clock or SystemClock()

    def fetch(self, descriptor: BatchDescriptor) -> ConsumedBatch:
        """Fetches and decodes the batch of ``descriptor``.

        Raises:
            BatchNotFoundError: The batch object does not exist.
            CorruptBatchError: The batch does not decode, or does not match the entry's integrity
                record (length and CRC-32, read twice) (naming its key). It is never skipped.
            InvalidObjectKeyError: The location is not a plain key under the store root (a hostile
                or foreign manifest entry), as on the JVM; nothing outside the root is read.
            StoreError: The store failed.
        """
        started = self._clock.monotonic()

        def get() -> bytes:
            obj = self._store.get(descriptor.location)
            if obj is None:
                raise BatchNotFoundError(descriptor.location, descriptor.sequence)
            return obj.data

        if descriptor.integrity is None:
            self._metrics.counter(m.BATCHES_UNVERIFIED).inc()
            data = get()
        else:  # one re-GET on a mismatch (docs/format.md §2.1)
            data = verify(descriptor.integrity, get(), descriptor.location, get)
        records = decode_batch(data, descriptor.location)
        self._metrics.histogram(m.FETCH_DURATION).observe(self._clock.monotonic() - started)
        return ConsumedBatch(records, descriptor.sequence, descriptor.location, list(descriptor.metadata))
