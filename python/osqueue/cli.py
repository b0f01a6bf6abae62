"""The ``osqueue`` command line: inspect, produce to, tail and garbage-collect a queue.

Every command takes the queue's store root as ``PATH`` (``/dir``, ``file:/dir``,
``s3://bucket/prefix``, ``s3a://bucket/prefix``; docs/format.md §1) plus ``--manifest-path``,
``--data-prefix`` and repeatable ``--store-option KEY=VALUE`` (the ``fs.s3a.*`` settings of
:class:`osqueue.store.S3Store`; credentials otherwise come from boto3's default chain).

Failures print one line, ``osqueue: error: <message>``, on stderr: exit code 2 for osqueue's
own errors (bad path, unreachable store, corrupt manifest, ...), 1 for anything unexpected.
``osqueue --debug ...`` adds the traceback.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import os
import re
import sys
import traceback
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, NoReturn, TypeVar

import click

from osqueue._version import __version__
from osqueue.consumer import ConsumedBatch, Consumer, FetchHandle
from osqueue.errors import BatchNotFoundError, OsqueueError
from osqueue.format import HEAD_VERSION, Manifest, ManifestHead, decode_head, parse_batch_ulid_ms
from osqueue.format.manifest_head import DEFAULT_SEGMENT_ENTRIES
from osqueue.gc import GarbageCollector
from osqueue.queue import (
    DEFAULT_DATA_PATH_PREFIX,
    DEFAULT_MANIFEST_PATH,
    BatchDescriptor,
    ManifestStore,
    SystemClock,
)
from osqueue.store import ObjectStore, open_store

__all__ = ["cli", "main"]

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OSQUEUE_ERROR = 2
EXIT_UNEXPECTED = 1
EXIT_INTERRUPTED = 130

_CLOCK = SystemClock()


# ---------------------------------------------------------------------------------------------
# Errors: one line on stderr, never a traceback unless --debug


class CliError(click.ClickException):
    """A failure reported as one line, ``osqueue: error: <message>``, and exit code 2."""

    exit_code = EXIT_OSQUEUE_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()) or "failed")

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"osqueue: error: {self.format_message()}", err=True)


class UnexpectedError(CliError):
    """Like :class:`CliError`, for a failure osqueue did not raise on purpose: exit code 1."""

    exit_code = EXIT_UNEXPECTED


def _describe(e: BaseException) -> str:
    text = str(e)
    return text if text else type(e).__name__


class _Group(click.Group):
    """Turns every exception of a command into one line on stderr and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("osqueue: interrupted", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except OsqueueError as e:
            _maybe_traceback(ctx)
            raise CliError(_describe(e)) from e
        except Exception as e:
            _maybe_traceback(ctx)
            raise UnexpectedError(f"unexpected {type(e).__name__}: {_describe(e)}") from e


def _maybe_traceback(ctx: click.Context) -> None:
    if (ctx.obj or {}).get("debug"):
        traceback.print_exc(file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Shared options


@dataclass(frozen=True)
class QueueTarget:
    """Where a command's queue lives."""

    path: str
    manifest_path: str
    data_prefix: str
    store_options: dict[str, str]

    def open(self, *, must_exist: bool) -> ObjectStore:
        """Opens the store. With ``must_exist``, a local root that is not a directory is an
        error (a read-only command must not create it)."""
        if must_exist:
            local = _local_root(self.path)
            if local is not None and not os.path.isdir(local):
                raise CliError(f"no queue at '{self.path}': directory '{local}' does not exist")
        return open_store(self.path, self.store_options)


_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _absolute_if_local(path: str) -> str:
    """A path with no URI scheme is a local directory: relative ones are taken from the working
    directory, as every CLI does (the library itself wants absolute roots)."""
    if path and not _URI_SCHEME.match(path) and not path.startswith("/"):
        return os.path.abspath(path)
    return path


def _local_root(uri: str) -> str | None:
    """The directory of a local store URI (as :func:`osqueue.store.open_store` reads it)."""
    if uri.startswith("/"):
        return uri
    if uri.lower().startswith("file:"):
        rest = uri[len("file:") :]
        if rest.startswith("//"):
            rest = "/" + rest[2:].partition("/")[2]
        return urllib.parse.unquote(rest)
    return None


def _parse_store_options(ctx: click.Context, param: click.Parameter, values: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"'{item}' is not KEY=VALUE (e.g. fs.s3a.endpoint=http://127.0.0.1:9000)")
        out[key.strip()] = value
    return out


def queue_options(f: F) -> F:
    """``PATH`` plus the options that locate a queue; passes a :class:`QueueTarget` as ``target``."""

    @click.argument("path")
    @click.option(
        "--manifest-path",
        default=DEFAULT_MANIFEST_PATH,
        show_default=True,
        help="Key of the manifest object under PATH.",
    )
    @click.option(
        "--data-prefix",
        default=DEFAULT_DATA_PATH_PREFIX,
        show_default=True,
        help="Key prefix of the batch objects under PATH.",
    )
    @click.option(
        "--store-option",
        "store_options",
        multiple=True,
        metavar="KEY=VALUE",
        callback=_parse_store_options,
        help="Store setting, repeatable: fs.s3a.endpoint, fs.s3a.access.key, fs.s3a.secret.key, "
        "fs.s3a.session.token, fs.s3a.path.style.access, fs.s3a.endpoint.region; for abfss:// and wasbs:// paths "
        "hadoop-azure's fs.azure.account.key.<host>, fs.azure.sas.fixed.token.<host>, fs.azure.account.oauth2.client.*, "
        "fs.azure.blob.endpoint; "
        "for gs:// the GCS connector's fs.gs.storage.root.url, fs.gs.project.id, fs.gs.auth.type, "
        "fs.gs.auth.service.account.json.keyfile.",
    )
    @functools.wraps(f)
    def wrapper(path: str, manifest_path: str, data_prefix: str, store_options: dict[str, str], **kwargs: Any) -> Any:
        target = QueueTarget(_absolute_if_local(path), manifest_path, data_prefix.strip().rstrip("/"), store_options)
        return f(target=target, **kwargs)

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Formatting helpers


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def _human_age(ms: int) -> str:
    if ms < 0:
        return f"{_human_age(-ms)} in the future"
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


def _iso(ms: int) -> str:
    dt = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


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
                        "payload_base64": _b64(m.payload),
                    }
                    for m in e.metadata
                ],
                # The entry's extension bytes (e.g. the Spark sink's write tag, docs/format.md §2.1).
                "extension_base64": _b64(e.extension),
            }
            for e in manifest.entries
        ],
    }


