"""Index objects, the second level of a segmented head (docs/format.md §2.2), in Python: the codec against
the golden vectors, folding on seal, expansion on dequeue, readers walking the tree (SegmentTree), the
producer's ambiguous-write resolution through an index, GC reachability and the crash points."""

from __future__ import annotations

import base64
import dataclasses
import json
import pathlib
import random
from collections.abc import Sequence
from functools import partial

import pytest
from helpers import ManualClock, WrappedStore, v2_as_v3, with_head_crc
from segmented_queue_helpers import FAST, GRACE_MS, KEY, recording_gets
from segmented_queue_helpers import all_locations as _all_locations
from segmented_queue_helpers import head as _head
from segmented_queue_helpers import leaves as _leaves
from segmented_queue_helpers import producer as _producer
from segmented_queue_helpers import upload as _upload

from osqueue.consumer import Consumer
from osqueue.errors import AmbiguousCommitError, CorruptManifestError, StoreError
from osqueue.format import (
    ManifestEntry,
    MetadataItem,
    SealedTail,
    SegmentRef,
    decode_head,
    decode_index,
    decode_segment,
    empty_manifest,
    encode_head,
    encode_index,
    encode_ulid,
    fanout,
    fold_index,
    parse_head,
)
from osqueue.format.manifest_head import NO_BATCH_TIME
from osqueue.format.segment_names import prefix as segment_prefix
from osqueue.gc import GarbageCollector
from osqueue.queue import ManifestStore, RetryPolicy, SegmentTree
from osqueue.store import InMemoryStore, ObjectStore

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
HEADS = json.loads((GOLDEN / "heads.json").read_text(encoding="utf-8"))


def _ref(s: dict) -> SegmentRef:
    return SegmentRef(s["first_sequence"], s["entry_count"], s["level"], s["byte_length"], s["oldest_batch_ms"],
                      bytes.fromhex(s["sha256_hex"]), s["key"])  # fmt: skip


def _entry(e: dict) -> ManifestEntry:
    def b(s: str) -> bytes:
        return base64.b64decode(s)

    metadata = [MetadataItem(m["start_index"], m["ingestion_time_ms"], b(m["payload_b64"])) for m in e["metadata"]]
    return ManifestEntry(e["sequence"], e["location"], metadata, b(e["extension_b64"]))


def _tree_vector() -> dict:
    return next(v for v in HEADS["heads"] if v["name"] == "head_v2_tree")


def _golden_store(vector: dict) -> InMemoryStore:
    store = InMemoryStore(vector["name"])
    store.put(KEY, (GOLDEN / vector["file"]).read_bytes())
    for key, file in vector["objects"].items():
        store.put(key, (GOLDEN / file).read_bytes())
    return store


# -- the codec and the golden vectors --------------------------------------------------------------


@pytest.mark.parametrize("vector", HEADS["indexes"], ids=[v["name"] for v in HEADS["indexes"]])
def test_golden_index_objects_decode_and_re_encode_byte_exact(vector: dict) -> None:
    data = (GOLDEN / vector["file"]).read_bytes()
    ref = _ref(vector["ref"])
    refs = decode_index(data, ref)
    assert refs == [_ref(r) for r in vector["refs"]]
    assert encode_index(refs, ref.level) == data
    folded = fold_index(refs)
    assert folded.data == data and folded.ref(ref.key) == ref, "folding the refs gives the index and its ref"


@pytest.mark.parametrize("vector", HEADS["rejected_indexes"], ids=[v["name"] for v in HEADS["rejected_indexes"]])
def test_rejected_index_objects_raise_corrupt_manifest_naming_the_index(vector: dict) -> None:
    ref = _ref(vector["ref"])
    with pytest.raises(CorruptManifestError) as info:
        decode_index((GOLDEN / vector["file"]).read_bytes(), ref)
    assert type(info.value) is CorruptManifestError and ref.key in str(info.value)


