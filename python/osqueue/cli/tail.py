"""``osqueue tail``: print a queue's entries, read-only or acking, optionally following."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import IO

import click

from osqueue.cli.app import cli
from osqueue.cli.formatting import b64
from osqueue.cli.options import CLOCK, QueueTarget, queue_options
from osqueue.consumer import ConsumedBatch, Consumer, FetchHandle
from osqueue.errors import BatchNotFoundError, IllegalQueueStateError
from osqueue.format import RawHead
from osqueue.format.index_object import decode_segment
from osqueue.queue import (
    BatchDescriptor,
    ManifestStore,
    SegmentTree,
)
from osqueue.queue.subscriptions import check_subscription_name


@dataclass
class _TailState:
    printed_batches: int = 0
    last_printed: int | None = None


def _write_batch(out: IO[str], batch: ConsumedBatch, fmt: str) -> None:
    items = batch.metadata
    item_index = -1
    for index, value in enumerate(batch.entries):
        if fmt == "json":
            while item_index + 1 < len(items) and items[item_index + 1].start_index <= index:
                item_index += 1
            meta = items[item_index] if item_index >= 0 else None
            record = {
                "sequence": batch.sequence,
                "index": index,
                "value_base64": b64(value),
                "metadata_base64": None if meta is None else b64(meta.payload),
                "ingestion_time_ms": None if meta is None else meta.ingestion_time_ms,
                "location": batch.location,
            }
            out.write(json.dumps(record) + "\n")
        else:
            out.write(value.decode("utf-8", errors="backslashreplace") + "\n")
    out.flush()


@cli.command()
@queue_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
    help="text: each entry as a UTF-8 line (undecodable bytes backslash-escaped); json: one JSON object "
    "per entry with sequence, index, base64 value and metadata.",
)
@click.option(
    "--ack",
    is_flag=True,
    help="Consume: take the queue over as its consumer (this FENCES any running consumer, e.g. a "
    "Spark query) and dequeue what was printed. Without it, tail only reads.",
)
@click.option("--follow", "-f", is_flag=True, help="Keep polling for new entries until Ctrl-C.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
@click.option("--max-batches", type=click.IntRange(min=1), default=None, help="Stop after this many batches.")
@click.option(
    "--subscription",
    default=None,
    help="Read from this named subscription's position; with --ack consume as it (fencing only that "
    "subscription's earlier reader, and moving only its position).",
)
def tail(
    target: QueueTarget,
    fmt: str,
    ack: bool,
    follow: bool,
    interval: float,
    max_batches: int | None,
    subscription: str | None,
) -> None:
    """Print the queue's entries in order.

    By default nothing is written: the manifest is read and the batches fetched read-only, so
    a running consumer is not disturbed. With --ack the printed batches are dequeued.
    """
    out = sys.stdout
    state = _TailState()
    fmt = fmt.lower()
    try:
        if ack:
            _tail_acking(target, out, fmt, follow, interval, max_batches, state, subscription)
        else:
            _tail_read_only(target, out, fmt, follow, interval, max_batches, state, subscription)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, without a second error on exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise click.exceptions.Exit(0) from None


def _done(state: _TailState, max_batches: int | None) -> bool:
    return max_batches is not None and state.printed_batches >= max_batches


def _tail_read_only(
    target: QueueTarget,
    out: IO[str],
    fmt: str,
    follow: bool,
    interval: float,
    max_batches: int | None,
    state: _TailState,
    subscription: str | None = None,
) -> None:
    store = target.open(must_exist=True)
    try:
        manifest_store = ManifestStore(store, target.manifest_path)
        tree = SegmentTree(manifest_store)
        fetcher = FetchHandle(store, target.manifest_path)

        def reread(_position: int) -> RawHead | None:
            raw = manifest_store.read_raw()[0]
            return None if raw is None else manifest_store.head(raw)

        while not _done(state, max_batches):
            head = manifest_store.head(manifest_store.read_raw()[0])
            start = 0 if state.last_printed is None else state.last_printed + 1
            if state.last_printed is None and subscription is not None:
                record = head.sections.subscription(check_subscription_name(subscription))
                if record is None:
                    raise IllegalQueueStateError(f"no subscription '{subscription}' in queue '{target.manifest_path}'")
                start = record.next
            # Segment by segment, then the tail: memory stays bounded at any depth (docs/format.md §2.2).
            # A segment or index object dequeued and collected meanwhile is skipped as its batches are.
            for entry in tree.entries_following(head, start, reread):
                if _done(state, max_batches):
                    break
                descriptor = BatchDescriptor.of(entry, manifest_store.key)
                try:
                    batch = fetcher.fetch(descriptor)
                except BatchNotFoundError:
                    # A consumer may have dequeued the entry and GC deleted its file since the
                    # read: skip it then; a batch the manifest still references is an error.
                    if _still_queued(manifest_store, tree, entry.sequence, entry.location):
                        raise
                    continue
                _write_batch(out, batch, fmt)
                state.printed_batches += 1
                state.last_printed = entry.sequence
            if not follow:
                break
            CLOCK.sleep(interval)
    except KeyboardInterrupt:
        if not follow:
            raise
    finally:
        store.close()


def _still_queued(manifest_store: ManifestStore, tree: SegmentTree, sequence: int, location: str) -> bool:
    """Whether the queue, read again, still holds ``location`` at ``sequence`` (one head GET, and the
    segment holding it if it is sealed)."""
    head: RawHead = manifest_store.head(manifest_store.read_raw()[0])
    if sequence < head.first_sequence:
        return False
    if sequence >= head.tail_first_sequence:
        return head.tail_location_at(sequence) == location
    leaf = tree.leaf_if_present(head, sequence)
    data = None if leaf is None else manifest_store.read_segment_bytes(leaf)
    # Gone since this read too: dequeued again meanwhile (a head that lists it is judged by the next pass).
    return (
        leaf is not None
        and data is not None
        and any(e.sequence == sequence and e.location == location for e in decode_segment(data, leaf))
    )


def _tail_acking(
    target: QueueTarget,
    out: IO[str],
    fmt: str,
    follow: bool,
    interval: float,
    max_batches: int | None,
    state: _TailState,
    subscription: str | None = None,
) -> None:
    target.open(must_exist=True).close()
    consumer = Consumer(
        target.path,
        manifest_path=target.manifest_path,
        data_path_prefix=target.data_prefix,
        store_options=target.store_options,
        subscription=subscription,
    )
    with consumer:
        try:
            while True:
                while not _done(state, max_batches):
                    batch = consumer.next_batch()
                    if batch is None:
                        break
                    _write_batch(out, batch, fmt)
                    consumer.ack(batch.sequence)  # acked only once fully printed
                    state.printed_batches += 1
                    state.last_printed = batch.sequence
                consumer.flush()
                if not follow or _done(state, max_batches):
                    break
                CLOCK.sleep(interval)
        except KeyboardInterrupt:
            pass  # close() below dequeues everything printed so far
        # Consumer.close() (the with block) dequeues what was acked since the last flush.
    if state.last_printed is not None:
        click.echo(f"acknowledged and dequeued through sequence {state.last_printed}", err=True)
