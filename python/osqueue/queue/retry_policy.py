"""Backoff and give-up rules for manifest writes (JVM: ``RetryPolicy``)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from osqueue.clock import Clock
from osqueue.errors import InvalidConfigError


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff and budget of manifest compare-and-swap retries.

    The n-th retry waits a uniformly random time in ``[0, min(max_delay, base_delay * 2^(n-1))]``
    (full jitter). Retrying stops after ``max_attempts`` attempts or ``max_elapsed`` seconds.
    """

    base_delay: float = 0.010
    max_delay: float = 1.0
    max_elapsed: float = 30.0
    max_attempts: int = 1000

    def __post_init__(self) -> None:
        if self.base_delay < 0 or self.max_delay < 0:
            raise InvalidConfigError("base_delay/max_delay", f"{self.base_delay}/{self.max_delay}", "must be >= 0")
        if self.max_attempts < 1:
            raise InvalidConfigError("max_attempts", self.max_attempts, "must be at least 1")
        if self.max_elapsed <= 0:
            raise InvalidConfigError("max_elapsed", self.max_elapsed, "must be > 0")

    def budget(self, clock: Clock, rng: random.Random) -> _Budget:
        """The attempts of one operation under this policy."""
        return _Budget(self, clock, rng)

    def delay(self, retry: int, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (1-based)."""
        cap = min(self.max_delay, self.base_delay * (2 ** min(retry - 1, 62)))
        return rng.uniform(0.0, cap)


class _Budget:
    """Counts attempts and sleeps between them."""

    def __init__(self, policy: RetryPolicy, clock: Clock, rng: random.Random) -> None:
        self.policy = policy
        self.clock = clock
        self.rng = rng
        self.start = clock.monotonic()
        self.attempts = 0

    def elapsed_ms(self) -> int:
        return int((self.clock.monotonic() - self.start) * 1000)

    def retry(self) -> bool:
        """Records a failed attempt; sleeps and returns True if another one is allowed."""
        self.attempts += 1
        if self.attempts >= self.policy.max_attempts:
            return False
        if self.clock.monotonic() - self.start >= self.policy.max_elapsed:
            return False
        self.clock.sleep(self.policy.delay(self.attempts, self.rng))
        return True
