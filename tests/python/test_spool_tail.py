"""The spool uploader's tail (issue 28): the crash windows its shorter fsync order opens, by power loss.

A crash here is a power loss, the harder case: the spool files are cut back to what was fsync'd when the
crash point was reached (a kill -9 keeps the page cache, so it loses less). The fsyncs are observed by
wrapping ``os.fdatasync``/``os.fsync``; the crashed producer's store writes stop at the crash point, and a
fresh producer replays the crash image against the same store (local in-memory store, no server).
"""

from __future__ import annotations

import os
import pathlib
import threading
import time
from typing import Any

import pytest
from helpers import WrappedStore

from osqueue.format import decode_batch, decode_manifest
from osqueue.producer import Producer
from osqueue.producer.spool_log import BatchRecord, decode_records
from osqueue.queue import RetryPolicy
from osqueue.store import InMemoryStore

KEY = "ingest/manifest"
FAST = RetryPolicy(base_delay=0.001, max_delay=0.01)


def _manifest(store: Any) -> list[tuple[str, list[bytes]]]:
    obj = store.get(KEY)
    if obj is None:
        return []
    return [(e.location, decode_batch(store.get(e.location).data, "b")) for e in decode_manifest(obj.data, KEY).entries]


def _values(store: Any) -> list[bytes]:
    return [v for _, vs in _manifest(store) for v in vs]