# ---------------------------------------------------------------------------------------------
# The group


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="osqueue")
@click.option("--debug", is_flag=True, help="Print tracebacks of errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Inspect, produce to, tail and garbage-collect osqueue queues.

    PATH is a queue's store root: /dir, file:/dir, s3://bucket/prefix, s3a://bucket/prefix or gs://bucket/prefix.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


# ---------------------------------------------------------------------------------------------
# inspect


@cli.command()
@queue_options
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON instead of a summary.")
def inspect(target: QueueTarget, as_json: bool) -> None:
    """Summarize a queue: entries, sequences, epoch, queued bytes, oldest entry age."""
    store = target.open(must_exist=True)
    try:
        manifest_store = ManifestStore(store, target.manifest_path)
        raw, _ = manifest_store.read_raw()
        version = None if raw is None else int.from_bytes(raw[-2:], "little")
        if raw is not None and version == HEAD_VERSION:
            # A segmented head (docs/format.md §2.2): shown from the head alone, no segment is read.
            head = decode_head(raw, target.manifest_path)
            if as_json:
                click.echo(json.dumps(head_to_json(head, len(raw)), indent=2))
            else:
                _print_head_summary(target, store, head, len(raw))
            return
        manifest = manifest_store.decode(raw)
        if as_json:
            click.echo(json.dumps(manifest_to_json(manifest, version), indent=2))
            return
        _print_summary(target, store, manifest, raw, version)
    finally:
        store.close()


def head_to_json(head: ManifestHead, head_bytes: int) -> dict[str, Any]:
    """A segmented head as JSON: depth, refs and the tail's sequences (entries stay in the segments)."""
    return {
        "format_version": head.version,
        "head_bytes": head_bytes,
        "next_sequence": head.next_sequence,
        "epoch": head.epoch,
        "incarnation": head.epoch >> 32,
        "depth": head.depth,
        "first_sequence": head.first_sequence,
        "low_water": head.low_water,
        "segments": [
            {
                "key": r.key,
                "first_sequence": r.first_sequence,
                "last_sequence": r.last_sequence,
                "entry_count": r.entry_count,
                "byte_length": r.byte_length,
                "sha256": r.sha256.hex(),
                "oldest_batch_ms": r.oldest_batch_ms,
            }
            for r in head.segments
        ],  # fmt: skip
        "tail_entries": len(head.tail),
        "tail_sequences": [head.tail[0].sequence, head.tail[-1].sequence] if head.tail else None,
    }


def _print_head_summary(target: QueueTarget, store: ObjectStore, head: ManifestHead, head_bytes: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"osqueue {store.uri}", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row(
        "manifest",
        f"{target.manifest_path} ({_human_bytes(head_bytes)}, format version {head.version}: a segmented head)",
    )
    table.add_row("entries (depth)", str(head.depth))
    table.add_row("sequences", f"{head.first_sequence}..{head.next_sequence - 1}" if head.depth else "-")
    table.add_row("next sequence", str(head.next_sequence))
    table.add_row("epoch", str(head.epoch))
    sealed = sum(r.byte_length for r in head.segments)
    table.add_row("segments", f"{len(head.segments)} ({_human_bytes(sealed)}), low water {head.low_water}")
    table.add_row("tail", f"{len(head.tail)} entries in the head")
    oldest = [r.oldest_batch_ms for r in head.segments if r.oldest_batch_ms != (1 << 63) - 1]
    if oldest:
        table.add_row("oldest batch", f"{_iso(min(oldest))} (age {_human_age(_CLOCK.now_ms() - min(oldest))})")
    Console(soft_wrap=False, width=max(100, _terminal_width())).print(table)


def _print_summary(
    target: QueueTarget, store: ObjectStore, manifest: Manifest, raw: bytes | None, version: int | None
) -> None:
    from rich.console import Console
    from rich.table import Table

    now = _CLOCK.now_ms()
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
        table.add_row("manifest", f"{target.manifest_path} ({_human_bytes(len(raw))}, format version {version})")
    table.add_row("entries", str(len(manifest.entries)))
    if manifest.entries:
        table.add_row("sequences", f"{manifest.entries[0].sequence}..{manifest.entries[-1].sequence}")
    else:
        table.add_row("sequences", "-")
    table.add_row("next sequence", str(manifest.next_sequence))
    table.add_row("epoch", str(manifest.epoch))
    table.add_row("queued bytes", f"{queued_bytes} ({_human_bytes(queued_bytes)})")
    first_meta = manifest.entries[0].metadata if manifest.entries else []
    if first_meta:
        oldest = first_meta[0].ingestion_time_ms
        table.add_row("oldest entry", f"{_iso(oldest)} (age {_human_age(now - oldest)})")
    else:
        table.add_row("oldest entry", "-")
    last_meta = manifest.entries[-1].metadata if manifest.entries else []
    if last_meta:
        newest = last_meta[-1].ingestion_time_ms
        table.add_row("newest entry", f"{_iso(newest)} (age {_human_age(now - newest)})")
    table.add_row("unreferenced batches", f"{len(unreferenced)} under {prefix} (being enqueued, or orphans for GC)")
    if missing:
        table.add_row("missing batches", f"{len(missing)} referenced but not found, first: {missing[0]}")
    Console(soft_wrap=False, width=max(100, _terminal_width())).print(table)


def _terminal_width() -> int:
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


# ---------------------------------------------------------------------------------------------
# produce


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
    type=click.IntRange(min=1, max=DEFAULT_SEGMENT_ENTRIES),
    default=DEFAULT_SEGMENT_ENTRIES,
    help="K: seal the manifest's tail into a segment object past this many entries (docs/format.md §2.2; "
    "2048 suggested). Default: off.",
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

    from osqueue.producer import Producer, WriteHandle

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
        f"{_plural(produced, 'entry', 'entries')} durable in {_plural(len(locations), 'batch', 'batches')} "
        f"(sequences {min(sequences)}..{max(sequences)})"
    )


# ---------------------------------------------------------------------------------------------
# tail


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
                "value_base64": _b64(value),
                "metadata_base64": None if meta is None else _b64(meta.payload),
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
def tail(target: QueueTarget, fmt: str, ack: bool, follow: bool, interval: float, max_batches: int | None) -> None:
    """Print the queue's entries in order.

    By default nothing is written: the manifest is read and the batches fetched read-only, so
    a running consumer is not disturbed. With --ack the printed batches are dequeued.
    """
    out = sys.stdout
    state = _TailState()
    fmt = fmt.lower()
    try:
        if ack:
            _tail_acking(target, out, fmt, follow, interval, max_batches, state)
        else:
            _tail_read_only(target, out, fmt, follow, interval, max_batches, state)
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
) -> None:
    store = target.open(must_exist=True)
    try:
        manifest_store = ManifestStore(store, target.manifest_path)
        fetcher = FetchHandle(store, target.manifest_path)
        while not _done(state, max_batches):
            manifest, _ = manifest_store.read()
            for entry in manifest.entries:
                if _done(state, max_batches):
                    break
                if state.last_printed is not None and entry.sequence <= state.last_printed:
                    continue
                descriptor = BatchDescriptor(entry.sequence, entry.location, list(entry.metadata))
                try:
                    batch = fetcher.fetch(descriptor)
                except BatchNotFoundError:
                    # A consumer may have dequeued the entry and GC deleted its file since the
                    # read: skip it then; a batch the manifest still references is an error.
                    current, _ = manifest_store.read()
                    if any(e.sequence == entry.sequence and e.location == entry.location for e in current.entries):
                        raise
                    continue
                _write_batch(out, batch, fmt)
                state.printed_batches += 1
                state.last_printed = entry.sequence
            if not follow:
                break
            _CLOCK.sleep(interval)
    except KeyboardInterrupt:
        if not follow:
            raise
    finally:
        store.close()


