"""The exclusive lock a local conditional write holds on ``<dir>/.<name>.lock`` (docs/format.md §7;
JVM: ``LocalFileLock``).

Two layers: a ``threading.Lock`` per lock-file path serializes the threads of this process, and a
whole-file POSIX record lock (``fcntl.lockf``, the same lock as Java's ``FileChannel.tryLock``)
excludes other processes. The record lock is polled every 1-5 ms until a deadline, so a stuck
holder yields a :class:`~osqueue.errors.StoreError`, never a hang. The lock file is never
deleted: deleting it would let two writers lock different inodes.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from osqueue.errors import StoreError

_process_locks: dict[str, threading.Lock] = {}
_process_locks_guard = threading.Lock()


def _process_lock(path: str) -> threading.Lock:
    with _process_locks_guard:
        lock = _process_locks.get(path)
        if lock is None:
            lock = _process_locks[path] = threading.Lock()
        return lock


@contextmanager
def held(lock_path: str, timeout: float, what: str) -> Iterator[None]:
    """Holds the lock on ``lock_path`` (waiting at most ``timeout`` seconds) for the ``with`` body.

    Raises:
        StoreError: The lock was not had in time (``what`` names the object in the message), or
            the lock file could not be opened or locked.
    """
    deadline = time.monotonic() + timeout
    mutex = _process_lock(lock_path)
    if not mutex.acquire(timeout=timeout):
        raise StoreError(
            f"timed out after {timeout} s waiting for the lock on {what}",
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
                        f"timed out after {timeout} s waiting for the lock on {what} "
                        f"(held by another process: {lock_path})",
                        outcome_known=True,
                    )
                time.sleep(random.uniform(0.001, 0.005))
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the record lock
    finally:
        mutex.release()
