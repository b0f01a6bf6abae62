"""The data prefix's owner object: one queue per prefix, and its GC grace period (JVM: ``DataPrefixOwner``)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from osqueue.clock import Clock, SystemClock
from osqueue.errors import IllegalQueueStateError, InvalidConfigError, StoreError
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.store.object_store import ObjectStore, Written, validate_key

OWNER_NAME = "osqueue.owner"
"""``<data_path_prefix>/osqueue.owner``: which manifest owns the batch files under the prefix."""

DEFAULT_GC_GRACE_PERIOD_MS = 600_000
"""The default GC grace period; GC never records a shorter one for its queue (docs/format.md §6)."""


@dataclass(frozen=True)
class DataPrefixOwner:
    """``<data_path_prefix>/osqueue.owner`` (docs/format.md §6).

    Attributes:
        manifest: The manifest whose queue owns the data prefix.
        claimed_at_ms: When it was claimed (informational).
        gc_grace_period_ms: The queue's one GC grace period: producers re-upload a batch older than
            half of it (or of their own, if shorter) and GC never uses a shorter one.
    """

    manifest: str
    claimed_at_ms: int
    gc_grace_period_ms: int


def claim_data_prefix(
    store: ObjectStore,
    manifest_key: str,
    data_prefix: str,
    clock: Clock | None = None,
    *,
    create_with_grace_ms: int | None = None,
    retry: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> DataPrefixOwner | None:
    """Proves ``data_prefix`` holds this queue's batches and reads the queue's grace period.

    ``<data_prefix>/osqueue.owner`` (JSON ``{"version":1,"manifest":…,"claimedAtMs":…,
    "gcGracePeriodMs":…}``) names the one manifest whose producers may write there and whose GC may
    delete there, and the grace period every producer and GC of the queue uses. The first
    producer or GC of the queue creates it (create-if-absent).

    Args:
        create_with_grace_ms: Create the record with this grace period when there is none (None:
            only check an existing one).
        retry: The budget for a failing store (default :class:`RetryPolicy`); a create whose
            reply was lost is settled by the re-read, which finds this queue's own record.

    Returns:
        The record (None when there is none and ``create_with_grace_ms`` is None).

    Raises:
        InvalidConfigError: Another manifest owns the prefix (two queues sharing a data prefix),
            or the record is not readable.
        StoreError: The store kept failing.
    """
    clock = clock or SystemClock()
    budget = (retry or RetryPolicy()).budget(clock, rng or random.Random())
    while True:
        try:
            return _claim_data_prefix_once(store, manifest_key, data_prefix, clock, create_with_grace_ms)
        except StoreError:
            if not budget.retry():
                raise


def _claim_data_prefix_once(
    store: ObjectStore, manifest_key: str, data_prefix: str, clock: Clock, create_with_grace_ms: int | None
) -> DataPrefixOwner | None:
    prefix = data_prefix.rstrip("/")
    key = validate_key(f"{prefix}/{OWNER_NAME}")
    for _ in range(2):  # a lost create race is settled by reading the winner's record
        obj = store.get(key)
        if obj is None:
            if create_with_grace_ms is None:
                return None
            created = DataPrefixOwner(manifest_key, clock.now_ms(), create_with_grace_ms)
            record = {
                "version": 1,
                "manifest": created.manifest,
                "claimedAtMs": created.claimed_at_ms,
                "gcGracePeriodMs": created.gc_grace_period_ms,
            }
            if isinstance(store.put_if_absent(key, json.dumps(record, separators=(",", ":")).encode()), Written):
                return created
            continue
        try:
            found = json.loads(obj.data.decode("utf-8"))
            owner = DataPrefixOwner(found["manifest"], found["claimedAtMs"], found["gcGracePeriodMs"])
            if not isinstance(owner.manifest, str) or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0
                for v in (owner.claimed_at_ms, owner.gc_grace_period_ms)
            ):
                raise ValueError
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise InvalidConfigError(
                "data_path_prefix",
                prefix,
                f"its owner record '{key}' is not osqueue's (expected JSON with "
                "manifest, claimedAtMs and gcGracePeriodMs); GC will not delete there and producers will not write there",
            ) from None
        if owner.manifest == manifest_key:
            return owner
        raise InvalidConfigError(
            "data_path_prefix",
            prefix,
            f"holds the batches of the queue whose manifest is '{owner.manifest}' (per '{key}'), not of "
            f"'{manifest_key}': two queues sharing a data prefix would delete each other's batches in GC; give each "
            "queue its own",
        )
    raise IllegalQueueStateError(f"could not create or read '{key}'")
