"""What a write returns: a future of its durable position (JVM: ``WriteHandle``, ``DurableWrite``)."""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import Future
from dataclasses import dataclass


@dataclass(frozen=True)
class DurableWrite:
    """Where a ``produce()`` call's entries became durable.

    Attributes:
        sequence: The sequence of the manifest entry of their batch.
        location: The batch's key.
        start_index: Index of the call's first entry in the batch.
    """

    sequence: int
    location: str
    start_index: int


class WriteHandle(Future):  # type: ignore[type-arg]
    """The durability of one ``produce()`` call: a ``concurrent.futures.Future`` of a
    :class:`DurableWrite` that completes once the entries are in a batch object *and* the batch
    is enqueued in the manifest. It cannot be cancelled.

    Attributes:
        ingestion_time_ms: The producer's wall clock at ``produce()``.
    """

    def __init__(self, ingestion_time_ms: int) -> None:
        super().__init__()
        self.ingestion_time_ms = ingestion_time_ms

    def cancel(self) -> bool:
        """A produced input cannot be withdrawn: always returns False."""
        return False

    def wait_durable(self, timeout: float | None = None) -> DurableWrite:
        """Blocks until durable and returns where; raises the flush's error if it failed.

        Raises:
            TimeoutError: Not durable within ``timeout`` seconds.
        """
        try:
            result: DurableWrite = self.result(timeout)
        except concurrent.futures.TimeoutError:  # before Python 3.11, not the built-in TimeoutError
            raise TimeoutError(f"not durable within {timeout} s") from None
        return result

    def try_result(self) -> DurableWrite | None:
        """Non-blocking: None while pending, the :class:`DurableWrite` once durable; raises
        the flush's error if it failed."""
        if not self.done():
            return None
        result: DurableWrite = self.result(0)
        return result
