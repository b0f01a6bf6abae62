"""``osqueue produce``: lines or whole files from FILEs or stdin into a queue."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

import click

from osqueue.cli.app import cli
from osqueue.cli.formatting import plural
from osqueue.cli.options import QueueTarget, queue_options
from osqueue.format.manifest_head import DEFAULT_SEGMENT_ENTRIES, MAX_SEGMENT_ENTRIES
from osqueue.producer import Producer, WriteHandle


def _input_lines(stream: IO[bytes]) -> Iterator[bytes]:
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield line


@cli.command()
@queue_options
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--whole-files", is_flag=True, help="Make each FILE (or all of stdin) one entry instead of one per line.")
@click.option("--metadata", default="", help="Metadata attached to every entry (UTF-8 text).")
@click.option(
    "--compression",
    type=click.Choice(["none", "zstd"], case_sensitive=False),
    default="none",
    show_default=True,
    help="Batch compression.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Entries per produce() call (each call is one metadata range in a batch).",
)
@click.option(
    "--manifest-segment-entries",
    type=click.IntRange(min=1, max=MAX_SEGMENT_ENTRIES),
    default=DEFAULT_SEGMENT_ENTRIES,
    show_default=True,
    help="K: seal the manifest's tail into a segment object past this many entries (docs/format.md §2.2); "
    f"{MAX_SEGMENT_ENTRIES} keeps the queue RFC v1.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def produce(
    target: QueueTarget,
    files: tuple[str, ...],
    whole_files: bool,
    metadata: str,
    compression: str,
    batch_size: int,
    manifest_segment_entries: int,
    quiet: bool,
) -> None:
    """Append entries: each line of stdin or of FILES (or each whole file) becomes one entry.

    Waits until everything is durable (in the manifest) and prints how many entries and
    batches that took.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    err_console = Console(stderr=True)
    show_progress = not quiet and sys.stderr.isatty()
    sources = list(files) or ["-"]
    meta = metadata.encode("utf-8")

    def open_source(name: str) -> IO[bytes]:
        return sys.stdin.buffer if name == "-" else open(name, "rb")

    def chunks() -> Iterator[list[bytes]]:
        pending: list[bytes] = []
        for name in sources:
            stream = open_source(name)
            try:
                if whole_files:
                    pending.append(stream.read())
                else:
                    for line in _input_lines(stream):
                        pending.append(line)
                        if len(pending) >= batch_size:
                            yield pending
                            pending = []
            finally:
                if stream is not sys.stdin.buffer:
                    stream.close()
            if whole_files and len(pending) >= batch_size:
                yield pending
                pending = []
        if pending:
            yield pending

    handles: list[tuple[WriteHandle, int]] = []
    producer = Producer(
        target.path,
        compression=compression.lower(),
        manifest_path=target.manifest_path,
        data_path_prefix=target.data_prefix,
        store_options=target.store_options,
        manifest_segment_entries=manifest_segment_entries,
    )
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=not show_progress,
        transient=True,
    )
    produced = 0
    try:
        with progress:
            task = progress.add_task("durable / produced entries", total=0)

            def done(n: int) -> Callable[[Any], None]:
                return lambda _f: progress.advance(task, n)

            for chunk in chunks():
                handle = producer.produce(chunk, meta)
                produced += len(chunk)
                progress.update(task, total=produced)
                handle.add_done_callback(done(len(chunk)))
                handles.append((handle, len(chunk)))
            producer.close()
    finally:
        producer.close()  # idempotent; on an error it still releases the store
    locations: set[str] = set()
    sequences: list[int] = []
    for handle, _count in handles:
        durable = handle.wait_durable()
        locations.add(durable.location)
        sequences.append(durable.sequence)
    if not handles:
        click.echo("nothing to produce: the input was empty")
        return
    click.echo(
        f"{plural(produced, 'entry', 'entries')} durable in {plural(len(locations), 'batch', 'batches')} "
        f"(sequences {min(sequences)}..{max(sequences)})"
    )
