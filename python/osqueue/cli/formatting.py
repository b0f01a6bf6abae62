"""How the commands show sizes, ages, times and bytes."""

from __future__ import annotations

import base64
import datetime


def human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def human_age(ms: int) -> str:
    if ms < 0:
        return f"{human_age(-ms)} in the future"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def iso(ms: int) -> str:
    dt = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