def test_golden_tree_head_re_encodes_and_lists_mixed_levels() -> None:
    vector = _tree_vector()
    data = (GOLDEN / vector["file"]).read_bytes()
    head = decode_head(data, KEY)
    assert head.refs == [_ref(r) for r in vector["head"]["refs"]]
    assert [r.level for r in head.refs] == [0, 2, 0]
    assert head.tail == [_entry(e) for e in vector["head"]["tail"]]
    assert encode_head(head.refs, head.low_water, head.tail, head.next_sequence, head.epoch) == v2_as_v3(data)
    assert parse_head(data, KEY).depth == len(vector["head"]["queued_sequences"])


def test_golden_tree_is_walked_lazily_to_its_segments_and_every_entry_in_order() -> None:
    vector = _tree_vector()
    store = WrappedStore(_golden_store(vector))
    tree = SegmentTree(ManifestStore(store, KEY))
    head = _head(store)
    leaves = list(tree.leaves(head))
    assert [r.key for r in leaves] == [r["key"] for r in vector["head"]["refs"] if r["level"] == 0][:1] + [
        i["key"] for i in HEADS["indexes"][0]["refs"] + HEADS["indexes"][1]["refs"]
    ] + [vector["head"]["refs"][2]["key"]]
    assert [e.sequence for e in tree.entries(head)] == vector["head"]["queued_sequences"]
    # A sequence in segment d: found through the top index and index_de, nothing else read.
    store.get_calls = 0
    fresh = SegmentTree(ManifestStore(store, KEY))
    leaf = fresh.leaf_for(head, 17)
    assert leaf is not None and (leaf.first_sequence, leaf.last_sequence) == (17, 18)
    assert store.get_calls == 2, "the level-2 index, then one level-1 index"
    assert fresh.leaf_for(head, 23) is None, "in the tail"
    # Every entry in order through the whole-manifest read, too.
    ms = ManifestStore(store, KEY)
    assert [e.sequence for e in ms.decode(ms.read_raw()[0]).entries] == vector["head"]["queued_sequences"]


def test_a_native_consumer_reads_the_golden_tree_exactly_and_dequeues_through_it() -> None:
    vector = _tree_vector()
    store = _golden_store(vector)
    c = Consumer(store=store, run_gc=False, retry=FAST)
    got: list[int] = []
    while ds := c.next_descriptors(3):
        got += [d.sequence for d in ds]
        c.ack_through(ds[-1].sequence)
        head = _head(store)
        assert not head.refs or head.refs[0].level == 0, "the first ref is always a segment"
    assert got == vector["head"]["queued_sequences"]
    c.close()
    assert not _head(store).is_segmented


def test_a_missing_index_is_listed_but_missing_for_readers() -> None:
    vector = _tree_vector()
    store = _golden_store(vector)
    top = vector["head"]["refs"][1]["key"]
    store.delete(top)
    c = Consumer(store=store, run_gc=False, retry=FAST)
    assert [d.sequence for d in c.next_descriptors(10)] == [11, 12]  # segment a is there
    with pytest.raises(CorruptManifestError, match="listed but missing") as info:
        c.next_descriptors(10)
    assert top in str(info.value)
    c.close()


def test_a_cached_index_serves_only_a_ref_with_its_sha256() -> None:
    vector = _tree_vector()
    store = _golden_store(vector)
    tree = SegmentTree(ManifestStore(store, KEY))
    index = next(r for r in _head(store).refs if r.is_index)
    assert tree.children(index)  # decoded and cached
    other = dataclasses.replace(index, sha256=bytes([7]) * 32)
    with pytest.raises(CorruptManifestError, match="SHA-256") as info:
        tree.children(other)
    assert index.key in str(info.value)
    assert tree.children(index), "the right ref still reads"


def test_a_ref_above_level_32_or_an_index_first_is_refused() -> None:
    seg = SegmentRef(0, 2, 0, 10, NO_BATCH_TIME, bytes(32), "m.segments/a.segment")
    index = SegmentRef(2, 4, 1, 10, NO_BATCH_TIME, bytes(32), "m.segments/b.index")
    assert parse_head(encode_head([seg, index], 0, [], 6, 0), "m").refs == [seg, index]
    bad = bytearray(encode_head([seg, index], 0, [], 6, 0))
    bad[63 + len(seg.key) + 16] = 33  # the second ref's level byte (after first_sequence and entry_count)
    with pytest.raises(CorruptManifestError, match="head_crc32"):
        parse_head(bytes(bad), "m")  # the head's CRC catches it first
    with pytest.raises(CorruptManifestError, match="level 33"):
        parse_head(with_head_crc(bad), "m")
    with pytest.raises(CorruptManifestError, match="is an index"):
        parse_head(encode_head([index], 2, [], 6, 0), "m")