class PowerLoss:
    """What of a spool directory's log files is on disk: each file's bytes as of its last fsync."""

    def __init__(self, directory: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory = str(directory)
        self.synced: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.freeze = threading.Event()  # once set, the directory's fsyncs never return (a crash is coming)
        real_fdatasync, real_fsync = os.fdatasync, os.fsync

        def observed(real: Any) -> Any:
            def sync(fd: int) -> None:
                path = os.readlink(f"/proc/self/fd/{fd}")
                ours = os.path.dirname(path) == self.directory and path.endswith(".log")
                if ours and self.freeze.is_set():
                    threading.Event().wait()  # the process dies before this fsync returns
                real(fd)
                if ours:
                    with open(path, "rb") as f:
                        data = f.read()
                    with self.lock:
                        self.synced[path] = data

            return sync

        monkeypatch.setattr(os, "fdatasync", observed(real_fdatasync))
        monkeypatch.setattr(os, "fsync", observed(real_fsync))

    def image(self, into: pathlib.Path) -> list[Any]:
        """Writes the crash image of the log files into ``into``; its records."""
        into.mkdir()
        records: list[Any] = []
        with self.lock:
            for name in sorted(n for n in os.listdir(self.directory) if n.endswith(".log")):
                data = self.synced.get(os.path.join(self.directory, name), b"")
                (into / name).write_bytes(data)
                records += decode_records(data, name)[0]
        return records


class Crashing(WrappedStore):
    """Stops the producer's manifest writes once ``dead`` (they hang: the process is gone)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.dead = threading.Event()
        self.on_cas: Any = None
        self.on_batch_put: Any = None

        def hook(key: str, data: bytes, expected: Any, apply: Any) -> Any:
            if self.dead.is_set():
                threading.Event().wait()
            if key == KEY and self.on_cas is not None:
                return self.on_cas(apply)
            return apply()

        def on_put(key: str, data: bytes) -> None:
            if key.endswith(".batch") and self.on_batch_put is not None:
                self.on_batch_put(key)

        self.on_conditional = hook
        self.on_put = on_put


def _wait(event: threading.Event, what: str) -> None:
    assert event.wait(10), what


def _restart(store: Any, spool: pathlib.Path) -> None:
    with Producer(store=store, spool_dir=str(spool), retry=FAST, flush_interval=0.01) as p:
        p.flush(10)


def test_a_crash_after_a_batch_put_before_the_attempt_sync_replays_under_a_fresh_name(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a) The BATCH record is no longer fsync'd before its PUT. Power lost once the PUT went out, before
    # any ATTEMPT: the name may be lost with the record; the call is re-batched under a fresh name and the
    # orphan file is never appended (GC deletes it after its grace).
    inner = InMemoryStore()
    store = Crashing(inner)
    power = PowerLoss(tmp_path / "spool", monkeypatch)
    image: list[Any] = []
    orphans: list[str] = []

    def crash(key: str) -> None:
        if not store.dead.is_set():
            orphans.append(key)
            image.extend(power.image(tmp_path / "image"))
            store.dead.set()

    store.on_batch_put = crash
    p = Producer(store=store, spool_dir=str(tmp_path / "spool"), retry=FAST, flush_interval=3600, durability="local")
    p.produce([b"e0"])  # returned: its ENTRIES record is on disk
    threading.Thread(target=p.flush, args=(30,), daemon=True).start()  # names the batch; never returns
    _wait(store.dead, "the batch's PUT never started")
    assert not any(isinstance(r, BatchRecord) for r in image), "the BATCH record was fsync'd before its PUT"
    deadline = time.monotonic() + 10
    while inner.get(orphans[0]) is None and time.monotonic() < deadline:
        time.sleep(0.005)
    _restart(inner, tmp_path / "image")
    assert _values(inner) == [b"e0"]
    assert orphans[0] not in [loc for loc, _ in _manifest(inner)]
    assert inner.get(orphans[0]) is not None  # the orphan: unreferenced, left to GC


@pytest.mark.parametrize("durability", ["local", "queue"])
def test_a_crash_at_the_cas_finds_the_attempt_on_disk_and_appends_each_entry_once(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    # (a) The ATTEMPT fsync is the one that makes the batch names (and with durability="queue" the calls)
    # durable: it must precede the CAS. The crash image is what was on disk when the CAS was sent; the CAS
    # lands; replay must find it landed (a CAS ahead of that fsync would replay the calls again: twice).
    inner = InMemoryStore()
    store = Crashing(inner)
    power = PowerLoss(tmp_path / "spool", monkeypatch)

    image: list[Any] = []

    def cas(apply: Any) -> Any:
        image.extend(power.image(tmp_path / "image"))
        outcome = apply()
        store.dead.set()
        return outcome

    store.on_cas = cas
    p = Producer(store=store, spool_dir=str(tmp_path / "spool"), retry=FAST, flush_interval=3600, durability=durability)
    p.produce([b"e0"])
    threading.Thread(target=p.flush, args=(30,), daemon=True).start()  # batch, PUT, ATTEMPT, CAS; no other fsync
    _wait(store.dead, "no manifest write")
    landed = _values(inner)
    assert landed == [b"e0"]
    assert [type(r).__name__ for r in image] == ["EntriesRecord", "BatchRecord", "AttemptRecord"]
    _restart(inner, tmp_path / "image")
    assert _values(inner) == landed  # found landed: nothing appended again


@pytest.mark.parametrize("durability", ["local", "queue"])
def test_handles_resolve_before_landed_is_durable_and_replay_appends_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    # (b) Once the CAS landed, the spool's fsyncs hang (the process is about to die): the handle must still
    # resolve (it no longer waits for LANDED's fsync), and only with its entries in the manifest. Replay of
    # what is on disk (ATTEMPT, no LANDED) finds the write landed and appends nothing.
    inner = InMemoryStore()
    store = Crashing(inner)
    power = PowerLoss(tmp_path / "spool", monkeypatch)

    def cas(apply: Any) -> Any:
        outcome = apply()
        power.freeze.set()
        return outcome

    store.on_cas = cas
    p = Producer(
        store=store,
        spool_dir=str(tmp_path / "spool"),
        retry=FAST,
        flush_interval=0.01,
        durability=durability,
        flush_size_bytes=1,
    )
    handle = p.produce([b"e0", b"e1"])
    handle.wait_durable(10)  # raises on timeout: the handle waited for the LANDED fsync
    assert _values(inner) == [b"e0", b"e1"]  # resolved only once the CAS landed
    store.dead.set()
    records = power.image(tmp_path / "image")
    assert [type(r).__name__ for r in records] == ["EntriesRecord", "BatchRecord", "AttemptRecord"]
    _restart(inner, tmp_path / "image")
    assert _values(inner) == [b"e0", b"e1"]
