"""The one duration grammar (JVM: ``Durations``)."""

from __future__ import annotations

import re

from osqueue.errors import InvalidConfigError

_DURATION = re.compile(r"(?i)^\s*(\d+)\s*(ns|us|ms|s|min|m|h|d)?\s*$")
_DURATION_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(option: str, value: object) -> float:
    """The one duration grammar (tests/golden/vocabulary.json; JVM: ``osqueue.Durations``): ``60000`` (ms),
    ``200s``, ``5m``/``5min``, ``1h``, ``2d``, ``100us``, ``10ns`` -> seconds."""
    m = _DURATION.match(str(value))
    if not m:
        raise InvalidConfigError(option, value, "expected a duration such as 60000 (ms), 200s, 5m or 1h")
    return int(m.group(1)) * _DURATION_SECONDS[(m.group(2) or "ms").lower()]
