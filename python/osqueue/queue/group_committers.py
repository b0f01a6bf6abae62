"""The group committers of this process: producers of one manifest with the same settings share one
``ManifestAppender``, so their appends group into one manifest write (docs/format.md §5). The JVM's
producers each own their appender, so the JVM has no counterpart."""

from __future__ import annotations

import random
import threading

from osqueue import metrics as m
from osqueue.clock import Clock, SystemClock
from osqueue.queue.manifest_appender import ManifestAppender
from osqueue.queue.manifest_store import ManifestStore
from osqueue.queue.queue_retention import QueueFullWait
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.store.object_store import ObjectStore

_CommitterKey = tuple[object, ...]  # (id(store), key, the settings key)
_committers: dict[_CommitterKey, tuple[ObjectStore, ManifestAppender]] = {}
_committers_lock = threading.Lock()


def _settings_key(
    clock: Clock | None,
    rng: random.Random | None,
    policy: RetryPolicy,
    metrics: m.MetricsRegistry,
    segment_entries: int,
    queue_full_wait: QueueFullWait,
    commit_mode: str = "solo",
) -> tuple[object, ...]:
    """What a group committer uses, as a key: producers share a committer only when all of it is the same
    (the clock, random source and registry by identity; any system clock and "no random source given" are
    alike). The shared committer holds these objects, so their ids stay theirs while it is in the map."""
    return (
        None if clock is None or type(clock) is SystemClock else id(clock),
        None if rng is None else id(rng),
        policy,
        id(metrics),
        segment_entries,
        queue_full_wait,
        commit_mode,
    )


def acquire_committer(
    store: ObjectStore,
    key: str,
    clock: Clock | None,
    rng: random.Random | None,
    policy: RetryPolicy,
    metrics: m.MetricsRegistry,
    segment_entries: int,
    queue_full_wait: QueueFullWait | None = None,
    commit_mode: str = "solo",
) -> ManifestAppender:
    """The committer of (store, key) with these settings: shared with the producers that have the same
    settings, so their appends group into one write; a producer whose settings differ gets its own (its
    writes then meet the others' through the CAS loop), so every producer's K, retry policy, clock and
    metrics apply to its own appends."""
    wait = queue_full_wait or QueueFullWait()
    committer_key = (id(store), key, _settings_key(clock, rng, policy, metrics, segment_entries, wait, commit_mode))
    with _committers_lock:
        found = _committers.get(committer_key)
        if found is None or found[0] is not store:
            committer = ManifestAppender(
                ManifestStore(store, key),
                clock or SystemClock(),
                rng or random.Random(),
                policy,
                metrics,
                segment_entries,
                commit_mode,
            )
            committer.queue_full_wait = wait
            committer.shared_as = committer_key
            _committers[committer_key] = (store, committer)
        else:
            committer = found[1]
        committer.refs += 1
        return committer


def release_committer(committer: ManifestAppender) -> None:
    with _committers_lock:
        committer.refs -= 1
        key = committer.shared_as
        found = None if key is None else _committers.get(key)
        if key is not None and committer.refs <= 0 and found is not None and found[1] is committer:
            del _committers[key]
