"""``osqueue inspect``: the manifest as a summary or as JSON."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from osqueue.cli.app import cli
from osqueue.cli.formatting import b64, human_age, human_bytes, iso
from osqueue.cli.options import CLOCK, QueueTarget, queue_options
from osqueue.cli.subscriptions import reader_rows, readers_json
from osqueue.format import HEAD_VERSION, Manifest, ManifestHead, decode_head, parse_batch_ulid_ms
from osqueue.format.manifest_head import parse_head
from osqueue.queue import (
    ManifestStore,
)
from osqueue.store import ObjectStore


def manifest_to_json(manifest: Manifest, version: int | None) -> dict[str, Any]:
    """The manifest as the JSON that ``inspect --json`` prints: every field, bytes in base64."""
    return {
        "version": version,
        "epoch": manifest.epoch,
        "next_sequence": manifest.next_sequence,
        "entries": [
            {
                "sequence": e.sequence,
                "location": e.location,
                "metadata": [
                    {
                        "start_index": m.start_index,
                        "ingestion_time_ms": m.ingestion_time_ms,
                        "payload_base64": b64(m.payload),
                    }
                    for m in e.metadata
                ],
                # The entry's extension bytes (e.g. the Spark sink's write tag, docs/format.md §2.1).
                "extension_base64": b64(e.extension),
            }
            for e in manifest.entries
        ],
    }


@cli.command()
@queue_options
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON instead of a summary.")
@click.option(
    "--bytes",
    "walk_segments",
    is_flag=True,
    help="Readers' lag in bytes also over entries in segments (reads them: one GET per segment).",
)
def inspect(target: QueueTarget, as_json: bool, walk_segments: bool) -> None:
    """Summarize a queue: entries, sequences, epoch, queued bytes, oldest entry age."""
    store = target.open(must_exist=True)
    try:
        manifest_store = ManifestStore(store, target.manifest_path)
        raw, _ = manifest_store.read_raw()
        version = None if raw is None else int.from_bytes(raw[-2:], "little")
        if raw is not None and version in (HEAD_VERSION, 3):
            # A segmented head (docs/format.md §2.2), or one with sections (§2.3): shown from the head
            # alone, no segment or index is read.
            head = decode_head(raw, target.manifest_path)
            readers = (
                readers_json(parse_head(raw, target.manifest_path), CLOCK.now_ms(), manifest_store, walk_segments)
                if not head.sections.is_empty
                else None
            )
            if as_json:
                out = head_to_json(head, len(raw))
                if readers is not None:
                    out["readers"] = readers
                click.echo(json.dumps(out, indent=2))
            else:
                _print_head_summary(target, store, head, len(raw), raw, walk_segments)
            return
        manifest = manifest_store.decode(raw)
        if as_json:
            click.echo(json.dumps(manifest_to_json(manifest, version), indent=2))
            return
        _print_summary(target, store, manifest, raw, version)
    finally:
        store.close()


def head_to_json(head: ManifestHead, head_bytes: int) -> dict[str, Any]:
    """A segmented head as JSON: depth, the head's refs (any level) and the tail's sequences (entries
    stay in the segments, refs of lower levels in the index objects)."""
    return {
        "format_version": head.version,
        "head_bytes": head_bytes,
        "next_sequence": head.next_sequence,
        "epoch": head.epoch,
        "incarnation": head.epoch >> 32,
        "depth": head.depth,
        "first_sequence": head.first_sequence,
        "low_water": head.low_water,
        "refs_per_level": {str(level): n for level, n in _levels(head).items()},
        "refs": [
            {
                "key": r.key,
                "level": r.level,
                "first_sequence": r.first_sequence,
                "last_sequence": r.last_sequence,
                "entry_count": r.entry_count,
                "byte_length": r.byte_length,
                "sha256": r.sha256.hex(),
                "oldest_batch_ms": r.oldest_batch_ms,
            }
            for r in head.refs
        ],  # fmt: skip
        "tail_entries": len(head.tail),
        "tail_sequences": [head.tail[0].sequence, head.tail[-1].sequence] if head.tail else None,
    }


def _print_head_summary(
    target: QueueTarget, store: ObjectStore, head: ManifestHead, head_bytes: int, raw: bytes, walk_segments: bool
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"osqueue {store.uri}", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row(
        "manifest",
        f"{target.manifest_path} ({human_bytes(head_bytes)}, format version {head.version}: "
        + ("a segmented head)" if head.sections.is_empty else "a head with subscriptions or retention)"),
    )
    table.add_row("entries (depth)", f"{head.depth} (from the head: no segment read)")
    table.add_row("sequences", f"{head.first_sequence}..{head.next_sequence - 1}" if head.depth else "-")
    table.add_row("next sequence", str(head.next_sequence))
    table.add_row("epoch", str(head.epoch))
    levels = ", ".join(
        f"level {level}: {n} {'segment' if level == 0 else 'index'}{'s' if n > 1 and level == 0 else ''}"
        f"{'es' if n > 1 and level > 0 else ''}"
        for level, n in _levels(head).items()
    )
    table.add_row("refs", f"{len(head.refs)} in the head ({levels}), low water {head.low_water}")
    if not head.sections.is_empty:
        for field, value in reader_rows(
            parse_head(raw, target.manifest_path),
            CLOCK.now_ms(),
            ManifestStore(store, target.manifest_path),
            walk_segments,
        ):
            table.add_row(field, value)
    table.add_row("tail", f"{len(head.tail)} entries in the head")
    oldest = [r.oldest_batch_ms for r in head.refs if r.oldest_batch_ms != (1 << 63) - 1]
    if oldest:
        table.add_row("oldest batch", f"{iso(min(oldest))} (age {human_age(CLOCK.now_ms() - min(oldest))})")
    Console(soft_wrap=False, width=max(100, _terminal_width())).print(table)


def _levels(head: ManifestHead) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in head.refs:
        counts[r.level] = counts.get(r.level, 0) + 1
    return dict(sorted(counts.items()))


def _print_summary(
    target: QueueTarget, store: ObjectStore, manifest: Manifest, raw: bytes | None, version: int | None
) -> None:
    from rich.console import Console
    from rich.table import Table

    now = CLOCK.now_ms()
    referenced = {e.location for e in manifest.entries}
    listed = {info.key: info.size for info in store.list(target.data_prefix + "/")} if target.data_prefix else {}
    queued_bytes = sum(size for key, size in listed.items() if key in referenced)
    missing = sorted(referenced - listed.keys())
    prefix = target.data_prefix + "/"
    unreferenced = [
        key
        for key in listed
        if key not in referenced and "/" not in key[len(prefix) :] and parse_batch_ulid_ms(key) is not None
    ]

    table = Table(title=f"osqueue {store.uri}", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    if raw is None:
        table.add_row("manifest", f"{target.manifest_path} (missing: an empty queue)")
    else:
        table.add_row("manifest", f"{target.manifest_path} ({human_bytes(len(raw))}, format version {version})")
    table.add_row("entries", str(len(manifest.entries)))
    if manifest.entries:
        table.add_row("sequences", f"{manifest.entries[0].sequence}..{manifest.entries[-1].sequence}")
    else:
        table.add_row("sequences", "-")
    table.add_row("next sequence", str(manifest.next_sequence))
    table.add_row("epoch", str(manifest.epoch))
    table.add_row("queued bytes", f"{queued_bytes} ({human_bytes(queued_bytes)})")
    first_meta = manifest.entries[0].metadata if manifest.entries else []
    if first_meta:
        oldest = first_meta[0].ingestion_time_ms
        table.add_row("oldest entry", f"{iso(oldest)} (age {human_age(now - oldest)})")
    else:
        table.add_row("oldest entry", "-")
    last_meta = manifest.entries[-1].metadata if manifest.entries else []
    if last_meta:
        newest = last_meta[-1].ingestion_time_ms
        table.add_row("newest entry", f"{iso(newest)} (age {human_age(now - newest)})")
    table.add_row("unreferenced batches", f"{len(unreferenced)} under {prefix} (being enqueued, or orphans for GC)")
    if missing:
        table.add_row("missing batches", f"{len(missing)} referenced but not found, first: {missing[0]}")
    Console(soft_wrap=False, width=max(100, _terminal_width())).print(table)


def _terminal_width() -> int:
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0