def _tail_acking(
    target: QueueTarget,
    out: IO[str],
    fmt: str,
    follow: bool,
    interval: float,
    max_batches: int | None,
    state: _TailState,
) -> None:
    target.open(must_exist=True).close()
    consumer = Consumer(
        target.path,
        manifest_path=target.manifest_path,
        data_path_prefix=target.data_prefix,
        store_options=target.store_options,
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
                _CLOCK.sleep(interval)
        except KeyboardInterrupt:
            pass  # close() below dequeues everything printed so far
        # Consumer.close() (the with block) dequeues what was acked since the last flush.
    if state.last_printed is not None:
        click.echo(f"acknowledged and dequeued through sequence {state.last_printed}", err=True)


# ---------------------------------------------------------------------------------------------
# gc


@cli.command()
@queue_options
@click.option("--apply", "apply_", is_flag=True, help="Delete the files (default: only list them).")
@click.option(
    "--grace-period",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    help="Seconds a file must have existed (by its ULID time) before it may be deleted; "
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
        f"{verb} {_plural(len(result.deleted), 'unreferenced batch file', 'unreferenced batch files')} "
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
        age = "" if created is None else f"  (age {_human_age(result.snapshot_time_ms - created)})"
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


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of the ``osqueue`` script and ``python -m osqueue``."""
    cli.main(args=argv, prog_name="osqueue")
    raise SystemExit(0)  # pragma: no cover - click always exits
