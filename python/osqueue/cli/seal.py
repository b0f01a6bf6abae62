"""``osqueue seal``: one manifest write that only seals (docs/format.md §2.2, ADR 0007 part 2)."""

from __future__ import annotations

import random

import click

from osqueue.cli.app import cli
from osqueue.cli.formatting import plural
from osqueue.cli.options import CLOCK, QueueTarget, queue_options
from osqueue.format.manifest_head import DEFAULT_SEGMENT_ENTRIES, MAX_SEGMENT_ENTRIES
from osqueue.metrics import MetricsRegistry
from osqueue.queue import ManifestAppender, ManifestStore, RetryPolicy


@cli.command()
@queue_options
@click.option(
    "--segment-entries",
    type=click.IntRange(1, MAX_SEGMENT_ENTRIES),
    default=DEFAULT_SEGMENT_ENTRIES,
    show_default=True,
    help="K: entries per segment (the producers' manifest_segment_entries).",
)
def seal(target: QueueTarget, segment_entries: int) -> None:
    """Seal a deep manifest into segments of K entries, in one compare-and-swap.

    A tail of more than K entries (an RFC v1 queue written by the reference or with segmentation
    off) becomes segments of exactly K entries and index objects; a segment of more than 2K entries
    is split the same way. Nothing queued changes: consumers read the same entries in the same order.
    """
    store = target.open(must_exist=True)
    try:
        appender = ManifestAppender(
            ManifestStore(store, target.manifest_path),
            CLOCK,
            random.Random(),
            RetryPolicy(),
            MetricsRegistry(),
            segment_entries,
        )
        moved = appender.seal()
    finally:
        store.close()
    if moved == 0:
        click.echo(f"nothing to seal: no tail over {segment_entries} entries and no segment over {2 * segment_entries}")
    else:
        click.echo(f"sealed {plural(moved, 'entry', 'entries')} into segments of at most {segment_entries}")
