"""The read-modify-compare-and-swap loop every write of a CAS object, the manifest's above all,
goes through (JVM: ``osqueue.queue.CasLoop``).

The same algorithm on both sides: read the object (a failed read is retried within the budget),
let a *step* look at the snapshot and how the previous write ended, write conditionally on the
snapshot, and after a conflict or a write of unknown outcome back off (full jitter) and start
again, within a bounded budget. A caller that tracks its own writes of unknown outcome passes a
:class:`Settle`, so that giving up while such a write may still land is reported as
:class:`~osqueue.errors.AmbiguousCommitError`, never as a plain failure that invites a duplicate.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, NoReturn, Protocol, TypeVar

from osqueue import metrics as m
from osqueue.clock import SystemClock
from osqueue.errors import AmbiguousCommitError, ConflictRetriesExhaustedError, OsqueueError, StoreError
from osqueue.queue.cas_object import Snapshot
from osqueue.queue.retry_policy import RetryPolicy
from osqueue.store.object_store import Written

if TYPE_CHECKING:
    from osqueue.clock import Clock
    from osqueue.queue.cas_object import CasObject

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class Done(Generic[T]):
    """Nothing (more) to write: the edit's result."""

    result: T


@dataclass(frozen=True)
class Write(Generic[T]):
    """Write ``data`` conditionally on the snapshot; ``result()`` is the value once it lands."""

    data: bytes
    result: Callable[[], T]


CasStep = Done[T] | Write[T]
"""What an edit of a CAS object wants after looking at a snapshot."""


class _Conflict:
    """The precondition failed: someone else wrote first (or, rarely, a retried write of ours landed)."""

    def __repr__(self) -> str:
        return "CONFLICT"


CONFLICT = _Conflict()


@dataclass(frozen=True)
class Unknown:
    """The write raised: it may or may not have been applied."""

    error: StoreError


PreviousAttempt = _Conflict | Unknown
"""How the previous conditional write ended, as the next step sees it."""


class Settle(Protocol[T_co]):
    """How a caller that tracks its own writes of unknown outcome settles them when the loop gives up."""

    def landed(self, snapshot: Snapshot, previous: PreviousAttempt | None) -> T_co | None:
        """A last look at a fresh snapshot: the result if one of the caller's earlier writes landed."""
        ...

    def still_unknown(self, previous: PreviousAttempt | None) -> str | None:
        """A write whose outcome is still unknown (it may have landed or may still land), described."""
        ...


@dataclass(frozen=True)
class CasCounters:
    """What a :class:`CasLoop` counts: its landed writes, conflicts and writes of unknown outcome.

    Only the manifest's loops count (``buffer.manifest_*`` with ``role``), so that those stay
    counts of manifest writes; other objects' loops are counted nowhere (JVM: the same).
    """

    writes: m.Counter
    conflicts: m.Counter
    ambiguous: m.Counter

    @staticmethod
    def manifest(metrics: m.MetricsRegistry, role: str) -> CasCounters:
        return CasCounters(
            metrics.counter(m.MANIFEST_WRITES, role=role),
            metrics.counter(m.MANIFEST_CONFLICTS, role=role),
            metrics.counter(m.MANIFEST_AMBIGUOUS_WRITES, role=role),
        )

    @staticmethod
    def uncounted() -> CasCounters:
        """Counters no registry holds: the loop of an object that is not the manifest."""
        return CasCounters(m.Counter(), m.Counter(), m.Counter())


