"""Object stores: the few operations the queue needs, on a local disk, S3 or memory.

Keys are relative to the store root, ``/``-separated and validated by :func:`validate_key`
before any I/O, so a manifest can never make a store touch anything outside its root.

Failures raise :class:`~osqueue.errors.StoreError`. After a *conditional* write raises, the
write may or may not have been applied: callers resolve that by reading the object back
(see :mod:`osqueue.queue`).
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import hashlib
import importlib
import itertools
import os
import random
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from osqueue.errors import ConditionalWritesNotHonouredError, InvalidConfigError, InvalidObjectKeyError, StoreError

__all__ = [
    "ObjectVersion",
    "VersionedObject",
    "ObjectInfo",
    "Written",
    "PreconditionFailed",
    "PRECONDITION_FAILED",
    "CasOutcome",
    "ObjectStore",
    "validate_key",
    "join_key",
    "InMemoryStore",
    "LocalFileSystemStore",
    "S3Store",
    "EndpointConditions",
    "forget_endpoint_conditions",
    "open_store",
]


@dataclass(frozen=True)
class ObjectVersion:
    """An opaque object version: S3's ETag, a content hash on disk, a counter in memory."""

    token: str


@dataclass(frozen=True)
class VersionedObject:
    """An object's bytes and the version they were read at."""

    data: bytes
    version: ObjectVersion


@dataclass(frozen=True)
class ObjectInfo:
    """A listed object."""

    key: str
    size: int


@dataclass(frozen=True)
class Written:
    """A conditional write was applied; ``version`` is the object's new version."""

    version: ObjectVersion


@dataclass(frozen=True)
class PreconditionFailed:
    """The condition did not hold (HTTP 412/409): the object changed, or already existed.

    A store returns this only when the write was certainly *not* applied.
    """


PRECONDITION_FAILED = PreconditionFailed()

CasOutcome = Written | PreconditionFailed
"""The outcome of a conditional write. A raised ``StoreError`` means the outcome is unknown."""


@runtime_checkable
class ObjectStore(Protocol):
    """The object-store operations the queue needs.

    Implementations are thread-safe.
    """

    @property
    def uri(self) -> str:
        """Where this store points, for messages: ``s3://bucket/prefix``, ``file:/dir``, ..."""
        ...

    def get(self, key: str) -> VersionedObject | None:
        """The object and its version, or None if it does not exist."""
        ...

    def put(self, key: str, data: bytes) -> None:
        """Unconditional write (batch files: ULID names are never reused)."""
        ...

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        """Create only if the key does not exist."""
        ...

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        """Overwrite only if the current version is ``expected_version``."""
        ...

    def list(self, prefix: str) -> list[ObjectInfo]:
        """All objects whose key starts with ``prefix`` (recursively), in no particular order."""
        ...

    def delete(self, key: str) -> None:
        """Delete; deleting a missing key succeeds."""
        ...

    def close(self) -> None:
        """Release resources (connections)."""
        ...


def validate_key(key: str) -> str:
    """Rejects keys that are empty or absolute, or contain ``.``/``..``/empty segments,
    backslashes, NULs or ``://``; returns the key unchanged otherwise.

    Raises:
        InvalidObjectKeyError: The key is not a plain relative key.
    """
    if not isinstance(key, str) or key == "":
        raise InvalidObjectKeyError(str(key) if key is not None else "", "empty key")
    if key.startswith("/"):
        raise InvalidObjectKeyError(key, "absolute keys are not allowed")
    if "\\" in key:
        raise InvalidObjectKeyError(key, "backslashes are not allowed")
    if "\x00" in key:
        raise InvalidObjectKeyError(key, "NUL characters are not allowed")
    if "://" in key:
        raise InvalidObjectKeyError(key, "keys are relative to the store root, not URIs")
    segments = key.split("/")
    if any(s == "" for s in segments):
        raise InvalidObjectKeyError(key, "empty path segment")
    if any(s in (".", "..") for s in segments):
        raise InvalidObjectKeyError(key, "'.' and '..' segments are not allowed")
    return key


def _validate_prefix(prefix: str) -> str:
    """A list prefix: empty, or a key optionally followed by ``/``."""
    if prefix == "":
        return prefix
    validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


