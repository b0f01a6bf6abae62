"""Garbage collection of batch files (docs/format.md §6).

A cycle takes a manifest snapshot at time ``t0`` (no epoch check: GC never writes the
manifest), lists ``<data_path_prefix>/`` and deletes a key only if all of these hold:

1. its last segment is ``<ULID>.batch`` and it sits directly under ``data_path_prefix``;
2. the snapshot does not reference it;
3. its ULID time is older than the oldest referenced batch's (skipped when the manifest is
   empty);
4. ``t0 - ulid_time >= grace_period``, measured from the snapshot, not the delete.

Before any of that, a cycle proves the files it may delete belong to its queue: it deletes
nothing when the manifest is missing (a wrong path reads as an empty queue), and nothing unless
``<data_path_prefix>/osqueue.owner`` names its manifest. The first GC of a queue writes that
record (create-if-absent), as does every producer; a queue whose data prefix is owned by another
manifest is refused with :class:`~osqueue.errors.InvalidConfigError` naming both
(docs/format.md §6).

Producers complete the rule by never starting a manifest write with a location older than
``grace_period / 2`` (they re-upload it under a fresh name), so a file GC may delete can never
be enqueued. Failed deletes are counted and retried next cycle.
"""

from osqueue.gc.garbage_collector import GarbageCollector, GcResult

__all__ = [
    "GcResult",
    "GarbageCollector",
]