class CasLoop:
    """Runs edits of a :class:`~osqueue.queue.cas_object.CasObject`: re-read after each failed or
    unknown write, jittered exponential backoff, bounded budget (``RetryPolicy``), counted on
    ``counters`` (the manifest's: :meth:`CasCounters.manifest`).

    With ``reuse_own_write`` (the producers' appends), a run starts from the bytes this loop's last
    landed write put there and the version the store returned for them, instead of reading: a lone
    writer makes one request per edit. That snapshot serves only as the first write's precondition:
    a stale one costs a conflict and a fresh read, a step that would not write on it is asked again
    on a fresh read, and a write of unknown outcome leaves nothing to reuse (JVM: the same)."""

    def __init__(
        self,
        obj: CasObject,
        policy: RetryPolicy,
        clock: Clock,
        rng: random.Random,
        counters: CasCounters,
        *,
        reuse_own_write: bool = False,
    ) -> None:
        self.obj = obj
        self.policy = policy
        self.clock = clock
        self.rng = rng
        self._writes = counters.writes
        self._conflicts = counters.conflicts
        self._ambiguous = counters.ambiguous
        self._reuse_own_write = reuse_own_write
        # The object as this loop's last landed write left it (taken by the next run; None: read).
        self._own_write: Snapshot | None = None
        self._own_write_lock = threading.Lock()

    def run(
        self,
        step: Callable[[Snapshot, PreviousAttempt | None], CasStep[T]],
        settle: Settle[T] | None = None,
    ) -> T:
        started = self.clock.monotonic()
        attempts = 0
        previous: PreviousAttempt | None = None
        reused = None
        if self._reuse_own_write:
            with self._own_write_lock:
                reused, self._own_write = self._own_write, None
        while True:
            from_own_write = reused is not None
            if reused is not None:
                snapshot, reused = reused, None
            else:
                try:
                    snapshot = self.obj.read()
                except StoreError as e:
                    # A failed read is one more failed try: retried within the budget like a failed write.
                    attempts += 1
                    if self._spent(attempts, started):
                        self._raise_settled(settle, previous, e)
                    self.clock.sleep(self.policy.delay(attempts, self.rng))
                    continue
            # Whatever the step raises (a failed stale re-upload) while an earlier write is
            # undecided is ambiguous too: "not written" would invite a duplicate retry.
            try:
                following = step(snapshot, previous)
            except AmbiguousCommitError:
                raise
            except Exception as e:
                self._raise_settled(settle, previous, e)
            if isinstance(following, Done):
                if from_own_write:
                    continue  # decided on a fresh read only: read and ask again
                return following.result
            attempts += 1
            try:
                outcome = self.obj.write(following.data, snapshot.version)
            except StoreError as e:
                if e.outcome_known:
                    # Rejected outright (e.g. 403): certainly not applied, and retrying cannot help.
                    previous = CONFLICT
                    self._raise_settled(settle, previous, e)
                self._ambiguous.inc()
                previous = Unknown(e)
            else:
                if isinstance(outcome, Written):
                    self._writes.inc()  # landed writes only (bench/README: attempts = writes + conflicts)
                    if self._reuse_own_write:
                        with self._own_write_lock:
                            self._own_write = Snapshot(following.data, outcome.version)
                    return following.result()
                self._conflicts.inc()
                previous = CONFLICT
            if self._spent(attempts, started):
                return self._give_up(step, settle, previous, attempts, started)
            self.clock.sleep(self.policy.delay(attempts, self.rng))

    def _spent(self, attempts: int, started: float) -> bool:
        return attempts >= self.policy.max_attempts or self.clock.monotonic() - started >= self.policy.max_elapsed

    def _give_up(
        self,
        step: Callable[[Snapshot, PreviousAttempt | None], CasStep[T]],
        settle: Settle[T] | None,
        previous: PreviousAttempt | None,
        attempts: int,
        started: float,
    ) -> T:
        elapsed_ms = int((self.clock.monotonic() - started) * 1000)
        exhausted: OsqueueError
        if isinstance(previous, Unknown):
            exhausted = StoreError(
                f"manifest '{self.obj.key}': gave up after {attempts} attempts in {elapsed_ms} ms; "
                f"the store kept failing (last: {previous.error})"
            )
        else:
            exhausted = ConflictRetriesExhaustedError(self.obj.key, attempts, elapsed_ms)
        if settle is not None:
            if settle.still_unknown(previous) is not None:
                # A failed last look leaves the write undecided: reported as ambiguous below.
                try:
                    last_look = self.obj.read()
                except StoreError:
                    pass
                else:
                    landed = settle.landed(last_look, previous)
                    if landed is not None:
                        return landed
            self._raise_settled(settle, previous, exhausted)
        if isinstance(previous, Unknown):
            # One last look: the step either finds its edit done, or wants to write again (it did not land).
            last = step(self.obj.read(), previous)
            if isinstance(last, Done):
                return last.result
            raise exhausted from previous.error
        raise exhausted

    def _raise_settled(self, settle: Settle[T] | None, previous: PreviousAttempt | None, error: Exception) -> NoReturn:
        """Raises ``error`` as the caller sees it: ambiguous while a write of unknown outcome may still land."""
        write = None if settle is None else settle.still_unknown(previous)
        if write is None:
            raise error
        raise AmbiguousCommitError(
            f"manifest '{self.obj.key}': gave up ({error}) while {write} had an unknown outcome; "
            "it may still land, so it is neither reported as written nor as failed"
        ) from error


def admin_loop(
    obj: CasObject,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    retry: RetryPolicy | None = None,
    metrics: m.MetricsRegistry | None = None,
) -> CasLoop:
    """The CAS loop of an administrative manifest write (subscriptions, retention): the defaults a
    caller leaves out, and its writes counted under the role ``consumer``."""
    return CasLoop(
        obj,
        retry or RetryPolicy(),
        clock or SystemClock(),
        rng or random.Random(),
        CasCounters.manifest(metrics or m.REGISTRY, "consumer"),
    )
