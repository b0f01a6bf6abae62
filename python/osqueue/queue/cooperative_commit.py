"""Cooperative commit (docs/adr/0007 part 1, docs/format.md §5.4): producers in separate processes
announce their batches in intent objects, and whichever producer's CAS wins appends every fresh
announced batch, so a loser usually finds its batches already in. No batch is appended twice: every
entry carries its writer sequence ``(writer_id, batch_no)`` and the same CAS sets the head's writers
section, a run of a writer appended only from ``last_batch + 1`` on (``osqueue.format.writer_sequence``).
JVM: `osqueue.queue.CooperativeCommit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

from osqueue import metrics as m
from osqueue.errors import AmbiguousCommitError, CorruptManifestError, InvalidConfigError, QueueFullError, StoreError
from osqueue.format.batch_names import encode_ulid
from osqueue.format.head_sections import HeadSections
from osqueue.format.incarnation import new_incarnation_epoch
from osqueue.format.intent_codec import (
    MAX_FILE_NAME_BYTES,
    MAX_KEY_BYTES,
    Intent,
    IntentName,
    decode_in_key_intent,
    decode_intent,
    encode_intent,
    in_key_intent_key,
    intent_key,
    intents_prefix,
    parse_intent_name,
)
from osqueue.format.manifest import NewEntry
from osqueue.format.manifest_codec import empty_manifest
from osqueue.format.manifest_head import MAX_SEGMENT_ENTRIES, parse_head
from osqueue.format.writer_sequence import WriterRecord, sequence_record, with_writers, writers_of
from osqueue.queue.cas_loop import CasCounters, CasLoop, CasStep, Done, PreviousAttempt, Settle, Unknown, Write
from osqueue.queue.cas_object import Snapshot
from osqueue.queue.queue_retention import drop_oldest, with_room
from osqueue.store.object_store import ObjectInfo, delete_many

if TYPE_CHECKING:
    from osqueue.queue.manifest_appender import ManifestAppender, PendingLocation

SOLO = "solo"
COOPERATIVE = "cooperative"
COMMIT_MODES = (SOLO, COOPERATIVE)
SOLO_AFTER_CONFLICT_S = 10.0
"""After a conflict, a cooperative producer announces its batches at once for this long (step 0)."""
PARALLEL_INTENT_GETS = 8
ROUND_DELAY_CAP_S = 0.05
"""The longest jittered wait between a cooperative producer's rounds (the solo loop's grows to 1 s)."""
WAIT_POLL_S = (0.01, 0.25)
"""A waiting producer (not the round's committer) reads the head again when the next head change is due by the
recent gap between head changes (a quarter gap later if it is overdue), within these bounds."""
TAKEOVER_S = 0.2
"""A waiting producer LISTs and commits if its intent is the oldest once the head has not moved for this long, or
for 3 times the longest gap between head changes it saw lately if that is longer (a loaded store is slower, not
dead): the committer died, stalls or has nothing to write."""
DEAD_OLDEST_TAKEOVERS = 4
"""... and commits whatever the LIST says once the head has not moved for this many takeover intervals (the owner
of the oldest intent is dead or stalls too)."""
MAX_WAIT_S = 10.0
"""... and once its group has waited this long in all, whatever the head does (a backstop)."""


class _Wait:
    """A step's answer when another producer is the round's committer: no write, read the head again later."""

    def __repr__(self) -> str:
        return "WAIT"


WAIT = _Wait()


def check_commit_mode(value: object, segment_entries: int, *, spooled: bool = False) -> str:
    """``commit_mode`` is ``solo`` or ``cooperative``; cooperative needs v3 heads (the writers section),
    which a queue kept RFC v1 (K = 2147483647) never writes. InvalidConfigError naming it otherwise."""
    if value not in COMMIT_MODES:
        raise InvalidConfigError("commit_mode", value, f"use one of {', '.join(COMMIT_MODES)}")
    if value == COOPERATIVE and segment_entries == MAX_SEGMENT_ENTRIES:
        raise InvalidConfigError(
            "commit_mode",
            value,
            "cooperative commit writes v3 heads; manifest_segment_entries 2147483647 keeps the queue RFC v1",
        )
    if value == COOPERATIVE and spooled:
        raise InvalidConfigError(
            "commit_mode", value, "a spooled producer commits 'solo' (cooperative not built there)"
        )
    return str(value)


@dataclass(eq=False)
class _Group:
    """One group of this writer's batches being committed: its batch numbers and every name it had."""

    first_batch: int
    pending: Sequence[PendingLocation]
    start_next: int | None = None  # next_sequence of the first head seen: the group lands at or after it
    announced: tuple[str, ...] | None = None  # the locations of its last intent
    intent_keys: list[str] = field(default_factory=list)
    names: list[set[str]] = field(default_factory=list)
    sent_unknown: bool = False
    full: bool = False  # its last step found the queue full (backpressure)
    wait_started: float | None = None  # when the group first waited for another committer (monotonic)
    waited_version: object = None  # the head version it last waited on, and since when it has not moved
    waited_since: float = 0.0
    moves: int = 0  # head changes seen while waiting that did not carry the group
    listed: tuple[object, bool, list[ObjectInfo]] | None = None  # (head version, designated, LIST) of its last LIST
    sticky: bool = False  # its last step found the head its own recent write (it committed without waiting)
    own_write: bool = False  # the group landed in this writer's own CAS (it then deletes the round's intents)
    seen_mine: bool = False  # the head it last read has this writer's record (a next group may then be announced)

    @property
    def last_batch(self) -> int:
        return self.first_batch + len(self.pending) - 1


class CooperativeCommitter:
    """The cooperative side of one :class:`ManifestAppender` (``commit_mode="cooperative"``)."""

    def __init__(self, appender: ManifestAppender, writer_id: bytes) -> None:
        self.a = appender
        self.writer_id = writer_id
        self.next_batch = 0
        self._last_conflict: float | None = None
        self._intents: dict[str, Intent | None] = {}  # immutable objects: read once (None: rejected)
        self._head_gap = 0.0  # the longest gap between head changes seen while waiting, decaying
        self._gap = 0.1  # the recent gap between head changes (s, a moving average): when a waiter reads again
        self._own_head_at = 0.0
        self._own_head: bytes | None = None  # the head this writer's last landed CAS wrote: while it is the head,
        # this writer is the round's committer (the "sticky" committer, ADR 0007 session 15)
        self._appended_keys: list[str] = []  # other writers' intents its landing CAS appended (it deletes them)
        self.ahead: list[_Group] = []  # its next groups, announced while an older one waits (oldest first)
        self._last_raw: bytes | None = None  # the newest head it read or wrote: confirms its groups ahead
        self._resume: _Group | None = None  # the group ahead next_ahead gave out
        # A loser's next GET usually finds its group in: waits between rounds capped at ROUND_DELAY_CAP_S.
        policy = appender.policy
        self.loop = CasLoop(
            appender.manifest.cas_object,
            replace(policy, max_delay=min(policy.max_delay, ROUND_DELAY_CAP_S)),
            appender.clock,
            appender.rng,
            CasCounters.manifest(appender.metrics, "producer"),
            reuse_own_write=False,  # under contention the own last write is stale: a sure conflict
        )
        self._deleter = ThreadPoolExecutor(1, thread_name_prefix="osqueue-intent-delete")  # off the commit's path

    # -- one group -------------------------------------------------------------------------

    def next_ahead(self) -> list[PendingLocation] | None:  # its oldest group ahead, for the next commit()
        self._resume = self.ahead.pop(0) if self.ahead else None
        return None if self._resume is None else list(self._resume.pending)

    def commit(self, group: Sequence[PendingLocation]) -> list[tuple[int, str]]:
        a = self.a
        ahead, self._resume = self._resume, None
        if ahead is None:
            a._claim_prefixes(group)
            g = _Group(self.next_batch, group, names=[{p.location} for p in group])
            self.next_batch += len(group)
        else:  # announced while an older group waited: the head that confirmed that one may carry it too
            g = ahead
            early = _CoopSettle(self, g).landed(Snapshot(self._last_raw, None), None)
            if early is not None:
                self._deleter.submit(self._delete, list(g.intent_keys[:-1]))
                return early

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[list[tuple[int, str]] | _Wait]:
            g.full = False
            if isinstance(previous, Unknown):
                g.sent_unknown = True
            elif previous is not None:
                self._last_conflict = a.clock.monotonic()
            raw = empty_manifest(new_incarnation_epoch()) if snapshot.raw is None else snapshot.raw
            head = parse_head(raw, a.manifest.key)
            if g.start_next is None:
                g.start_next = head.next_sequence
            mine = writers_of(head.sections, a.manifest.key).get(self.writer_id)
            if snapshot.raw is not None:
                self._last_raw = snapshot.raw
            g.seen_mine = mine is not None
            landed = self._landed(raw, g, mine)
            if landed is not None:
                return Done(landed)
            a.metrics.counter(m.COMMIT_ROUNDS).inc()
            solo = previous is None and (
                self._last_conflict is None or a.clock.monotonic() - self._last_conflict >= SOLO_AFTER_CONFLICT_S
            )
            others: list[tuple[str, Intent]] = []
            if not solo:
                # The head's writer commits the next round while its write is recent (else it waits like others).
                sticky = (
                    snapshot.raw is not None
                    and snapshot.raw == self._own_head
                    and a.clock.monotonic() - self._own_head_at < max(TAKEOVER_S, 3 * self._head_gap)
                )
                g.sticky = sticky
                if not (sticky and previous is None and g.announced is None):
                    self._announce(g)  # the sticky committer's first try needs no intent: it writes its group itself
                listing: list[ObjectInfo] | None = None
                if not sticky:
                    designated, listing = self._should_commit(g, snapshot, head.sections)
                    if not designated:
                        return Done(WAIT)
                if listing is None:
                    listing = a.manifest.store.list(a.manifest.key)
                others = self._pending_others(head.sections, snapshot.raw is not None, listing)
            try:
                return self._write(raw, g, others)
            except QueueFullError:
                g.full = True  # nothing sent: an announced group is withdrawn after the wait (_withdraw)
                raise

        # The size caps (§2.3) as on the solo path: under backpressure wait per queue_full_timeout, then fail.
        def rounds() -> list[tuple[int, str]]:
            while True:
                settle: Settle[list[tuple[int, str]] | _Wait] = _CoopSettle(self, g)
                r = self.loop.run(step, settle)
                if not isinstance(r, _Wait):
                    return r
                self._take_ahead(g)
                a.clock.sleep(self._poll_delay(g))

        try:
            results = a.queue_full_wait.run(rounds, a.clock, a.metrics)
        except QueueFullError as full:
            if g.announced is None:
                raise
            try:
                results = self._withdraw(g, full)
            except QueueFullError:
                self._deleter.submit(self._delete, list(g.intent_keys))
                raise
        # The committer deletes the intents its CAS appended, its own included, in one request (left ones: GC, §6).
        keys = list(g.intent_keys) if g.own_write else list(g.intent_keys[:-1])
        if g.own_write:
            keys += self._appended_keys
            self._appended_keys = []
        if keys:
            self._deleter.submit(self._delete, keys)
        return results

    def _take_ahead(self, g: _Group) -> None:
        """While its group waits, a producer announces what was queued since as its next group (ADR 0007 session
        15), once the head has its record (its runs land from ``last_batch + 1`` on: in order, contiguous)."""
        if not g.seen_mine or g.announced is None:
            return
        more = self.a.take_queued()
        if not more:
            return
        try:
            self.a._claim_prefixes(more)
        except Exception as e:
            for p in more:
                p.future.set_exception(e)
            return
        n = _Group(self.next_batch, more, start_next=g.start_next, names=[{p.location} for p in more])
        self.next_batch += len(more)
        self.ahead.append(n)
        try:
            self._announce(n)
        except Exception:
            n.sent_unknown = True  # its intent may be out: its own rounds settle it

    def _withdraw(self, g: _Group, full: QueueFullError) -> list[tuple[int, str]]:
        """A group refused by a full queue whose intent is out: another committer could still append it, so one
        CAS sets this writer's record past the group (its batches then never land, §5.4: a run is appended
        only from ``last_batch + 1``) unless the group landed meanwhile (its results then). Raises ``full``."""
        a = self.a
        key = a.manifest.key
        unknown = []  # a withdrawing write of unknown outcome was sent: it may be what set the record

        def step(snapshot: Snapshot, previous: PreviousAttempt | None) -> CasStep[list[tuple[int, str]] | None]:
            if isinstance(previous, Unknown):
                unknown.append(previous)
            if snapshot.raw is None:
                return Done(None)
            head = parse_head(snapshot.raw, key)
            writers = dict(writers_of(head.sections, key))
            mine = writers.get(self.writer_id)
            if mine is not None and mine.last_batch >= g.first_batch:
                if unknown:  # our record, or someone appended the group: only its entries tell
                    found = self._locate(snapshot.raw, g)
                    if all(q >= 0 for q, _ in found):
                        return Done(found)
                    if any(q >= 0 for q, _ in found):
                        raise AmbiguousCommitError(
                            f"manifest '{key}': batches {g.first_batch}..{g.last_batch} of writer "
                            f"{self.writer_id.hex()} were refused (queue full) and withdrawn by a write of unknown "
                            "outcome; some of them are in"
                        )
                    return Done(None)
                return Done(self._landed(snapshot.raw, g, mine))
            now = a.clock.now_ms()
            writers[self.writer_id] = WriterRecord(self.writer_id, g.last_batch, now)
            new_raw, _ = head.with_sections(
                with_writers(head.sections, writers, now), a.segment_tree.children, cut=False
            )
            return Write(new_raw, lambda: None)

        landed = self.loop.run(step)
        if landed is not None:
            return landed
        raise full

    def _landed(self, raw: bytes, g: _Group, mine: WriterRecord | None) -> list[tuple[int, str]] | None:
        """This group's results if the head's writers section says it landed (exact, ADR 0006)."""
        if mine is None or mine.last_batch < g.first_batch:
            return None
        if mine.last_batch < g.last_batch:
            raise AmbiguousCommitError(
                f"manifest '{self.a.manifest.key}': writer {self.writer_id.hex()} has batches up to "
                f"{mine.last_batch} in, inside the group {g.first_batch}..{g.last_batch}: a group lands whole"
            )
        return self._locate(raw, g)

    def _locate(self, raw: bytes, g: _Group) -> list[tuple[int, str]]:
        """Where a group someone else appended landed: its names in the queue or the receipts (sequence -1:
        landed and dequeued before its owner looked, so no record of where)."""
        at = self.a._queued_locations_from(raw, g.start_next or 0)
        by_name = {loc: q for q, loc in at.items()}
        if not all(names & by_name.keys() for names in g.names):  # some already dequeued: ask the receipts
            history, _ = self.a._receipts_from(g.start_next or 0)
            for q, loc in history.items():
                by_name.setdefault(loc, q)
        out = []
        for names, p in zip(g.names, g.pending):
            found = [(by_name[n], n) for n in names if n in by_name]
            q, loc = found[0] if found else (-1, p.location)
            out.append((q, loc))
        return out

    def _announce(self, g: _Group) -> None:
        """PUTs the group's intent, after refreshing its batches so that each PUT started less than a
        quarter grace period ago: a committer then needs only the intent's store time (§5.4)."""
        a = self.a
        quarter = a._segment_max_age_ms(g.pending) // 2
        saved = [p.max_age_ms for p in g.pending]
        for p in g.pending:
            p.max_age_ms = quarter if p.max_age_ms is None else min(p.max_age_ms, quarter)
        try:
            a._refresh_stale(g.pending)
        finally:
            for p, s in zip(g.pending, saved):
                p.max_age_ms = s
        locations = tuple(p.location for p in g.pending)
        for names, loc in zip(g.names, locations):
            names.add(loc)
        if g.announced == locations:
            return
        ulid = encode_ulid(a.clock.now_ms(), a.rng.getrandbits(80))
        entries = self._entries(g)
        # The in-key form when the group fits its name (committers then read no body, §2.4); the same body.
        store = a.manifest.store
        limit = MAX_FILE_NAME_BYTES if store.uri.startswith("file:") else MAX_KEY_BYTES  # a local file name
        key = in_key_intent_key(a.manifest.key, ulid, self.writer_id, g.first_batch, entries, limit) or intent_key(
            a.manifest.key, ulid, self.writer_id, g.first_batch, len(g.pending)
        )
        store.put(key, encode_intent(self.writer_id, g.first_batch, entries))
        g.announced = locations
        g.intent_keys.append(key)
        a.metrics.counter(m.INTENTS_ANNOUNCED).inc()

    def _entries(self, g: _Group) -> list[NewEntry]:
        return [
            (p.location, p.metadata, p.extension + sequence_record(self.writer_id, g.first_batch + i))
            for i, p in enumerate(g.pending)
        ]

    def _fresh_names(
        self, sections: HeadSections, exists: bool, listing: list[ObjectInfo]
    ) -> list[tuple[str, IntentName]]:
        """Other writers' fresh intents in ``listing`` (a LIST of the manifest's key) not appended yet, by name."""
        a = self.a
        key = a.manifest.key
        head_ms = next((o.last_modified_ms for o in listing if o.key == key), None)
        if exists and head_ms is None:
            return []  # the head is not listed (a store that lags): judge nothing fresh
        quarter = a._segment_max_age_ms([]) // 2
        writers = writers_of(sections, key)
        names: list[tuple[str, IntentName]] = []
        prefix = intents_prefix(key)
        for o in listing:
            name = parse_intent_name(key, o.key) if o.key.startswith(prefix) else None
            if name is None or name.writer_id == self.writer_id:
                continue
            rec = writers.get(name.writer_id)
            if rec is not None and name.first_batch + name.count - 1 <= rec.last_batch:
                continue  # appended already
            # Store time only (§6): its batches' PUTs started < grace/4 before it, it is < grace/4 older than the head.
            if head_ms is not None and head_ms - o.last_modified_ms >= quarter:
                continue
            names.append((o.key, name))
        return names

    def _designated(self, g: _Group, sections: HeadSections, listing: list[ObjectInfo], exists: bool) -> bool:
        """Whether this producer is the round's committer: its group's intent is older than the oldest intent of
        every other writer's appendable run (judged by names alone, no GET), ties by writer id. Only one waiting
        producer then reads the intents and sends a CAS; the others read the head until their group is in."""
        mine = parse_intent_name(self.a.manifest.key, g.intent_keys[-1]) if g.intent_keys else None
        if mine is None:
            return True
        writers = writers_of(sections, self.a.manifest.key)
        by_writer: dict[bytes, dict[int, IntentName]] = {}
        for _, name in sorted(self._fresh_names(sections, exists, listing), key=lambda t: t[1].ulid):
            by_writer.setdefault(name.writer_id, {})[name.first_batch] = name  # the newer replaces the older
        for wid, taken in by_writer.items():
            rec = writers.get(wid)
            start = min(taken) if rec is None else rec.last_batch + 1
            run = []
            while start in taken:
                run.append(taken[start])
                start = taken[start].first_batch + taken[start].count
            if run and (min(n.ulid for n in run), wid) < (mine.ulid, self.writer_id):
                return False
        return True

    def _should_commit(
        self, g: _Group, snapshot: Snapshot, sections: HeadSections
    ) -> tuple[bool, list[ObjectInfo] | None]:
        """Whether a waiting producer commits this round (and the LIST it made to decide, if any). While the head
        keeps moving without its group for fewer than 2 changes, a committer is at work and the intent was out
        before its next LIST: wait, no LIST. After 2 such changes (no committer takes its intent: e.g. only solo
        writers), or when the head has not moved for TAKEOVER_S or 3 times the longest recent gap between head
        changes (the committer died, stalls, or has nothing to write), it LISTs once per head version and commits
        if its intent is the oldest appendable one; once the head has not moved for 4 times that, or its group has
        waited MAX_WAIT_S in all, it commits whatever the LIST says (a dead owner of the oldest intent)."""
        now = self.a.clock.monotonic()
        if g.wait_started is None:
            g.wait_started = now
        if snapshot.version != g.waited_version:
            if g.waited_version is not None:
                gap = now - g.waited_since
                self._head_gap = max(gap, 0.8 * self._head_gap)
                self._gap = 0.7 * self._gap + 0.3 * gap
                g.moves += 1
            g.waited_version, g.waited_since = snapshot.version, now
        takeover = max(TAKEOVER_S, 3 * self._head_gap)
        still = now - g.waited_since
        if still >= DEAD_OLDEST_TAKEOVERS * takeover or now - g.wait_started >= MAX_WAIT_S:
            return True, None
        if g.moves < 2 and still < takeover:
            return False, None
        if g.listed is None or g.listed[0] != snapshot.version:
            listing = self.a.manifest.store.list(self.a.manifest.key)
            g.listed = (snapshot.version, self._designated(g, sections, listing, snapshot.raw is not None), listing)
            if not g.listed[1]:
                g.moves = 0  # an older intent has its owner: wait for two more changes (or a still head) to LIST again
        return g.listed[1], g.listed[2]

    def _poll_delay(self, g: _Group) -> float:
        """When a waiting producer reads the head again: when the next change is due by the recent gap between
        head changes, or a quarter gap later when it is overdue (one read per round, not one per fixed tick)."""
        due = g.waited_since + self._gap - self.a.clock.monotonic()
        delay = due if due > WAIT_POLL_S[0] else self._gap / 4
        return min(max(delay * self.a.rng.uniform(0.9, 1.1), WAIT_POLL_S[0]), WAIT_POLL_S[1])

    def _pending_others(
        self, sections: HeadSections, exists: bool, listing: list[ObjectInfo]
    ) -> list[tuple[str, Intent]]:
        """Other writers' fresh announced batches, a contiguous run per writer from its ``last_batch + 1``
        (any first batch for a writer without a record); writers in the order of their oldest intent."""
        a = self.a
        writers = writers_of(sections, a.manifest.key)
        names = self._fresh_names(sections, exists, listing)
        for k, name in names:
            if name.payload is not None and k not in self._intents:
                try:  # in-key (§2.4): its name is the announcement, no GET
                    self._intents[k] = decode_in_key_intent(name, k)
                except CorruptManifestError:
                    self._intents[k] = None
                    a.metrics.counter(m.INTENTS_REJECTED).inc()
        # Forget what this round does not need: an appended, stale or deleted intent never becomes a candidate again.
        wanted = {k for k, _ in names}
        for k in [k for k in list(self._intents) if k not in wanted]:
            self._intents.pop(k, None)
        self._fetch([k for k, _ in names if k not in self._intents], dict(names))
        by_writer: dict[bytes, list[tuple[str, Intent]]] = {}
        for k, name in sorted(names, key=lambda t: t[1].ulid):
            intent = self._intents.get(k)
            if intent is not None:
                by_writer.setdefault(name.writer_id, []).append((k, intent))
        out: list[tuple[str, Intent]] = []
        for wid, found in by_writer.items():
            rec = writers.get(wid)
            expected = None if rec is None else rec.last_batch + 1
            taken: dict[int, tuple[str, Intent]] = {}
            for k, intent in found:  # oldest first: a newer intent for the same batches replaces it
                taken[intent.first_batch] = (k, intent)
            start = min(taken) if expected is None else expected
            while start in taken:
                out.append(taken[start])
                start = taken[start][1].last_batch + 1
        return out

    def _fetch(self, keys: list[str], names: dict[str, IntentName]) -> None:
        a = self.a

        def get(k: str) -> None:
            try:
                obj = a.manifest.store.get(k)
            except StoreError:
                return  # tried again next round
            if obj is None:
                return  # deleted: its batches landed
            try:
                self._intents[k] = decode_intent(obj.data, k, names[k])
            except CorruptManifestError:
                self._intents[k] = None
                a.metrics.counter(m.INTENTS_REJECTED).inc()

        if len(keys) <= 1:
            for k in keys:
                get(k)
            return
        with ThreadPoolExecutor(min(PARALLEL_INTENT_GETS, len(keys)), thread_name_prefix="osqueue-intents") as pool:
            list(pool.map(get, keys))

    def _write(self, raw: bytes, g: _Group, found: list[tuple[str, Intent]]) -> Write[list[tuple[int, str]] | _Wait]:
        """ONE append: this group, then the other writers' runs, with the writers section updated."""
        a = self.a
        key = a.manifest.key
        head = parse_head(raw, key)
        writers = dict(writers_of(head.sections, key))
        now = a.clock.now_ms()
        writers[self.writer_id] = WriterRecord(self.writer_id, g.last_batch, now)
        own: list[tuple[str, Intent]] = []  # its groups ahead first, in order: its record then covers them
        for n in self.ahead:
            try:
                self._announce(n)  # fresh batches (a re-upload re-announces it)
            except Exception:
                break
            own.append((n.intent_keys[-1], Intent(self.writer_id, n.first_batch, tuple(self._entries(n)))))
        found = own + found
        others = with_room(head, g.pending, [i for _, i in found])
        appended = [k for k, _ in found[: len(others)]]  # a prefix is kept
        extra: list[NewEntry] = []
        for intent in others:
            writers[intent.writer_id] = WriterRecord(intent.writer_id, intent.last_batch, now)
            extra += intent.entries
        sections = with_writers(head.sections, writers, now)
        new_raw, base = a._appended(raw, g.pending, sections=sections, tagged=partial(self._entries, g), extra=extra)
        # drop_oldest (§2.3): the same CAS cuts the oldest entries, never the ones it appends (from ``base`` on).
        cut = drop_oldest(new_raw, key, base, a.segment_tree)
        new_raw = new_raw if cut is None else cut.raw
        locations = [p.location for p in g.pending]
        for names, loc in zip(g.names, locations):
            names.add(loc)

        def result() -> list[tuple[int, str]] | _Wait:
            if cut is not None:
                cut.count(a.metrics)
            if len(others) > len(own):
                a.metrics.counter(m.INTENTS_APPENDED_FOR_OTHERS).inc(len(others) - len(own))
            g.own_write = True
            now_s = a.clock.monotonic()
            if g.sticky:  # the cadence of its rounds in a row is the head's (it wrote the head)
                self._head_gap = max(min(now_s - self._own_head_at, MAX_WAIT_S), 0.8 * self._head_gap)
            self._own_head, self._own_head_at = new_raw, now_s
            self._last_raw = new_raw
            self._appended_keys = appended
            return [(base + i, loc) for i, loc in enumerate(locations)]

        return Write(new_raw, result)

    def _delete(self, keys: Sequence[str]) -> None:
        """Deletes landed intents in one request where the store has one (S3's DeleteObjects), best effort: GC
        deletes what is left (§6), and a landed intent is skipped by its name until then."""
        try:
            delete_many(self.a.manifest.store, keys)
        except StoreError:
            pass


class _CoopSettle:
    """Settles a cooperative group when the CAS loop gives up: exact by the writers section."""

    def __init__(self, committer: CooperativeCommitter, g: _Group) -> None:
        self._c = committer
        self._g = g

    def landed(self, snapshot: Snapshot, previous: PreviousAttempt | None) -> list[tuple[int, str]] | None:
        if snapshot.raw is None:
            return None
        head = parse_head(snapshot.raw, self._c.a.manifest.key)
        return self._c._landed(
            snapshot.raw, self._g, writers_of(head.sections, self._c.a.manifest.key).get(self._c.writer_id)
        )

    def still_unknown(self, previous: PreviousAttempt | None) -> str | None:
        g = self._g
        if isinstance(previous, Unknown) or g.sent_unknown or (g.announced is not None and not g.full):
            # An announced group may still be appended by another committer (one refused by a full queue: _withdraw).
            return f"batches {self._g.first_batch}..{self._g.last_batch} of writer {self._c.writer_id.hex()}"
        return None
