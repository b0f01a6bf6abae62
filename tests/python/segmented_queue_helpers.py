"""What the segmented-queue tests share: a queue at ``KEY``, its head and leaves, uploads and producers."""

from __future__ import annotations

import random

from helpers import ManualClock, WrappedStore

from osqueue.format import new_batch_key
from osqueue.format.manifest_head import RawHead, parse_head
from osqueue.format.segment_ref import SegmentRef
from osqueue.queue import ManifestStore, QueueProducer, RetryPolicy, SegmentTree
from osqueue.store import ObjectStore, VersionedObject

KEY = "ingest/manifest"
FAST = RetryPolicy(base_delay=0.001, max_delay=0.005)
GRACE_MS = 600_000


def head(store: ObjectStore) -> RawHead:
    obj = store.get(KEY)
    assert obj is not None
    return parse_head(obj.data, KEY)


def leaves(store: ObjectStore) -> list[SegmentRef]:
    """Every segment the head reaches (through its index objects), its first, partly dequeued, one included."""
    h = head(store)
    if not h.refs:
        return []
    return list(SegmentTree(ManifestStore(store, KEY)).leaves(h, h.refs[0].first_sequence))


def all_locations(store: ObjectStore) -> list[str]:
    ms = ManifestStore(store, KEY)
    return [e.location for e in ms.decode(ms.read_raw()[0]).entries]


def upload(store: ObjectStore, clock: ManualClock | None = None) -> str:
    key = new_batch_key("ingest", clock or ManualClock(1_767_225_600_000), random.Random())
    store.put(key, b"\x01")
    return key


def producer(store: ObjectStore, k: int, **kwargs: object) -> QueueProducer:
    kwargs.setdefault("retry", FAST)
    return QueueProducer(store, KEY, manifest_segment_entries=k, **kwargs)  # type: ignore[arg-type]


def recording_gets(inner: ObjectStore) -> tuple[WrappedStore, list[str]]:
    """``inner`` wrapped so that every key it is asked to GET is recorded, in order."""
    store = WrappedStore(inner)
    read: list[str] = []

    def recording_get(key: str) -> VersionedObject | None:
        read.append(key)
        return inner.get(key)

    store.get = recording_get  # type: ignore[method-assign]
    return store, read
