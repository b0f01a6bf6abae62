"""How much the Python source's next micro-batch may read: Spark's admission control, which the Python
data source API offers from pyspark 4.2 on (JVM: ``AdmissionControl``).

``maxBatchesPerTrigger`` caps a micro-batch in batch files (queue entries), ``minBatchesPerTrigger``
holds it until that many are queued or ``maxTriggerDelay`` has passed since the last micro-batch that
read something, and Trigger.AvailableNow reads up to the queue's end when the run began, never waiting.

The API has no composite read limit: :meth:`default_read_limit` names one (``ReadMaxFiles`` when a
maximum is set, else ``ReadMinRows``), and any limit other than ``ReadAllAvailable`` applies both options,
as the JVM source's composite limit does. ``ReadAllAvailable`` (Spark's way of overriding the options,
e.g. for a trigger that reads everything) applies none.
"""

from __future__ import annotations

from typing import Any

from osqueue.spark_source.options import StreamOptions

try:  # pyspark >= 4.2 (admission control is only used there: StreamOptions refuses the limits before)
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMinRows
except ImportError:
    ReadAllAvailable = ReadMaxFiles = ReadMinRows = None


class AdmissionControl:
    """The micro-batch limits of one stream; ``start_ms``: when the stream started (the delay's origin)."""

    def __init__(self, options: StreamOptions, start_ms: int) -> None:
        self.options = options
        self.available_now_target: int | None = None
        self._last_trigger_ms = start_ms

    @property
    def limited(self) -> bool:
        return self.options.max_batches_per_trigger is not None or self.options.min_batches_per_trigger is not None

    def default_read_limit(self) -> Any:
        """``ReadMaxFiles(maxBatchesPerTrigger)``, else ``ReadMinRows(minBatchesPerTrigger)``, else everything."""
        if self.options.max_batches_per_trigger is not None:
            return ReadMaxFiles(self.options.max_batches_per_trigger)
        if self.options.min_batches_per_trigger is not None:
            return ReadMinRows(self.options.min_batches_per_trigger)
        return ReadAllAvailable()

    def available_now_up_to(self, target: int) -> None:
        """Trigger.AvailableNow: read up to ``target``, the queue's next sequence when the run began."""
        self.available_now_target = target

    def end(self, start: int, next_sequence: int, limit: Any, now_ms: int) -> int | None:
        """The end of a micro-batch starting at ``start`` when the queue's next sequence is
        ``next_sequence``, or None to wait for more (the minimum not reached, ``maxTriggerDelay`` not
        passed at ``now_ms``). ``limit``: Spark's read limit (None: pyspark < 4.2 gave none)."""
        target = self.available_now_target
        available = max(start, next_sequence if target is None else min(target, next_sequence))
        max_files, min_files = self._limits(limit)
        end = available if max_files is None else min(available, start + max_files)
        if min_files is not None and target is None and available - start < min_files:
            if now_ms - self._last_trigger_ms < self.options.max_trigger_delay_s * 1000:
                return None
        return end

    def _limits(self, limit: Any) -> tuple[int | None, int | None]:
        """(max, min) batch files of Spark's ``limit``. Matched by type name and field, as pyspark's own
        registry rebuilds a limit from its name and fields."""
        kind = type(limit).__name__
        if limit is None or kind == "ReadAllAvailable":
            return None, None
        o = self.options
        max_files = limit.max_files if kind == "ReadMaxFiles" else o.max_batches_per_trigger
        min_files = limit.min_rows if kind == "ReadMinRows" else o.min_batches_per_trigger
        return max_files, min_files

    def planned(self, start: int, end: int, now_ms: int) -> None:
        """A micro-batch [start, end) was planned at ``now_ms``: a non-empty one restarts the delay."""
        if end > start:
            self._last_trigger_ms = now_ms
