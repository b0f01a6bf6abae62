"""Every figure is a median with its spread (min, max, quartiles) over repeated runs."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of sorted values."""
    if not sorted_values:
        return float("nan")
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median with its spread: min, max, p25, p75 (IQR) and the number of runs."""
    vs = sorted(float(v) for v in values)
    if not vs:
        return {"median": None, "min": None, "max": None, "p25": None, "p75": None, "n": 0}
    return {
        "median": statistics.median(vs),
        "min": vs[0],
        "max": vs[-1],
        "p25": percentile(vs, 25),
        "p75": percentile(vs, 75),
        "n": len(vs),
    }


def fmt(stat: dict[str, Any], unit: str = "", digits: int = 1) -> str:
    if stat.get("median") is None:
        return "-"
    return f"{stat['median']:.{digits}f}{unit} ({stat['min']:.{digits}f}–{stat['max']:.{digits}f})"
