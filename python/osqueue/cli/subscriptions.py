"""``osqueue subscriptions create|list|drop``: a queue's named subscriptions (docs/format.md §2.3), and
the readers' positions ``inspect`` shows."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from osqueue.cli.app import cli
from osqueue.cli.formatting import human_bytes
from osqueue.cli.options import CLOCK, QueueTarget, queue_options
from osqueue.format import parse_batch_ulid_ms
from osqueue.format.batch_integrity import integrity_of
from osqueue.format.manifest_head import RawHead
from osqueue.queue.manifest_store import ManifestStore
from osqueue.queue.segment_tree import SegmentTree
from osqueue.queue.subscriptions import STARTING_POSITIONS, Subscriptions, positions


def _locator(manifest: ManifestStore | None, head: RawHead) -> Callable[[int], str | None]:
    """The location at a sequence: from the head's tail, else (with ``manifest``) from the segment
    holding it (one GET per segment, cached)."""
    tree = None if manifest is None else SegmentTree(manifest)
    cache: dict[str, dict[int, str]] = {}

    def locate(sequence: int) -> str | None:
        location = head.tail_location_at(sequence)
        if location is not None or tree is None or manifest is None:
            return location
        ref = tree.leaf_for(head, sequence)
        if ref is None:
            return None
        if ref.key not in cache:
            cache[ref.key] = {e.sequence: e.location for e in manifest.read_segment(ref)}
        return cache[ref.key].get(sequence)

    return locate


def _lag_bytes(head: RawHead, manifest: ManifestStore | None, walk_segments: bool) -> Callable[[int], dict[str, Any]]:
    """Lag in bytes from ``sequence`` to the queue's end, by the entries' integrity records (docs/format.md
    §2.1 type 3): ``lag_bytes`` sums the records found, ``lag_bytes_unknown_entries`` counts the entries
    without one (written before ADR 0006, or by a writer that records none). Entries in segments are read
    only with ``walk_segments`` (one GET per segment); otherwise, if the range reaches into segments,
    ``lag_bytes`` is null ("unknown")."""
    tail = head.tail_entries()
    tail_first = head.tail_first_sequence
    sizes: list[int | None] = []  # per tail entry, then prefix sums from the end
    for e in tail:
        rec = integrity_of(e.extension)
        sizes.append(None if rec is None else rec.byte_length)
    tree = None if manifest is None or not walk_segments else SegmentTree(manifest)

    def lag(sequence: int) -> dict[str, Any]:
        known, unknown = 0, 0
        if sequence < tail_first:
            if tree is None or manifest is None:
                return {"lag_bytes": None, "lag_bytes_unknown_entries": None}
            for ref in tree.leaves(head, sequence, tail_first):
                for e in manifest.read_segment(ref):
                    if sequence <= e.sequence < tail_first:
                        rec = integrity_of(e.extension)
                        known, unknown = (known + rec.byte_length, unknown) if rec else (known, unknown + 1)
        for i in range(max(0, sequence - tail_first), len(sizes)):
            size = sizes[i]
            known, unknown = (known + size, unknown) if size is not None else (known, unknown + 1)
        return {"lag_bytes": known, "lag_bytes_unknown_entries": unknown}

    return lag


def readers_json(
    head: RawHead, now_ms: int, manifest: ManifestStore | None = None, walk_segments: bool = False
) -> dict[str, Any]:
    """Each reader's position: ``next``, lag in entries (``next_sequence - max(next, low_water)``),
    dropped entries (``max(0, low_water - next)``), lag bytes (see :func:`_lag_bytes`: null when the
    range reaches into segments and ``walk_segments`` is off), age of its next entry by its batch
    name's ULID time (null when that is not a ULID name, or when the entry is in a segment and no
    ``manifest`` is given to read it), times; and the retention section."""
    low = head.first_sequence
    locate = _locator(manifest, head)
    lag_bytes = _lag_bytes(head, manifest, walk_segments)

    def age_ms(sequence: int) -> int | None:
        location = locate(sequence)
        t = None if location is None else parse_batch_ulid_ms(location)
        return None if t is None else max(0, now_ms - t)

    subs = [
        {
            "name": p.subscription.name,
            "epoch": p.subscription.epoch,
            "incarnation": p.subscription.incarnation,
            "next": p.subscription.next,
            "lag_entries": p.lag_entries,
            "dropped_entries": p.dropped_entries,
            **lag_bytes(max(p.subscription.next, low)),
            "age_ms": age_ms(max(p.subscription.next, low)) if p.lag_entries else 0,
            "created_ms": p.subscription.created_ms,
            "last_ack_ms": p.subscription.last_ack_ms,
        }
        for p in positions(head)
    ]
    unnamed = head.sections.unnamed_reader
    retention = head.sections.retention
    return {
        "low_water": low,
        "subscriptions": subs,
        "unnamed_reader": None
        if unnamed is None
        else {
            "next": unnamed.next,
            "lag_entries": head.next_sequence - max(unnamed.next, low),
            **lag_bytes(max(unnamed.next, low)),
            "last_ack_ms": unnamed.last_ack_ms,
        },
        "retention": None if retention is None else dict(retention.__dict__),
    }


def human_lag_bytes(reader: dict[str, Any]) -> str:
    """``1.2 KiB``, ``1.2 KiB + 3 entries of unknown size``, or ``unknown`` (see :func:`_lag_bytes`)."""
    if reader["lag_bytes"] is None:
        return "unknown bytes (in segments: --bytes reads them)"
    unknown = reader["lag_bytes_unknown_entries"]
    if unknown and unknown == reader["lag_entries"]:
        return "unknown bytes (no integrity records)"
    known = human_bytes(reader["lag_bytes"])
    return f"{known} + {unknown} entries of unknown size" if unknown else known


def reader_rows(
    head: RawHead, now_ms: int, manifest: ManifestStore | None = None, walk_segments: bool = False
) -> list[tuple[str, str]]:
    """``inspect``'s summary rows for the readers of a version 3 head."""
    info = readers_json(head, now_ms, manifest, walk_segments)
    rows = []
    for s in info["subscriptions"]:
        age = "-" if s["age_ms"] is None else f"{s['age_ms'] / 1000:.1f}s"
        dropped = f", {s['dropped_entries']} dropped" if s["dropped_entries"] else ""
        rows.append(
            (
                f"subscription {s['name']}",
                f"next {s['next']}, lag {s['lag_entries']} entries ({human_lag_bytes(s)}){dropped}, age {age}",
            )
        )
    if info["unnamed_reader"] is not None:
        u = info["unnamed_reader"]
        rows.append(("unnamed reader", f"next {u['next']}, lag {u['lag_entries']} entries ({human_lag_bytes(u)})"))
    r = head.sections.retention
    if r is not None:
        caps = [f"{n} {v}" for n, v in (("max_entries", r.max_entries), ("max_bytes", r.max_bytes)) if v]
        caps += [f"max_age {r.max_age_ms / 1000:g}s"] if r.max_age_ms else []
        policy = "drop_oldest" if r.policy else "backpressure"
        rows.append(("retention", f"{policy}, {', '.join(caps) or 'no cap'}; {r.queued_bytes} bytes queued"))
    return rows