def join_key(prefix: str, name: str) -> str:
    """Joins a prefix and a name with exactly one ``/``. An empty prefix yields the name."""
    return name if prefix == "" else prefix.rstrip("/") + "/" + name


# ---------------------------------------------------------------------------------------------
# In memory


class InMemoryStore:
    """A thread-safe in-process store (unit tests). Versions come from a store-wide counter.

    ``InMemoryStore.named(name)`` returns the process-wide store behind ``memory://name``.
    """

    _registry: dict[str, InMemoryStore] = {}
    _registry_lock = threading.Lock()

    def __init__(self, name: str = "test") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[bytes, ObjectVersion]] = {}
        self._counter = itertools.count(1)

    @classmethod
    def named(cls, name: str) -> InMemoryStore:
        """The shared store for ``memory://name`` (created on first use)."""
        with cls._registry_lock:
            store = cls._registry.get(name)
            if store is None:
                store = cls._registry[name] = cls(name)
            return store

    @classmethod
    def forget(cls, name: str) -> None:
        """Drops the shared store ``memory://name``."""
        with cls._registry_lock:
            cls._registry.pop(name, None)

    @property
    def uri(self) -> str:
        return f"memory://{self._name}"

    def _new_version(self) -> ObjectVersion:
        return ObjectVersion(f"mem:{next(self._counter)}")

    def get(self, key: str) -> VersionedObject | None:
        validate_key(key)
        with self._lock:
            found = self._objects.get(key)
        return None if found is None else VersionedObject(found[0], found[1])

    def put(self, key: str, data: bytes) -> None:
        validate_key(key)
        with self._lock:
            self._objects[key] = (bytes(data), self._new_version())

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        validate_key(key)
        with self._lock:
            if key in self._objects:
                return PRECONDITION_FAILED
            version = self._new_version()
            self._objects[key] = (bytes(data), version)
            return Written(version)

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        validate_key(key)
        with self._lock:
            found = self._objects.get(key)
            if found is None or found[1] != expected_version:
                return PRECONDITION_FAILED
            version = self._new_version()
            self._objects[key] = (bytes(data), version)
            return Written(version)

    def list(self, prefix: str) -> list[ObjectInfo]:
        _validate_prefix(prefix)
        with self._lock:
            return [ObjectInfo(k, len(v[0])) for k, v in self._objects.items() if k.startswith(prefix)]

    def delete(self, key: str) -> None:
        validate_key(key)
        with self._lock:
            self._objects.pop(key, None)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# Local filesystem (docs/format.md §7)

_process_locks: dict[str, threading.Lock] = {}
_process_locks_guard = threading.Lock()


def _process_lock(path: str) -> threading.Lock:
    with _process_locks_guard:
        lock = _process_locks.get(path)
        if lock is None:
            lock = _process_locks[path] = threading.Lock()
        return lock


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _content_version(data: bytes) -> ObjectVersion:
    return ObjectVersion("sha256:" + hashlib.sha256(data).hexdigest())


