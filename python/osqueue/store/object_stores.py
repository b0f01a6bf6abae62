"""Opening a store from a URI (JVM: ``ObjectStores``)."""

from __future__ import annotations

import importlib
import urllib.parse
from collections.abc import Mapping
from typing import Any

from osqueue.errors import InvalidConfigError
from osqueue.store.in_memory_store import InMemoryStore
from osqueue.store.local_file_system_store import LocalFileSystemStore
from osqueue.store.object_store import ObjectStore
from osqueue.store.object_store_provider import PLUGGED_STORES
from osqueue.store.s3_store import S3Store


def open_store(uri: str, options: Mapping[str, Any] | None = None) -> ObjectStore:
    """Opens the store for a queue root URI (docs/format.md §1).

    Args:
        uri: ``/abs/dir``, ``file:/abs/dir``, ``file:///abs/dir``, ``s3://bucket[/prefix]``,
            ``s3a://bucket[/prefix]``, ``memory://name``, or a scheme of :data:`PLUGGED_STORES`.
        options: Store settings (S3: the ``fs.s3a.*`` keys of :class:`S3Store`).

    Raises:
        InvalidConfigError: The URI is not one of the above, or its store's extra is not installed.
    """
    if not isinstance(uri, str) or not uri:
        raise InvalidConfigError("path", uri, "give the queue's root: /abs/dir, file:/abs/dir, s3://bucket/prefix")
    hint = "use an absolute directory, file:/abs/dir, file:///abs/dir, s3://bucket[/prefix], s3a://bucket[/prefix] or memory://name"
    lower = uri.lower()
    scheme = lower.partition("://")[0] if "://" in lower else ""
    if scheme in PLUGGED_STORES:
        module, extra = PLUGGED_STORES[scheme]
        try:
            plugged = importlib.import_module(module)
        except ImportError as e:
            raise InvalidConfigError(
                "path", uri, f"{scheme}:// paths need the '{extra}' extra: pip install 'osqueue[{extra}]' ({e})"
            ) from e
        opened: ObjectStore = plugged.open_store(uri, options or {})
        return opened
    if lower.startswith("memory://"):
        name = uri[len("memory://") :]
        if not name:
            raise InvalidConfigError("path", uri, "name the in-memory store: memory://name")
        return InMemoryStore.named(name)
    if lower.startswith("s3://") or lower.startswith("s3a://"):
        rest = uri.split("://", 1)[1]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise InvalidConfigError("path", uri, "name a bucket: s3://bucket[/prefix]")
        return S3Store(bucket, prefix, options)
    if lower.startswith("file:"):
        rest = uri[len("file:") :]
        if rest.startswith("//"):
            host, sep, path = rest[2:].partition("/")
            if host not in ("", "localhost"):
                raise InvalidConfigError("path", uri, "file URIs name a local directory: file:///abs/dir")
            rest = "/" + path
        rest = urllib.parse.unquote(rest)
        if not rest.startswith("/"):
            raise InvalidConfigError("path", uri, hint)
        return LocalFileSystemStore(rest)
    if uri.startswith("/"):
        return LocalFileSystemStore(uri)
    raise InvalidConfigError("path", uri, hint)