@cli.group()
def subscriptions() -> None:
    """Create, list and drop a queue's named subscriptions (each one reads every entry; entries leave
    the queue once every subscription passed them)."""


@subscriptions.command("create")
@queue_options
@click.argument("name")
@click.option(
    "--start", type=click.Choice(STARTING_POSITIONS), default="earliest", show_default=True, help="Where it starts."
)
def create(target: QueueTarget, name: str, start: str) -> None:
    """Create subscription NAME of the queue at PATH."""
    store = target.open(must_exist=False)
    try:
        sub = Subscriptions(store, target.manifest_path, clock=CLOCK).create(name, start)
        click.echo(f"created subscription '{sub.name}' at sequence {sub.next} (incarnation {sub.incarnation})")
    finally:
        store.close()


@subscriptions.command("list")
@queue_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(target: QueueTarget, as_json: bool) -> None:
    """List the subscriptions of the queue at PATH with their positions and lag."""
    store = target.open(must_exist=True)
    try:
        subs = Subscriptions(store, target.manifest_path)
        info = readers_json(subs.head(), CLOCK.now_ms(), subs.manifest)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    for s in info["subscriptions"]:
        click.echo(f"{s['name']}\tnext {s['next']}\tlag {s['lag_entries']}\tdropped {s['dropped_entries']}")


@subscriptions.command("drop")
@queue_options
@click.argument("name", required=False)
@click.option("--unnamed", is_flag=True, help="Drop the unnamed (RFC) reader's record instead.")
def drop(target: QueueTarget, name: str | None, unnamed: bool) -> None:
    """Drop subscription NAME (its readers are fenced; entries only it held leave the queue)."""
    if (name is None) == (not unnamed):
        raise click.UsageError("give NAME or --unnamed")
    store = target.open(must_exist=True)
    try:
        subs = Subscriptions(store, target.manifest_path, clock=CLOCK)
        existed = subs.drop_unnamed() if unnamed else subs.drop(name or "")
    finally:
        store.close()
    what = "the unnamed reader" if unnamed else f"subscription '{name}'"
    click.echo(f"dropped {what}" if existed else f"{what}: not found")