# -- folding and expansion (the pure head edits) -------------------------------------------------


def _loc(i: int) -> str:
    return f"ingest/{encode_ulid(1_000 + i, i)}.batch"


class _Objects:
    """The seal and fold callbacks of a producer, storing into a dict."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def seal(self, t: SealedTail) -> SegmentRef:
        key = f"m.segments/{len(self.data):026d}.segment"
        self.data[key] = t.data
        return t.ref(key)

    def fold(self, refs: Sequence[SegmentRef]) -> SegmentRef:
        f = fold_index(refs)
        key = f"m.segments/{len(self.data):026d}.index"
        self.data[key] = f.data
        return f.ref(key)

    def children(self, ref: SegmentRef) -> list[SegmentRef]:
        return decode_index(self.data[ref.key], ref)

    def leaves(self, refs: list[SegmentRef]) -> list[SegmentRef]:
        out: list[SegmentRef] = []
        for r in refs:
            out += [r] if r.level == 0 else self.leaves(self.children(r))
        return out


def _back_levels(refs: list[SegmentRef]) -> dict[int, int]:
    """How many refs of each level the head holds after its first ref."""
    counts: dict[int, int] = {}
    for r in refs[1:]:
        counts[r.level] = counts.get(r.level, 0) + 1
    return counts


@pytest.mark.parametrize(("k", "seals"), [(64, 150), (2048, 140)])
def test_every_seal_folds_so_the_head_holds_fewer_than_f_refs_per_level(k: int, seals: int) -> None:
    f = fanout(k)
    assert f == {64: 2, 2048: 64}[k]
    objects = _Objects()
    raw = empty_manifest(3)
    group = [(_loc(i), [MetadataItem(0, 5, b"")]) for i in range(k)]
    for n in range(seals + 1):
        raw, _ = parse_head(raw, "m").appended(group, k, objects.seal, objects.fold)  # a whole group: seals
        head = parse_head(raw, "m")
        assert all(count < f for count in _back_levels(head.refs).values()), (n, _back_levels(head.refs))
        levels = [r.level for r in head.refs[1:]]
        assert levels == sorted(levels, reverse=True), "higher levels first: folding only ever touches the back"
    head = parse_head(raw, "m")
    leaves = objects.leaves(head.refs)
    assert len(leaves) == seals and [r.entry_count for r in leaves] == [k] * seals
    assert leaves[0].first_sequence == 0 and leaves[-1].last_sequence == head.tail_first_sequence - 1
    # Behind the first segment the head holds the other seals - 1 in base F: one digit per level.
    digits, rest, level = {}, seals - 1, 0
    while rest:
        if rest % f:
            digits[level] = rest % f
        rest, level = rest // f, level + 1
    assert _back_levels(head.refs) == digits


def test_a_seal_cascades_one_index_per_level_at_f_64() -> None:
    """A head holding 63 refs of levels 2, 1 and 0 at its back: the 64th segment folds into a level-1 index,
    which makes 64 of level 1, folded into level 2, 64 of those: level 3 (three index objects, one append)."""
    k, f = 2048, 64
    first = SegmentRef(0, 1, 0, 1, NO_BATCH_TIME, bytes(32), "m.segments/first.segment")
    refs, seq = [first], 1
    for level in (2, 1, 0):
        for i in range(f - 1):
            count = k * f**level
            refs.append(SegmentRef(seq, count, level, 1, 1_000 + seq, bytes(32), f"m.segments/{level}-{i}.x"))
            seq += count
    tail = [ManifestEntry(seq + i, _loc(i), [], b"") for i in range(k)]
    raw = encode_head(refs, 0, tail, seq + k, 1)
    objects = _Objects()
    new_raw, _ = parse_head(raw, "m").appended([(_loc(9), [])], k, objects.seal, objects.fold)
    head = parse_head(new_raw, "m")
    assert [r.level for r in head.refs] == [0, 3]
    assert sorted(key.rsplit(".", 1)[1] for key in objects.data) == ["index", "index", "index", "segment"]
    top = head.refs[1]
    assert (top.first_sequence, top.entry_count, top.oldest_batch_ms) == (1, seq + k - 1, 1_000)  # the tail's _loc(0)
    assert [len(objects.children(r)) for r in [top]] == [f]


def test_no_fold_touches_the_first_ref() -> None:
    objects = _Objects()
    raw = empty_manifest(0)
    for i in range(2):  # K = 1: every append seals; F = 2
        raw, _ = parse_head(raw, "m").appended([(_loc(i), [])], 1, objects.seal, objects.fold)
    raw, _ = parse_head(raw, "m").appended([(_loc(2), [])], 1, objects.seal, objects.fold)
    assert [r.level for r in parse_head(raw, "m").refs] == [0, 0], "two refs: the first stays a segment"
    raw, _ = parse_head(raw, "m").appended([(_loc(3), [])], 1, objects.seal, objects.fold)
    assert [r.level for r in parse_head(raw, "m").refs] == [0, 1]


@pytest.mark.parametrize("k", [1, 2, 3, 64])
def test_appends_and_dequeues_with_folding_and_expansion_match_a_model(k: int) -> None:
    """Random appends and dequeues: the tree below the head always holds exactly the model's queue, its
    first ref is a segment, every index object checks against its ref, and no level is crowded."""
    rnd = random.Random(k)
    objects = _Objects()
    raw = empty_manifest(7)
    model: list[tuple[int, str]] = []
    next_seq = 0
    expansions = 0
    for _ in range(400):
        head = parse_head(raw, "m")
        if rnd.random() < 0.65:
            group = [_loc(next_seq + i) for i in range(rnd.randint(1, 3 if k < 64 else 70))]
            raw, base = head.appended(
                [(loc, [MetadataItem(0, 5, b"x")]) for loc in group], k, objects.seal, objects.fold
            )
            assert base == next_seq
            model += [(next_seq + i, loc) for i, loc in enumerate(group)]
            next_seq += len(group)
        elif model:
            through = rnd.choice(model)[0] if rnd.random() < 0.7 else model[min(len(model) - 1, 2)][0]
            loaded: list[str] = []
            edited = head.dequeued_through(through, partial(_recording, objects, loaded))
            assert edited is not None
            raw, removed = edited
            expansions += len(loaded)
            assert removed == sum(1 for s, _ in model if s <= through)
            model = [(s, loc) for s, loc in model if s > through]
        decoded = decode_head(raw, "m")
        assert decoded.next_sequence == next_seq and decoded.epoch == 7
        assert decoded.version == (3 if decoded.refs else 1), "v1 whenever no ref is left (v3 with refs: ADR 0006)"
        assert len(decoded.tail) <= k + (3 if k < 64 else 70)
        if decoded.refs:
            assert decoded.refs[0].level == 0
            oldest = parse_head(raw, "m").oldest_referenced_batch_ms()
            assert oldest == 1_000 + decoded.refs[0].first_sequence
        queued = []
        for leaf in objects.leaves(decoded.refs):
            entries = decode_segment(objects.data[leaf.key], leaf)
            assert leaf.oldest_batch_ms == min(1_000 + e.sequence for e in entries)
            queued += [(e.sequence, e.location) for e in entries]
        queued = [(s, loc) for s, loc in queued if s >= decoded.first_sequence] + [
            (e.sequence, e.location) for e in decoded.tail
        ]
        assert queued == model
    assert expansions > 0 or k == 64, "some dequeue reached an index"


def _recording(objects: _Objects, loaded: list[str], ref: SegmentRef) -> list[SegmentRef]:
    loaded.append(ref.key)
    return objects.children(ref)


def test_with_epoch_expands_too_and_without_a_dequeue_reads_no_index() -> None:
    vector = _tree_vector()
    store = _golden_store(vector)
    tree = SegmentTree(ManifestStore(store, KEY))
    data = (GOLDEN / vector["file"]).read_bytes()

    def no_reads(ref: SegmentRef) -> list[SegmentRef]:
        raise AssertionError(f"read {ref.key}")

    raw, removed = parse_head(data, KEY).with_epoch(9, None, no_reads)
    assert removed == 0 and raw[:-50] == data[:-38]  # v2 read, v3 written: refs and tail kept
    raw, removed = parse_head(data, KEY).with_epoch(9, 14, tree.children)
    head = decode_head(raw, KEY)
    # a dropped; top expanded to bc and de, bc to b and c, b (13..14) dropped: c, de, f
    assert removed == 4 and head.low_water == 15 and [r.level for r in head.refs] == [0, 1, 0]
    assert [(r.first_sequence, r.last_sequence) for r in head.refs] == [(15, 16), (17, 20), (21, 22)]


# -- queues: producers fold, consumers read and expand, resolution and GC go through the tree ----------


def _consumer(store: ObjectStore) -> Consumer:
    return Consumer(store=store, run_gc=False, retry=FAST)


def test_a_native_consumer_delivers_more_than_f_squared_k_entries_exactly_once_in_order() -> None:
    store = InMemoryStore("deep")
    k = 2  # F = 2: F^2 K = 8; 150 entries make a tree of 6 levels
    with _producer(store, k) as producer:
        produced = [producer.enqueue(_upload(store), timeout=30).location for _ in range(150)]
    head = _head(store)
    assert max(r.level for r in head.refs) >= 4 and len(head.refs) <= 2 * 6, [r.level for r in head.refs]
    c = _consumer(store)
    delivered: list[tuple[int, str]] = []
    rnd = random.Random(5)
    while ds := c.next_descriptors(rnd.randint(1, 7)):
        delivered += [(d.sequence, d.location) for d in ds]
        if rnd.random() < 0.5:
            c.ack_through(ds[-1].sequence)
            assert _head(store).refs[:1] == [] or _head(store).refs[0].level == 0
    assert [s for s, _ in delivered] == list(range(150)) and [loc for _, loc in delivered] == produced
    c.close()


def test_a_lost_reply_whose_write_was_folded_into_an_index_is_found_through_it() -> None:
    inner = InMemoryStore("lost-reply-folded")
    store = WrappedStore(inner)
    armed = [False]
    other = _producer(inner, 2)

    def lose_reply_after_others_fold(key, data, expected, apply):  # type: ignore[no-untyped-def]
        outcome = apply()
        if armed[0] and key == KEY:
            armed[0] = False
            for _ in range(9):  # seals our write (sequence 3) into a segment, then folds it into an index
                other.enqueue(_upload(inner), timeout=30)
            raise StoreError("injected: reply lost")
        return outcome

    store.on_conditional = lose_reply_after_others_fold
    with _producer(store, 2) as a:
        for _ in range(3):  # the first segment (0..1) is never folded: our write goes to sequence 3
            a.enqueue(_upload(inner), timeout=30)
        mine = _upload(inner)
        armed[0] = True
        result = a.enqueue(mine, timeout=30)
    other.close()
    holder = next(r for r in _head(inner).refs if r.first_sequence <= 3 <= r.last_sequence)
    assert holder.level > 0, "the write was folded into an index before the re-read"
    assert result.sequence == 3
    everything = _all_locations(inner)
    assert everything.count(mine) == 1 and len(everything) == 13 and everything[3] == mine


def test_a_lost_reply_behind_an_index_that_vanished_is_ambiguous_never_appended_again() -> None:
    """The resolution reads an index object that is gone (expanded by a dequeue, then collected): its
    sequences count as dequeued, so without receipts the outcome is AmbiguousCommit, never a second append."""
    inner = InMemoryStore("vanished-index")
    store = WrappedStore(inner)
    armed = [False]
    other = _producer(inner, 2)

    def fold_then_vanish(key, data, expected, apply):  # type: ignore[no-untyped-def]
        outcome = apply()
        if armed[0] and key == KEY:
            armed[0] = False
            for _ in range(9):
                other.enqueue(_upload(inner), timeout=30)
            index = next(r for r in _head(inner).refs if r.level > 0)
            assert index.first_sequence <= 3 <= index.last_sequence
            inner.delete(index.key)
            raise StoreError("injected: reply lost")
        return outcome

    store.on_conditional = fold_then_vanish
    retry = RetryPolicy(base_delay=0.001, max_delay=0.002, max_attempts=3)
    with _producer(store, 2, retry=retry) as a:
        for _ in range(3):
            a.enqueue(_upload(inner), timeout=30)
        mine = _upload(inner)
        armed[0] = True
        with pytest.raises(AmbiguousCommitError):
            a.enqueue(mine, timeout=30)
    other.close()
    head = _head(inner)
    assert all(loc != mine for _, loc in head.tail_locations()), "appended a second time"
    assert head.next_sequence == 13


def test_gc_keeps_every_reachable_segment_and_index_and_deletes_an_expanded_index() -> None:
    clock = ManualClock(1_767_225_600_000)
    store = InMemoryStore("gc-tree", clock)
    with _producer(store, 2, clock=clock) as producer:
        for _ in range(20):
            producer.enqueue(_upload(store, clock), timeout=30)
    head = _head(store)
    tree = SegmentTree(ManifestStore(store, KEY))
    reachable = tree.reachable_keys(head)
    assert isinstance(reachable, set)
    written = {i.key for i in store.list(segment_prefix(KEY))}
    assert reachable == written and any(k.endswith(".index") for k in written)
    clock.advance(GRACE_MS / 1000 + 1)
    gc = GarbageCollector(store, KEY, "ingest", grace_period=GRACE_MS / 1000, clock=clock)
    result = gc.run_once()
    assert not [k for k in result.deleted if ".segments/" in k], "everything reachable is kept"
    assert result.missing_index is None
    # A dequeue into the first index expands it: the index is unreachable from then on, its children are not.
    c = _consumer(store)
    c.ack_through(c.next_descriptors(5)[-1].sequence)
    c.close()
    after = _head(store)
    expanded = {r.key for r in head.refs if r.level > 0} - {r.key for r in after.refs}
    assert expanded, "the dequeue expanded an index"
    still = tree.reachable_keys(after)
    assert isinstance(still, set)
    result = gc.run_once()
    deleted = {k for k in result.deleted if ".segments/" in k}
    assert expanded <= deleted and not deleted & still
    assert {i.key for i in store.list(segment_prefix(KEY))} == still


def test_gc_deletes_no_segment_or_index_when_an_index_it_must_read_is_missing() -> None:
    clock = ManualClock(1_767_225_600_000)
    store = InMemoryStore("gc-missing-index")
    with _producer(store, 2, clock=clock) as producer:
        for _ in range(12):
            producer.enqueue(_upload(store, clock), timeout=30)
    orphan = segment_prefix(KEY) + encode_ulid(clock.now_ms() - 1, 5) + ".segment"
    store.put(orphan, b"x")
    index = next(r for r in _head(store).refs if r.level > 0)
    store.delete(index.key)
    clock.advance(GRACE_MS / 1000 + 1)
    result = GarbageCollector(store, KEY, "ingest", grace_period=GRACE_MS / 1000, clock=clock).run_once()
    assert result.missing_index == index.key
    assert not [k for k in result.deleted if ".segments/" in k] and store.get(orphan) is not None


def test_a_crash_between_an_index_put_and_the_head_cas_leaves_an_orphan_and_loses_nothing() -> None:
    clock = ManualClock(1_767_225_600_000)
    inner = InMemoryStore("crash-fold", clock)
    store = WrappedStore(inner)
    fail = [False]

    def fail_when_folding(key, data, expected, apply):  # type: ignore[no-untyped-def]
        if fail[0] and key == KEY and any(r.level > 0 for r in parse_head(data, KEY).refs):
            fail[0] = False
            raise StoreError("connection reset before the request was sent (test)")
        return apply()

    store.on_conditional = fail_when_folding
    first = [_upload(inner, clock) for _ in range(3)]
    third = _upload(inner, clock)
    with _producer(
        store, 1, clock=clock, retry=RetryPolicy(base_delay=0.001, max_delay=0.001, max_attempts=1)
    ) as dying:
        for loc in first:
            dying.enqueue(loc, timeout=30)
        assert [r.level for r in _head(inner).refs] == [0, 0]
        fail[0] = True
        with pytest.raises(AmbiguousCommitError):  # K = 1: seals and folds; the CAS never reaches the store
            dying.enqueue(third, timeout=30)
    orphans = {i.key for i in inner.list(segment_prefix(KEY))} - {r.key for r in _head(inner).refs}
    assert {k.rsplit(".", 1)[1] for k in orphans} == {"segment", "index"}
    with _producer(inner, 1, clock=clock) as again:
        again.enqueue(third, timeout=30)
    assert _all_locations(inner) == [*first, third]
    clock.advance(GRACE_MS / 1000 + 1)
    fourth = _upload(inner, clock)
    with _producer(inner, 1, clock=clock) as later:  # GC ages files against a head written since
        later.enqueue(fourth, timeout=30)
    result = GarbageCollector(inner, KEY, "ingest", grace_period=GRACE_MS / 1000, clock=clock).run_once()
    assert orphans <= set(result.deleted)
    assert _all_locations(inner) == [*first, third, fourth]


def test_an_expansion_whose_cas_conflicts_is_made_again_on_the_new_head() -> None:
    inner = InMemoryStore("expand-conflict")
    with _producer(inner, 2) as producer:
        for _ in range(12):
            producer.enqueue(_upload(inner), timeout=30)
    assert _head(inner).refs[1].level > 0
    store = WrappedStore(inner)
    c = _consumer(store)
    ds = c.next_descriptors(3)
    ds += c.next_descriptors(1)  # the first segment, then one entry of the next (inside an index)
    assert [d.sequence for d in ds] == [0, 1, 2]
    other = _producer(inner, 2)
    conflicts = [0]

    def append_first(key, data, expected, apply):  # type: ignore[no-untyped-def]
        if key == KEY and conflicts[0] == 0:
            conflicts[0] += 1
            other.enqueue(_upload(inner), timeout=30)  # the dequeue's CAS now conflicts
        return apply()

    store.on_conditional = append_first
    c.ack_through(2)  # into the index: expands it
    other.close()
    head = _head(inner)
    assert conflicts[0] == 1 and head.first_sequence == 3 and head.refs[0].level == 0
    got = []
    while more := c.next_descriptors(100):
        got += [d.sequence for d in more]
    assert got == list(range(3, 13)), "every entry after the dequeue once, the other producer's included"
    c.close()


def test_the_lazy_entry_walk_reads_one_segment_at_a_time() -> None:
    inner = InMemoryStore("lazy")
    with _producer(inner, 4) as producer:
        for _ in range(60):
            producer.enqueue(_upload(inner), timeout=30)
    store, read = recording_gets(inner)
    ms = ManifestStore(store, KEY)
    head = ms.head(ms.read_raw()[0])
    read.clear()
    walk = SegmentTree(ms).entries(head)
    assert [next(walk).sequence for _ in range(3)] == [0, 1, 2]
    assert sum(k.endswith(".segment") for k in read) == 1, read
    assert [e.sequence for e in walk] == list(range(3, 60))


def test_every_produced_entry_is_in_exactly_one_leaf_and_encode_refs_round_trips() -> None:
    store = InMemoryStore("round-trip")
    with _producer(store, 3) as producer:
        for _ in range(40):
            producer.enqueue(_upload(store), timeout=30)
    leaves = _leaves(store)
    head = _head(store)
    assert leaves[0].first_sequence == 0 and leaves[-1].last_sequence + 1 == head.tail_first_sequence
    for a, b in zip(leaves, leaves[1:]):
        assert b.first_sequence == a.last_sequence + 1


def test_an_edit_whose_object_name_went_stale_is_made_again_under_fresh_names() -> None:
    """Producers never start the head CAS when a segment or index object it lists was named half a grace
    period ago (GC could delete it first): a slow index PUT makes the seal and the fold happen again."""
    clock = ManualClock(1_767_225_600_000)
    inner = InMemoryStore("stale-names")
    store = WrappedStore(inner)
    slow = [1]

    def slow_index_put(key: str, data: bytes) -> None:
        if key.endswith(".index") and slow[0] > 0:
            slow[0] -= 1
            clock.advance(GRACE_MS / 2000 + 1)  # this PUT took longer than half the grace period

    store.on_put = slow_index_put
    with _producer(store, 1, clock=clock) as producer:
        locations = [producer.enqueue(_upload(inner, clock), timeout=30).location for _ in range(4)]
    head = _head(inner)
    assert [r.level for r in head.refs] == [0, 1], "K = 1: the 4th append sealed and folded"
    written = {i.key for i in inner.list(segment_prefix(KEY))}
    reachable = SegmentTree(ManifestStore(inner, KEY)).reachable_keys(head)
    assert isinstance(reachable, set)
    stale = written - reachable
    assert {k.rsplit(".", 1)[1] for k in stale} == {"segment", "index"}, "the first seal and fold are orphans"
    from osqueue.format.segment_names import ulid_time_ms

    index = head.refs[1]
    listed_by_the_fourth = [index.key, SegmentTree(ManifestStore(inner, KEY)).children(index)[-1].key]
    for key in listed_by_the_fourth:  # the index and the segment sealed with it: named after the slow PUT
        named = ulid_time_ms(KEY, key)
        assert named is not None and clock.now_ms() - named < GRACE_MS // 2
    assert _all_locations(inner) == locations


def test_a_batch_that_went_stale_during_a_slow_seal_is_uploaded_again_before_the_cas() -> None:
    """The seal's own objects stay fresh, but the batch being appended was already a quarter of a grace
    period old and the segment PUT took another quarter: GC could delete the batch before the head lists
    it, so it is uploaded again and the edit made on the fresh copy (§6)."""
    clock = ManualClock(1_767_225_600_000)
    inner = InMemoryStore("stale-batch")
    store = WrappedStore(inner)
    slow = [0]

    def slow_segment_put(key: str, data: bytes) -> None:
        if key.endswith(".segment") and slow[0] > 0:
            slow[0] -= 1
            clock.advance(GRACE_MS / 4000)

    store.on_put = slow_segment_put
    with _producer(store, 1, clock=clock) as producer:
        first = producer.enqueue(_upload(inner, clock), timeout=30).location
        uploaded = _upload(inner, clock)
        clock.advance(GRACE_MS / 4000 + 1)
        slow[0] = 1
        pending = producer.enqueue_async(uploaded, reupload=lambda: _upload(inner, clock), max_age_ms=GRACE_MS // 2)
        second = pending.result(30).location
    assert second != uploaded, "the batch aged past half the grace period during the seal: uploaded again"
    assert _all_locations(inner) == [first, second]


def test_a_producer_whose_object_puts_are_always_too_slow_fails_and_appends_nothing() -> None:
    clock = ManualClock(1_767_225_600_000)
    inner = InMemoryStore("always-stale")
    store = WrappedStore(inner)

    def slow_put(key: str, data: bytes) -> None:
        if ".segments/" in key:
            clock.advance(GRACE_MS / 2000 + 1)

    with _producer(store, 1, clock=clock) as producer:
        first = producer.enqueue(_upload(inner, clock), timeout=30).location
        store.on_put = slow_put
        with pytest.raises(StoreError, match="half the GC grace period"):
            producer.enqueue(_upload(inner, clock), timeout=30)
    assert _all_locations(inner) == [first] and not _head(inner).refs


def test_mutated_index_objects_decode_or_raise_corrupt_manifest_never_another_error() -> None:
    import hashlib

    vector = HEADS["indexes"][2]  # index_top, level 2
    valid = (GOLDEN / vector["file"]).read_bytes()
    good = _ref(vector["ref"])
    rnd = random.Random(11)
    decoded = 0
    for i in range(3000):
        b = bytearray(valid)
        for _ in range(1 + rnd.randrange(3)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        data = bytes(b)
        if i % 3 == 1:
            data = data[rnd.randrange(len(data)) :]
        elif i % 3 == 2:
            data = data[: rnd.randrange(len(data))]
        # the ref matches the bytes (length, SHA-256), so every later check is reached
        ref = SegmentRef(good.first_sequence, good.entry_count, 1 + rnd.randrange(3), len(data),
                         good.oldest_batch_ms, hashlib.sha256(data).digest(), good.key)  # fmt: skip
        try:
            decode_index(data, ref)
            decoded += 1
        except CorruptManifestError as e:
            assert good.key in str(e)
    assert decoded < 3000