class LocalFileSystemStore:
    """A store in a local directory with a cross-process compare-and-swap.

    Key ``K`` is the file ``<root>/K``; files whose name starts with ``.`` are internal and
    never listed. The version of an object is ``sha256:<hex>`` of its bytes. A conditional
    write holds an exclusive POSIX record lock (``fcntl.lockf``, the same lock as Java's
    ``FileChannel.lock``) on ``<dir>/.<name>.lock`` plus an in-process mutex per lock file,
    re-reads the file, compares, and replaces it with an fsync'd temporary file and a rename.
    Readers take no lock.

    Args:
        root: The directory (created if missing).
        lock_timeout: Seconds to wait for a lock before raising ``StoreError``.
    """

    def __init__(self, root: str | os.PathLike[str], *, lock_timeout: float = 30.0) -> None:
        root_str = os.fspath(root)
        if not os.path.isabs(root_str):
            raise InvalidConfigError("path", root_str, "a local store root must be an absolute directory")
        self._root = os.path.normpath(root_str)
        self._lock_timeout = lock_timeout
        try:
            os.makedirs(self._root, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create store root '{self._root}': {e}") from e

    @property
    def uri(self) -> str:
        return "file:" + self._root

    @property
    def root(self) -> str:
        """The root directory."""
        return self._root

    def _path(self, key: str) -> str:
        validate_key(key)
        segments = key.split("/")
        if any(s.startswith(".") for s in segments):
            raise InvalidObjectKeyError(
                key, "names starting with '.' are reserved for the local store's internal files"
            )
        path = os.path.join(self._root, *segments)
        # No symlink (a directory on the way, or the file itself) may lead the key outside the root; a
        # dangling link counts as missing, as on the JVM (docs/format.md §1).
        real_root = os.path.realpath(self._root)
        target = os.path.realpath(path if os.path.exists(path) else os.path.dirname(path))
        if target != real_root and not target.startswith(real_root + os.sep):
            raise InvalidObjectKeyError(key, "resolves outside the store root (through a symlink)")
        return path

    def get(self, key: str) -> VersionedObject | None:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None  # a directory is not an object (as on S3)
        except OSError as e:
            raise StoreError(f"cannot read '{key}' in {self.uri}: {e}") from e
        return VersionedObject(data, _content_version(data))

    def _ensure_directory(self, directory: str) -> None:
        """Creates missing directories one by one, fsyncing each parent so the entry is durable."""
        if os.path.isdir(directory):
            return
        parent = os.path.dirname(directory)
        if parent and parent != directory:
            self._ensure_directory(parent)
        try:
            os.mkdir(directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
        if parent and parent != directory:
            _fsync_directory(parent)

    def _write_replace(self, path: str, data: bytes) -> None:
        directory, name = os.path.split(path)
        self._ensure_directory(directory)
        tmp = os.path.join(directory, f".{name}.tmp-{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _fsync_directory(directory)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            self._write_replace(path, bytes(data))
        except OSError as e:
            raise StoreError(f"cannot write '{key}' in {self.uri}: {e}") from e

    @contextmanager
    def _locked(self, key: str, path: str) -> Iterator[None]:
        directory, name = os.path.split(path)
        try:
            self._ensure_directory(directory)
            lock_path = os.path.join(os.path.realpath(directory), f".{name}.lock")
        except OSError as e:
            raise StoreError(f"cannot prepare the lock for '{key}' in {self.uri}: {e}") from e
        deadline = time.monotonic() + self._lock_timeout
        mutex = _process_lock(lock_path)
        if not mutex.acquire(timeout=self._lock_timeout):
            raise StoreError(
                f"timed out after {self._lock_timeout} s waiting for the lock on '{key}' in {self.uri}",
                outcome_known=True,
            )
        try:
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise StoreError(f"cannot open lock file '{lock_path}': {e}") from e
            try:
                while True:
                    try:
                        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except OSError as e:
                        if e.errno not in (errno.EACCES, errno.EAGAIN):
                            raise StoreError(f"cannot lock '{lock_path}': {e}") from e
                    if time.monotonic() >= deadline:
                        raise StoreError(
                            f"timed out after {self._lock_timeout} s waiting for the lock on '{key}' in {self.uri} "
                            f"(held by another process: {lock_path})",
                            outcome_known=True,
                        )
                    time.sleep(random.uniform(0.001, 0.005))
                yield
            finally:
                os.close(fd)  # closing the descriptor releases the record lock
        finally:
            mutex.release()

    def _conditional_put(self, key: str, data: bytes, expected: ObjectVersion | None) -> CasOutcome:
        path = self._path(key)
        data = bytes(data)
        with self._locked(key, path):
            try:
                try:
                    with open(path, "rb") as f:
                        current: bytes | None = f.read()
                except FileNotFoundError:
                    current = None
                if expected is None:
                    if current is not None:
                        return PRECONDITION_FAILED
                elif current is None or _content_version(current) != expected:
                    return PRECONDITION_FAILED
                self._write_replace(path, data)
            except OSError as e:
                raise StoreError(f"conditional write of '{key}' in {self.uri} failed (outcome unknown): {e}") from e
        return Written(_content_version(data))

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        return self._conditional_put(key, data, None)

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        return self._conditional_put(key, data, expected_version)

    def list(self, prefix: str) -> list[ObjectInfo]:
        _validate_prefix(prefix)
        # Walk only the directory holding the prefix's last (possibly partial) segment.
        slash = prefix.rfind("/")
        dir_key, name_prefix = (prefix[:slash], prefix[slash + 1 :]) if slash >= 0 else ("", prefix)
        base = os.path.join(self._root, *dir_key.split("/")) if dir_key else self._root
        out: list[ObjectInfo] = []
        try:
            self._walk(base, dir_key, name_prefix, out)
        except OSError as e:
            raise StoreError(f"cannot list '{prefix}' in {self.uri}: {e}") from e
        return out

    def _walk(self, directory: str, dir_key: str, name_prefix: str, out: builtins.list[ObjectInfo]) -> None:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            name = entry.name
            if name.startswith(".") or not name.startswith(name_prefix):
                continue  # hidden files and directories are internal
            key = join_key(dir_key, name)
            try:
                # Not following links: a symlinked file or directory is not part of the store.
                if entry.is_dir(follow_symlinks=False):
                    self._walk(entry.path, key, "", out)
                elif entry.is_file(follow_symlinks=False):
                    out.append(ObjectInfo(key, entry.stat(follow_symlinks=False).st_size))
            except FileNotFoundError:
                continue

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as e:
            raise StoreError(f"cannot delete '{key}' in {self.uri}: {e}") from e

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# S3

S3_ENDPOINT = "fs.s3a.endpoint"
S3_ACCESS_KEY = "fs.s3a.access.key"
S3_SECRET_KEY = "fs.s3a.secret.key"
S3_SESSION_TOKEN = "fs.s3a.session.token"
S3_PATH_STYLE = "fs.s3a.path.style.access"
S3_REGION = "fs.s3a.endpoint.region"
S3_SSL = "fs.s3a.connection.ssl.enabled"
S3_CONNECT_TIMEOUT = "fs.s3a.connection.establish.timeout"
S3_SOCKET_TIMEOUT = "fs.s3a.connection.timeout"
S3_ATTEMPTS = "fs.s3a.attempts.maximum"

_DURATION = re.compile(r"(?i)^\s*(\d+)\s*(ns|us|ms|s|min|m|h|d)?\s*$")
_DURATION_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(option: str, value: object) -> float:
    """The one duration grammar (tests/golden/vocabulary.json; JVM: ``osqueue.Durations``): ``60000`` (ms),
    ``200s``, ``5m``/``5min``, ``1h``, ``2d``, ``100us``, ``10ns`` -> seconds."""
    m = _DURATION.match(str(value))
    if not m:
        raise InvalidConfigError(option, value, "expected a duration such as 60000 (ms), 200s, 5m or 1h")
    return int(m.group(1)) * _DURATION_SECONDS[(m.group(2) or "ms").lower()]


def _parse_bool(option: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise InvalidConfigError(option, value, "use true or false")


def _parse_retries(value: object) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        n = -1
    if n < 0:
        raise InvalidConfigError(S3_ATTEMPTS, value, "expected a whole number of retries >= 0")
    return n


def _make_s3_client(options: Mapping[str, Any] | None) -> Any:
    import boto3
    from botocore.config import Config

    opts = {str(k).lower(): v for k, v in (options or {}).items()}
    endpoint = opts.get(S3_ENDPOINT)
    if endpoint is not None:
        endpoint = str(endpoint).strip()
        if endpoint and "://" not in endpoint:
            endpoint = ("https://" if _parse_bool(S3_SSL, opts.get(S3_SSL, True)) else "http://") + endpoint
        if not endpoint:
            endpoint = None
    path_style = _parse_bool(S3_PATH_STYLE, opts.get(S3_PATH_STYLE, False))
    access_key = opts.get(S3_ACCESS_KEY)
    secret_key = opts.get(S3_SECRET_KEY)
    if (access_key is None) != (secret_key is None):
        missing = S3_SECRET_KEY if secret_key is None else S3_ACCESS_KEY
        raise InvalidConfigError(missing, "", f"set both {S3_ACCESS_KEY} and {S3_SECRET_KEY}, or neither")
    session = boto3.session.Session()
    region = opts.get(S3_REGION) or session.region_name or "us-east-1"
    config_args: dict[str, Any] = {
        "s3": {"addressing_style": "path" if path_style else "auto"},
        # 3 attempts per request by default; fs.s3a.attempts.maximum counts retries, as in S3A. A
        # retried conditional PUT that then fails its precondition is an unknown outcome (_conditional).
        "retries": {
            "mode": "standard",
            "total_max_attempts": _parse_retries(opts[S3_ATTEMPTS]) + 1 if S3_ATTEMPTS in opts else 3,
        },
        # The same keys and defaults as the JVM store (S3StoreConfig): 10 s to connect, 60 s per read.
        "connect_timeout": parse_duration(S3_CONNECT_TIMEOUT, opts[S3_CONNECT_TIMEOUT])
        if S3_CONNECT_TIMEOUT in opts
        else 10,
        "read_timeout": parse_duration(S3_SOCKET_TIMEOUT, opts[S3_SOCKET_TIMEOUT]) if S3_SOCKET_TIMEOUT in opts else 60,
    }
    try:
        config = Config(request_checksum_calculation="when_required", **config_args)
    except TypeError:  # older botocore
        config = Config(**config_args)
    kwargs: dict[str, Any] = {"region_name": str(region), "config": config}
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    if access_key is not None:
        kwargs["aws_access_key_id"] = str(access_key)
        kwargs["aws_secret_access_key"] = str(secret_key)
        token = opts.get(S3_SESSION_TOKEN)
        if token:
            kwargs["aws_session_token"] = str(token)
    return session.client("s3", **kwargs)


# ---------------------------------------------------------------------------------------------
# What an S3 endpoint does with conditional writes (docs/format.md §8): learned by a probe before
# the first conditional write to an endpoint, kept per endpoint for the life of the process.

IF_MATCH_QUOTED = "quoted"  # If-Match: "<hex>", as S3 returns ETags (AWS, LocalStack, moto)
IF_MATCH_UNQUOTED = "unquoted"  # If-Match: <hex> (Ceph RGW matches only this form)
_IF_MATCH_FORMS = (IF_MATCH_QUOTED, IF_MATCH_UNQUOTED)
PROBE_KEY_PREFIX = ".osqueue-probe-"
PROBE_ATTEMPTS = 4
"""Probe runs before a store error of the probe is reported; the wait doubles from PROBE_BACKOFF_S."""
PROBE_BACKOFF_S = 0.2


def bare_etag(tag: str) -> str:
    """An entity tag without its quotes (and weak ``W/`` mark): for comparing tags."""
    t = tag.strip()
    if t.startswith("W/"):
        t = t[2:]
    if len(t) >= 2 and t[0] == '"' and t[-1] == '"':
        t = t[1:-1]
    return t


def if_match_value(tag: str, form: str) -> str:
    """The ``If-Match`` header value for ``tag`` in ``form`` (quoted or unquoted)."""
    bare = bare_etag(tag)
    return f'"{bare}"' if form == IF_MATCH_QUOTED else bare


class EndpointConditions:
    """What one endpoint does with conditional writes.

    Attributes:
        endpoint: The endpoint.
        if_match_forms: The ``If-Match`` forms that refuse a wrong tag, the one that matched
            the object's own tag first (the form sent); empty when refused.
        refusal: Why the endpoint is refused, or None.
    """

    def __init__(self, endpoint: str, if_match_forms: tuple[str, ...], refusal: str | None = None) -> None:
        self.endpoint = endpoint
        self.if_match_forms = if_match_forms
        self.refusal = refusal

    @property
    def if_match_form(self) -> str:
        return self.if_match_forms[0]

    def learned(self, form: str) -> None:
        """``form`` matched where the current one did not: send it from now on."""
        self.if_match_forms = (form,) + tuple(f for f in self.if_match_forms if f != form)


_endpoint_conditions: dict[str, EndpointConditions] = {}
_endpoint_conditions_lock = threading.Lock()  # held during a probe: one probe per endpoint


def probed_conditions(
    endpoint: str,
    probe: Callable[[], EndpointConditions],
    *,
    conclusive: Callable[[StoreError], bool] = lambda e: False,
) -> EndpointConditions:
    """What ``endpoint`` does with conditional writes: probed once per process and remembered.

    A request of the probe that fails (5xx, I/O) runs the probe again on a new scratch object: a
    store error during the probe is no verdict, and a caller's retry budget covers its own write,
    not this one-off check. Every store with conditional writes (S3, GCS, Azure) goes through here.

    Args:
        probe: Runs the store's probe once.
        conclusive: A probe error not worth retrying (e.g. a missing bucket).

    Raises:
        ConditionalWritesNotHonouredError: The endpoint does not honour them.
        StoreError: The probe kept failing (nothing was learned; the next call tries again).
    """
    found = _endpoint_conditions.get(endpoint)
    if found is None:
        with _endpoint_conditions_lock:
            found = _endpoint_conditions.get(endpoint)
            if found is None:
                for attempt in range(1, PROBE_ATTEMPTS + 1):
                    try:
                        found = probe()
                        break
                    except StoreError as e:
                        if attempt == PROBE_ATTEMPTS or conclusive(e):
                            raise
                        time.sleep(PROBE_BACKOFF_S * 2 ** (attempt - 1))
                assert found is not None
                _endpoint_conditions[endpoint] = found
    if found.refusal is not None:
        raise ConditionalWritesNotHonouredError(found.endpoint, found.refusal)
    return found


def forget_endpoint_conditions(endpoint: str | None = None) -> None:
    """Drops what was learned about ``endpoint`` (all endpoints if None), so the next conditional
    write probes again (tests; a server that was reconfigured)."""
    with _endpoint_conditions_lock:
        if endpoint is None:
            _endpoint_conditions.clear()
        else:
            _endpoint_conditions.pop(endpoint, None)


class S3Store:
    """A store in an S3 bucket (or an S3-compatible server), under an optional key prefix.

    Conditional writes use ``If-None-Match: *`` and ``If-Match: <ETag>``. A 412 or 409 reply
    is a failed precondition, unless the client had retried the request (the first try may
    have landed): then the outcome is unknown and ``StoreError`` is raised. Every other
    failure is a ``StoreError``.

    Before its first conditional write to an endpoint, a store probes the endpoint with a
    scratch object under its prefix (docs/format.md §8): an endpoint that lets a conditional
    write through where it must fail is refused with
    :class:`~osqueue.errors.ConditionalWritesNotHonouredError`; the probe also learns whether
    the endpoint matches ``If-Match`` quoted (S3) or unquoted (Ceph RGW). The verdict is kept
    per endpoint for the process. A 412 on ``If-Match`` while the object still has the expected
    tag is retried once in the other form (which is then kept); if that fails too, the endpoint
    does not honour ``If-Match`` and ``ConditionalWritesNotHonouredError`` is raised.

    Args:
        bucket: The bucket.
        prefix: Keys live under ``prefix/`` (may be empty).
        options: Spark-style settings: ``fs.s3a.endpoint``, ``fs.s3a.access.key``,
            ``fs.s3a.secret.key``, ``fs.s3a.session.token``, ``fs.s3a.path.style.access``,
            ``fs.s3a.endpoint.region``, ``fs.s3a.connection.ssl.enabled`` (scheme of a bare
            host endpoint), ``fs.s3a.connection.establish.timeout`` and
            ``fs.s3a.connection.timeout`` (connect and read timeouts, Hadoop duration forms),
            ``fs.s3a.attempts.maximum`` (retries per request as in S3A; default 2, i.e. 3 attempts).
            Missing credentials and region come from boto3's default chain.
        client: A ready boto3 S3 client (``options`` is then ignored).
    """

    def __init__(
        self, bucket: str, prefix: str = "", options: Mapping[str, Any] | None = None, *, client: Any = None
    ) -> None:
        if not bucket or "/" in bucket:
            raise InvalidConfigError("path", f"s3://{bucket}", "name a bucket: s3://bucket[/prefix]")
        self._bucket = bucket
        self._prefix = prefix.strip("/")
        if self._prefix:
            try:
                validate_key(self._prefix)
            except InvalidObjectKeyError as e:
                raise InvalidConfigError("path", f"s3://{bucket}/{prefix}", f"bad key prefix: {e}") from e
        self._client = client if client is not None else _make_s3_client(options)

    @property
    def uri(self) -> str:
        return f"s3://{self._bucket}/{self._prefix}" if self._prefix else f"s3://{self._bucket}"

    @property
    def endpoint(self) -> str:
        """The endpoint URL (the key of what was learned about conditional writes)."""
        return str(getattr(getattr(self._client, "meta", None), "endpoint_url", None) or "AWS S3")

    @property
    def client(self) -> Any:
        """The boto3 client."""
        return self._client

    def _full(self, key: str) -> str:
        validate_key(key)
        return f"{self._prefix}/{key}" if self._prefix else key

    def _fail(self, what: str, key: str, e: Exception) -> StoreError:
        return StoreError(f"S3 {what} of '{key}' in {self.uri} failed: {e}")

    def get(self, key: str) -> VersionedObject | None:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            r = self._client.get_object(Bucket=self._bucket, Key=full)
            data = r["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise self._fail("GET", key, e) from e
        except BotoCoreError as e:
            raise self._fail("GET", key, e) from e
        return VersionedObject(data, ObjectVersion(r["ETag"]))

    def put(self, key: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            self._client.put_object(Bucket=self._bucket, Key=full, Body=bytes(data))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("PUT", key, e) from e

    def _conditional(self, key: str, data: bytes, **condition: str) -> CasOutcome:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            r = self._client.put_object(Bucket=self._bucket, Key=full, Body=bytes(data), **condition)
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = e.response.get("Error", {}).get("Code")
            retries = e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0
            failed_condition = status in (412, 409) or code in ("PreconditionFailed", "ConditionalRequestConflict")
            if "IfMatch" in condition and (status == 404 or code == "NoSuchKey"):
                failed_condition = True  # If-Match on a missing object
            if failed_condition:
                if retries > 0:
                    raise StoreError(
                        f"S3 conditional PUT of '{key}' in {self.uri}: precondition failed after {retries} "
                        "client-side retries, so an earlier try may have landed (outcome unknown)"
                    ) from e
                return PRECONDITION_FAILED
            if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429) and retries == 0:
                # The request was rejected outright (403, 400, ...): certainly not applied.
                raise StoreError(
                    f"S3 conditional PUT of '{key}' in {self.uri} was rejected: {e}", outcome_known=True
                ) from e
            raise StoreError(f"S3 conditional PUT of '{key}' in {self.uri} failed (outcome unknown): {e}") from e
        except BotoCoreError as e:
            raise StoreError(f"S3 conditional PUT of '{key}' in {self.uri} failed (outcome unknown): {e}") from e
        return Written(ObjectVersion(r["ETag"]))

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        validate_key(key)
        self.conditions()
        return self._conditional(key, data, IfNoneMatch="*")

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        validate_key(key)
        conditions = self.conditions()
        tried = conditions.if_match_form
        outcome = self._conditional(key, data, IfMatch=if_match_value(expected_version.token, tried))
        if isinstance(outcome, Written) or not self._still_at(key, expected_version):
            return outcome
        # 412 although the object still has the expected tag: this form is not the one the server
        # matches (Ceph RGW matches only unquoted tags). Once in each other form, then give up.
        for form in conditions.if_match_forms:
            if form == tried:
                continue
            outcome = self._conditional(key, data, IfMatch=if_match_value(expected_version.token, form))
            if isinstance(outcome, Written):
                conditions.learned(form)
                return outcome
        if not self._still_at(key, expected_version):
            return outcome
        raise ConditionalWritesNotHonouredError(
            self.endpoint,
            f"a PUT of '{self._full(key)}' in bucket '{self._bucket}' with If-Match set to the object's current "
            f"entity tag {expected_version.token} failed with 412 in every form tried "
            f"({', '.join(conditions.if_match_forms)}) while the object did not change",
        )

    def _still_at(self, key: str, version: ObjectVersion) -> bool:
        """Whether the object's entity tag (HEAD) is still ``version``; False when that cannot be told."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            r = self._client.head_object(Bucket=self._bucket, Key=self._full(key))
        except (ClientError, BotoCoreError):
            return False
        return bare_etag(r.get("ETag", "")) == bare_etag(version.token)

    def conditions(self) -> EndpointConditions:
        """What this store's endpoint does with conditional writes, probed on first use.

        Raises:
            ConditionalWritesNotHonouredError: The endpoint does not honour them.
            StoreError: The probe could not run (nothing was learned; the next call tries again).
        """
        return probed_conditions(self.endpoint, self._probe)

    def _probe(self) -> EndpointConditions:
        """A scratch object under the prefix: a conditional create that must fail, conditional
        replaces with a wrong tag that must fail, and one with the object's own tag that must land."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(PROBE_KEY_PREFIX + secrets.token_hex(8))
        where = f"'{full}' in bucket '{self._bucket}'"

        def put(body: bytes, **condition: str) -> str | None:
            """The new ETag, or None when the condition failed."""
            try:
                return str(self._client.put_object(Bucket=self._bucket, Key=full, Body=body, **condition)["ETag"])
            except ClientError as e:
                meta = e.response.get("ResponseMetadata", {})
                status = meta.get("HTTPStatusCode")
                if status in (412, 409, 404) and not meta.get("RetryAttempts"):
                    return None
                if status == 501:  # NotImplemented: the server says it has no conditional PUTs
                    raise _Refused(f"a PUT of {where} with {_header(condition)} answered 501 ({e})") from e
                raise StoreError(
                    f"probing conditional writes at {self.endpoint} with {where} failed: {e}", outcome_known=True
                ) from e
            except BotoCoreError as e:
                raise StoreError(
                    f"probing conditional writes at {self.endpoint} with {where} failed: {e}", outcome_known=True
                ) from e

        def refuse(detail: str) -> EndpointConditions:
            return EndpointConditions(self.endpoint, (), detail)

        try:
            created = put(b"osqueue probe 1", IfNoneMatch="*")
            if created is None:
                return refuse(f"a PUT of the new object {where} with If-None-Match: * failed")
            if put(b"osqueue probe 2", IfNoneMatch="*") is not None:
                return refuse(
                    f"a PUT of the existing object {where} with If-None-Match: * replaced it (S3 answers 412)"
                )
            wrong = hashlib.md5(secrets.token_bytes(16)).hexdigest()
            current, honoured = created, []
            for form in _IF_MATCH_FORMS:
                replaced = put(b"osqueue probe 3", IfMatch=if_match_value(wrong, form))
                if replaced is None:
                    honoured.append(form)
                else:  # this form is ignored: never sent
                    current = replaced
            if not honoured:
                return refuse(f"a PUT of {where} with If-Match set to a wrong entity tag replaced it (S3 answers 412)")
            for form in honoured:
                if put(b"osqueue probe 4", IfMatch=if_match_value(current, form)) is not None:
                    return EndpointConditions(self.endpoint, (form,) + tuple(f for f in honoured if f != form))
            return refuse(
                f"a PUT of {where} with If-Match set to its own entity tag {current} failed in every form "
                f"({', '.join(honoured)})"
            )
        except _Refused as e:
            return refuse(str(e))
        finally:
            try:
                self._client.delete_object(Bucket=self._bucket, Key=full)
            except (ClientError, BotoCoreError):
                pass  # a scratch object left behind is harmless (GC deletes only batch files)

    def list(self, prefix: str) -> list[ObjectInfo]:
        from botocore.exceptions import BotoCoreError, ClientError

        _validate_prefix(prefix)
        full = f"{self._prefix}/{prefix}" if self._prefix else prefix
        strip = len(self._prefix) + 1 if self._prefix else 0
        out: list[ObjectInfo] = []
        try:
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self._bucket, Prefix=full):
                for obj in page.get("Contents", []):
                    key = obj["Key"][strip:]
                    try:
                        validate_key(key)
                    except InvalidObjectKeyError:
                        continue  # not addressable through this store
                    out.append(ObjectInfo(key, int(obj.get("Size", 0))))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("LIST", prefix, e) from e
        return out

    def delete(self, key: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            self._client.delete_object(Bucket=self._bucket, Key=full)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "NoSuchKey":
                return
            raise self._fail("DELETE", key, e) from e
        except BotoCoreError as e:
            raise self._fail("DELETE", key, e) from e

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            close()


class _Refused(Exception):
    """The probe saw the endpoint refuse conditional PUTs outright."""


def _header(condition: Mapping[str, str]) -> str:
    return ", ".join(("If-None-Match" if k == "IfNoneMatch" else "If-Match") + f": {v}" for k, v in condition.items())


# ---------------------------------------------------------------------------------------------


# Stores whose SDK is an optional extra (``pip install 'osqueue[<extra>]'``): scheme -> (module, extra).
# Each module has ``open_store(uri, options)`` and imports its SDK at its top: it is imported only
# when its scheme is opened, so the base install needs no cloud SDK. The JVM
# finds the same stores through osqueue.store.ObjectStoreProvider, in artifacts of their own.
PLUGGED_STORES: dict[str, tuple[str, str]] = {
    **{scheme: ("osqueue.store_azure", "azure") for scheme in ("abfss", "abfs", "wasbs", "wasb")},
    "gs": ("osqueue.store_gcs", "gcs"),
}


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
