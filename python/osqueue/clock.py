"""The time seam (JVM: ``Clock``)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """The time seam: wall clock for ULIDs and ages, monotonic clock and sleep for waits."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    def sleep(self, seconds: float) -> None:
        """Waits ``seconds``."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
