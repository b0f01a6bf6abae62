"""What every command takes: the queue's store root, its manifest and data paths, store options."""

from __future__ import annotations

import functools
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from osqueue.cli.app import CliError
from osqueue.queue import (
    DEFAULT_DATA_PATH_PREFIX,
    DEFAULT_MANIFEST_PATH,
    SystemClock,
)
from osqueue.store import ObjectStore, open_store

F = TypeVar("F", bound=Callable[..., Any])

CLOCK = SystemClock()


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
