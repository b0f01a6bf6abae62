"""The ``osqueue`` command group, its error handling (one line on stderr, an exit code) and ``main``."""

from __future__ import annotations

import sys
import traceback
from typing import IO, Any, NoReturn

import click

from osqueue._version import __version__
from osqueue.errors import OsqueueError

EXIT_OSQUEUE_ERROR = 2
EXIT_UNEXPECTED = 1
EXIT_INTERRUPTED = 130


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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="osqueue")
@click.option("--debug", is_flag=True, help="Print tracebacks of errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Inspect, produce to, tail and garbage-collect osqueue queues.

    PATH is a queue's store root: /dir, relative/dir, file:/dir, s3://bucket/prefix, s3a://bucket/prefix,
    gs://bucket/prefix or abfss://container@account.dfs.core.windows.net/prefix (also abfs, wasbs, wasb).
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of the ``osqueue`` script and ``python -m osqueue``."""
    cli.main(args=argv, prog_name="osqueue")
    raise SystemExit(0)  # pragma: no cover - click always exits
