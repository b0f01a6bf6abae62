"""``osqueue gc``: list (or delete) the batch files no manifest entry references."""

from __future__ import annotations

import click

from osqueue.cli.app import CliError, cli
from osqueue.cli.formatting import human_age, plural
from osqueue.cli.options import QueueTarget, queue_options
from osqueue.format import parse_batch_ulid_ms
from osqueue.gc import GarbageCollector
from osqueue.queue import DEFAULT_GC_GRACE_PERIOD_MS


@cli.command()
@queue_options
@click.option("--apply", "apply_", is_flag=True, help="Delete the files (default: only list them).")
@click.option(
    "--grace-period",
    type=click.FloatRange(min=0),
    default=DEFAULT_GC_GRACE_PERIOD_MS / 1000,
    show_default=True,
    help="Seconds a file must have existed (by the store's last-modified time) before it may be deleted; "
    "the queue's own grace period applies when it is longer.",
)
def gc(target: QueueTarget, apply_: bool, grace_period: float) -> None:
    """Delete batch files no manifest entry references (a dry run unless --apply).

    A file is deleted only if it is an unreferenced <ULID>.batch directly under the data
    prefix, older than the oldest referenced batch, and older than the grace period.
    """
    store = target.open(must_exist=True)
    try:
        collector = GarbageCollector(store, target.manifest_path, target.data_prefix, grace_period=grace_period)
        manifest_exists = store.get(target.manifest_path) is not None
        result = collector.run_once(dry_run=not apply_)
    finally:
        store.close()
    verb = "would delete" if result.dry_run else "deleted"
    click.echo(
        f"{verb} {plural(len(result.deleted), 'unreferenced batch file', 'unreferenced batch files')} "
        f"older than the oldest referenced batch and the {result.grace_period_ms / 1000:g} s grace period"
        + (
            f" (the queue's; --grace-period {grace_period:g} is shorter)"
            if result.grace_period_ms > grace_period * 1000
            else ""
        )
        + (":" if result.deleted else "")
    )
    for key in result.deleted:
        created = parse_batch_ulid_ms(key)
        age = "" if created is None else f"  (age {human_age(result.snapshot_time_ms - created)})"
        click.echo(f"  {key}{age}")
    # The manifest usually sits under the data prefix too (ingest/manifest): name it apart.
    others = result.kept_not_batch
    manifest_listed = target.manifest_path.startswith(target.data_prefix + "/") and manifest_exists
    if manifest_listed and others > 0:
        others -= 1
    click.echo(
        f"kept: {result.kept_referenced} referenced by the manifest, "
        f"{result.kept_newer_than_oldest} not older than the oldest referenced batch, "
        f"{result.kept_in_grace} within the grace period, "
        f"{others} other files under {target.data_prefix}/ (not <ULID>.batch)"
        + (" besides the manifest" if manifest_listed else "")
    )
    if result.failed:
        for key in result.failed:
            click.echo(f"  failed to delete {key}", err=True)
        raise CliError(f"{len(result.failed)} deletes failed (a later run retries them)")
    if result.dry_run:
        click.echo("dry run: nothing was deleted; re-run with --apply to delete")
