"""``osqueue retention set|clear``: a queue's retention policy and size caps (docs/format.md §2.3, ADR 0005)."""

from __future__ import annotations

import re

import click

from osqueue.cli.app import cli
from osqueue.cli.options import QueueTarget, queue_options
from osqueue.durations import parse_duration
from osqueue.errors import InvalidConfigError
from osqueue.queue.queue_retention import POLICIES, POLICY_NAMES, QueueRetention

_SIZE = re.compile(r"\s*(\d+)\s*([kmgt]i?b|b)?\s*", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(option: str, value: str) -> int:
    """``1000``, ``512KiB``, ``50GiB``, ``2GB`` (case-insensitive) -> bytes.

    Raises:
        InvalidConfigError: Naming ``option``.
    """
    m = _SIZE.fullmatch(value)
    if m is None:
        raise InvalidConfigError(
            option, value, "use a number of bytes, optionally with B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"
        )
    return int(m.group(1)) * _UNITS[(m.group(2) or "b").lower()]


@cli.group()
def retention() -> None:
    """Set or clear a queue's retention policy: size caps (max entries, max bytes) with what happens when
    an append would pass them (backpressure: producers wait, then get QueueFull; drop_oldest: the oldest
    entries leave, and readers that had not read them are told the exact count)."""


@retention.command("set")
@queue_options
@click.option("--max-bytes", default=None, help="Cap on the queued bytes (e.g. 50GiB; 0: none).")
@click.option("--max-entries", type=click.IntRange(0), default=0, show_default=True, help="Cap on the queued entries.")
@click.option("--max-age", default=None, help="The oldest an unread entry may get (e.g. 7d; 0: none).")
@click.option("--policy", type=click.Choice(list(POLICIES)), default="backpressure", show_default=True)
def set_(target: QueueTarget, max_bytes: str | None, max_entries: int, max_age: str | None, policy: str) -> None:
    """Set the retention policy of the queue at PATH (one manifest write; replaces the one there)."""
    size = 0 if max_bytes is None else parse_size("--max-bytes", max_bytes)
    age_ms = 0 if max_age is None else round(parse_duration("--max-age", max_age) * 1000)
    store = target.open(must_exist=True)
    try:
        r = QueueRetention(store, target.manifest_path).set(
            max_age_ms=age_ms, max_bytes=size, max_entries=max_entries, policy=policy
        )
    finally:
        store.close()
    click.echo(
        f"retention of '{target.manifest_path}': policy {POLICY_NAMES[r.policy]}, max_entries {r.max_entries or '-'}, "
        f"max_bytes {r.max_bytes or '-'}, max_age_ms {r.max_age_ms or '-'}; {r.queued_bytes} bytes queued"
    )


@retention.command("enforce")
@queue_options
def enforce(target: QueueTarget) -> None:
    """Apply the queue's max_age now: remove the entries whose batch is older than it by the store's clock
    (readers that had not read them report the exact count as data loss). Run it from cron on a queue with
    --max-age (appends apply the size caps, not the age)."""
    store = target.open(must_exist=True)
    try:
        removed = QueueRetention(store, target.manifest_path).enforce()
    finally:
        store.close()
    click.echo(f"removed {removed} entries older than max_age")


@retention.command("clear")
@queue_options
def clear(target: QueueTarget) -> None:
    """Remove the retention policy of the queue at PATH (no caps: today's behaviour)."""
    store = target.open(must_exist=True)
    try:
        removed = QueueRetention(store, target.manifest_path).clear()
    finally:
        store.close()
    click.echo("retention cleared" if removed else "the queue had no retention policy")
