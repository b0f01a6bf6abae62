"""A store on a local (or shared POSIX) file system (JVM: ``LocalFileSystemStore``)."""

from __future__ import annotations

import builtins
import hashlib
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from osqueue.errors import InvalidConfigError, InvalidObjectKeyError, StoreError
from osqueue.store.local_file_lock import held
from osqueue.store.object_store import (
    PRECONDITION_FAILED,
    CasOutcome,
    ObjectInfo,
    ObjectVersion,
    VersionedObject,
    Written,
    join_key,
    validate_key,
    validate_prefix,
)

# Local filesystem (docs/format.md §7)


def fsync_directory(directory: str) -> None:
    """Makes a directory's entries (a create, rename or unlink in it) durable."""
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
        data = self.get_bytes(key)
        return None if data is None else VersionedObject(data, _content_version(data))

    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes without its version (batch reads: no content hash), or None if it does
        not exist (JVM: ``getBytes``)."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None  # a directory is not an object (as on S3)
        except OSError as e:
            raise StoreError(f"cannot read '{key}' in {self.uri}: {e}") from e

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
            fsync_directory(parent)

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
        fsync_directory(directory)

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
        with held(lock_path, self._lock_timeout, f"'{key}' in {self.uri}"):
            yield

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
        validate_prefix(prefix)
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
                    st = entry.stat(follow_symlinks=False)
                    out.append(ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000))
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
