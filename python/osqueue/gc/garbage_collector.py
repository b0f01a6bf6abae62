"""Garbage collection of batch files (docs/format.md §6).

A cycle lists ``<data_path_prefix>/`` (and the manifest's key, if it lies elsewhere), takes ``t0``,
the manifest's last-modified time in that listing (the STORE's clock), then reads the manifest (no
epoch check: GC never writes it). The head it reads is the listed version or a later one. It
deletes a listed key only if all of these hold:

1. its last segment is ``<ULID>.batch`` and it sits directly under ``data_path_prefix``;
2. the head does not reference it;
3. its ULID time is older than the oldest referenced batch's (skipped when the manifest is
   empty): names compared with names, so no clock plays a part;
4. ``last_modified + grace_period <= t0``, both by the store's clock.

Before any of that, a cycle proves the files it may delete belong to its queue: it deletes
nothing when the manifest is missing (a wrong path reads as an empty queue), and nothing unless
``<data_path_prefix>/osqueue.owner`` names its manifest. The first GC of a queue writes that
record (create-if-absent), as does every producer; a queue whose data prefix is owned by another
manifest is refused with :class:`~osqueue.errors.InvalidConfigError` naming both
(docs/format.md §6).

Producers complete the rule by never starting a manifest write with a location whose PUT started
``grace_period / 2`` ago or more, by their own monotonic clock (they re-upload it under a fresh
name). So every head that references a file is written within about ``grace_period / 2`` of the
file's store time, before ``t0`` for any file rule 4 lets go: such a file is referenced by no head
from the one GC read on. Neither the GC host's clock nor a producer's wall clock plays a part.
Failed deletes are counted and retried next cycle.

With a segmented head (docs/format.md §2.2) a cycle reads the head and its index objects, never a
segment: rule 3 uses the head's refs' oldest batch times, which bound every batch below them. Segment
and index objects under ``<manifest>.segments/`` that are not reachable from the head (listed by it
or by an index object reachable from it) are deleted by rule 4 too; if an index object the walk needs
is missing, none is deleted that cycle.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from osqueue import metrics as m
from osqueue.clock import Clock, SystemClock
from osqueue.errors import IllegalQueueStateError, InvalidConfigError, OsqueueError
from osqueue.format.batch_names import parse_batch_ulid_ms
from osqueue.format.intent_codec import parse_intent_name
from osqueue.format.segment_names import prefix as segment_prefix
from osqueue.format.segment_names import ulid_time_ms as segment_ulid_time_ms
from osqueue.queue.data_prefix_owner import DEFAULT_GC_GRACE_PERIOD_MS, claim_data_prefix
from osqueue.queue.manifest_store import DEFAULT_DATA_PATH_PREFIX, DEFAULT_MANIFEST_PATH, ManifestStore
from osqueue.queue.segment_tree import SegmentTree
from osqueue.store.object_store import ObjectInfo, ObjectStore, validate_key

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GcResult:
    """What one GC cycle did.

    Attributes:
        deleted: Keys deleted (with ``dry_run``: keys that would have been).
        failed: Keys whose delete failed (retried next cycle).
        kept_referenced: Batch files the manifest references.
        kept_newer_than_oldest: Unreferenced batch files not older than the oldest referenced one.
        kept_in_grace: Unreferenced files written less than the grace period before ``t0``.
        kept_not_batch: Listed keys that are not ``<ULID>.batch`` directly under the prefix.
        snapshot_time_ms: ``t0``: the manifest's last-modified time when listed, by the store's clock.
        dry_run: Nothing was deleted.
        grace_period_ms: The grace period the cycle used: the queue's, or the collector's if longer.
        missing_index: The key of an index object the snapshot reaches but that was missing: the cycle
            deleted no segment or index object (they are counted as kept referenced).
    """

    deleted: tuple[str, ...]
    failed: tuple[str, ...]
    kept_referenced: int
    kept_newer_than_oldest: int
    kept_in_grace: int
    kept_not_batch: int
    snapshot_time_ms: int
    dry_run: bool = False
    grace_period_ms: int = 0
    missing_index: str | None = None


class GarbageCollector:
    """Deletes batch files that no manifest entry references and no producer can still enqueue.

    Args:
        store: The object store.
        manifest_path: The manifest's key.
        data_path_prefix: Where batches live.
        grace_period: Minimum age in seconds (by the store's clock, at ``t0``) before a file may be
            deleted; the queue's recorded grace period applies when it is longer (docs/format.md §6).
        clock: Time seam.
        metrics: Metrics registry.
    """

    def __init__(
        self,
        store: ObjectStore,
        manifest_path: str = DEFAULT_MANIFEST_PATH,
        data_path_prefix: str = DEFAULT_DATA_PATH_PREFIX,
        grace_period: float = 600.0,
        clock: Clock | None = None,
        metrics: m.MetricsRegistry | None = None,
    ) -> None:
        if isinstance(grace_period, bool) or not isinstance(grace_period, (int, float)) or grace_period < 0:
            raise InvalidConfigError("gc_grace_period", grace_period, "must be a number of seconds >= 0")
        validate_key(data_path_prefix)
        self._manifest = ManifestStore(store, manifest_path)
        self._segment_tree = SegmentTree(self._manifest)
        self._store = store
        self._prefix = data_path_prefix.rstrip("/") + "/"
        self._grace_ms = int(grace_period * 1000)
        self._clock = clock or SystemClock()
        self._metrics = metrics or m.REGISTRY
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self, dry_run: bool = False) -> GcResult:
        """Runs one cycle.

        Raises:
            StoreError: Reading the manifest or listing failed (nothing was deleted).
            CorruptManifestError: The manifest does not decode (nothing was deleted).
        """
        started = self._clock.monotonic()
        segment_dir = segment_prefix(self._manifest.key)
        # List BEFORE reading the head: the head then read is the listed manifest or a successor, so
        # its store time is at least the listed one, t0 (docs/format.md §6). Files written after the
        # listing are not candidates at all.
        listed = self._store.list(self._prefix)
        if not self._manifest.key.startswith(self._prefix):  # the manifest and its segments, apart
            listed += self._store.list(self._manifest.key)
        t0 = next((i.last_modified_ms for i in listed if i.key == self._manifest.key), None)
        raw, _ = self._manifest.read_raw() if t0 is not None else (None, None)
        if t0 is None or raw is None:  # a wrong path reads as an empty queue: everything would look unreferenced
            raise IllegalQueueStateError(
                f"GC found no manifest at '{self._manifest.key}': it deletes nothing without its queue's manifest "
                "(is the manifest path right?)"
            )
        # The head only for batches: the refs' oldest batch times bound every batch below them (§2.2).
        head = self._manifest.head(raw)
        grace_ms = self.check_owner()
        referenced = {loc for _, loc in head.tail_locations()}
        oldest = head.oldest_referenced_batch_ms()
        has_entries = head.tail_size > 0 or bool(head.refs)
        candidates: list[str] = []
        segment_infos: list[ObjectInfo] = []
        kept_referenced = kept_newer = kept_grace = kept_other = 0
        seen: set[str] = set()
        for info in listed:
            if info.key in seen:  # listed twice (the data prefix and the manifest's)
                continue
            seen.add(info.key)
            rest = info.key[len(self._prefix) :] if info.key.startswith(self._prefix) else "/"
            created = None if "/" in rest else parse_batch_ulid_ms(rest)
            if created is None:
                if info.key.startswith(segment_dir):  # looked at below
                    segment_infos.append(info)
                elif parse_intent_name(self._manifest.key, info.key) is not None:
                    # An intent is appended only while fresh (< grace / 4 before the head, §5.4): one a grace
                    # period before t0 can never be; its batches, unlisted, are collected as orphans.
                    if t0 - info.last_modified_ms < grace_ms:
                        kept_grace += 1
                    else:
                        candidates.append(info.key)
                elif info.key.startswith(self._prefix):
                    kept_other += 1
            elif info.key in referenced:
                kept_referenced += 1
            elif has_entries and (oldest is None or created >= oldest):
                # Names compared with names, never with a clock: a batch in a segment is not older than
                # its ref's oldest. With entries but no ULID-named one there is no "oldest": keep everything.
                kept_newer += 1
            elif t0 - info.last_modified_ms < grace_ms:
                kept_grace += 1
            else:
                candidates.append(info.key)
        # Segment and index objects the snapshot does not reach, written a grace period before t0 by the
        # store's clock: every head that lists one is written within grace / 2 of its PUT (producers make
        # the edit again otherwise), so before t0, and nothing dropped is listed again (docs/format.md §2.2, §6).
        # The walk reads index objects, never segments.
        reachable = self._segment_tree.reachable_keys(head) if head.refs else set()
        missing_index = reachable if isinstance(reachable, str) else None
        if missing_index is not None:
            _log.warning(
                "GC: index object '%s' reachable from '%s' is missing (a newer head expanded it and another GC "
                "deleted it?): no segment or index object is deleted this cycle",
                missing_index,
                self._manifest.key,
            )
        for info in segment_infos:
            if segment_ulid_time_ms(self._manifest.key, info.key) is None:
                kept_other += 1
            elif missing_index is not None or info.key in reachable:
                kept_referenced += 1
            elif t0 - info.last_modified_ms < grace_ms:
                kept_grace += 1
            else:
                candidates.append(info.key)
        deleted: list[str] = []
        failed: list[str] = []
        for key in candidates:
            if dry_run:
                deleted.append(key)
                continue
            try:
                self._store.delete(key)
                deleted.append(key)
            except (OsqueueError, OSError) as e:
                _log.warning("GC could not delete %s: %s (retried next cycle)", key, e)
                failed.append(key)
        if not dry_run:
            self._metrics.counter(m.GC_FILES_DELETED).inc(len(deleted))
            self._metrics.counter(m.GC_FILES_FAILED).inc(len(failed))
        self._metrics.histogram(m.GC_DURATION).observe(self._clock.monotonic() - started)
        return GcResult(
            tuple(deleted),
            tuple(failed),
            kept_referenced,
            kept_newer,
            kept_grace,
            kept_other,
            t0,
            dry_run,
            grace_ms,
            missing_index,
        )

    def check_owner(self) -> int:
        """Proves the data prefix belongs to this queue (see :func:`osqueue.queue.claim_data_prefix`).

        Returns:
            The grace period this cycle uses (ms): the queue's, or this collector's if longer. A
            collector creating the record gives the queue its own grace period, but never less
            than the default (a GC started with a tiny one must not shorten what producers are told).
        """
        owner = claim_data_prefix(
            self._store,
            self._manifest.key,
            self._prefix,
            self._clock,
            create_with_grace_ms=max(self._grace_ms, DEFAULT_GC_GRACE_PERIOD_MS),
        )
        assert owner is not None
        return max(self._grace_ms, owner.gc_grace_period_ms)

    def start(self, interval: float) -> None:
        """Runs a cycle every ``interval`` seconds in a daemon thread ``osqueue-gc``."""
        if not interval > 0:
            raise InvalidConfigError("gc_interval", interval, "must be a positive number of seconds")
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.run_once()
                except Exception as e:  # a failed cycle is retried next interval
                    _log.warning("GC cycle failed: %s", e)

        self._thread = threading.Thread(target=loop, name="osqueue-gc", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stops the background thread (waits for a running cycle)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
