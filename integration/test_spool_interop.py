"""A producer spool left by a killed producer of one language is replayed by a producer of the other
(docs/format.md §9, ADR 0006 part 2): each entry whose produce() returned is in the queue exactly once,
and nothing is there twice. The spool's lock excludes a producer of the other language while one lives."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import pytest

from osqueue import Producer
from osqueue.clock import SystemClock
from osqueue.errors import InvalidConfigError
from osqueue.format import decode_batch, decode_manifest
from osqueue.producer.spool import Spool
from osqueue.store import open_store

from . import jvm_tool

REPO = pathlib.Path(__file__).resolve().parents[1]
RETURNED = 300  # produce() calls that returned (fsync'd locally) before the kill

_PYTHON_CHILD = """
import sys
from osqueue.producer import Producer
p = Producer(sys.argv[1], spool_dir=sys.argv[2], durability="local", flush_interval=0.005)
i = 0
while True:
    p.produce([b"py-%d" % i])
    print(i, flush=True)
    i += 1
"""


def _values(queue: pathlib.Path) -> list[str]:
    store = open_store(str(queue))
    try:
        obj = store.get("ingest/manifest")
        if obj is None:
            return []
        entries = decode_manifest(obj.data, "ingest/manifest").entries
        return [v.decode() for e in entries for v in decode_batch(store.get(e.location).data, e.location)]
    finally:
        store.close()


def _kill_after(child: subprocess.Popen, count: int, before_kill=None) -> list[int]:
    """The indices the child printed (each after its produce() returned), killed with -9 after ``count``."""
    assert child.stdout is not None
    returned: list[int] = []
    try:
        for line in child.stdout:
            returned.append(int(line))
            if len(returned) >= count:
                break
        if before_kill is not None:
            before_kill()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    returned += [int(line) for line in child.stdout.read().split()]  # printed before the kill
    stderr = child.stderr.read() if child.stderr is not None else ""
    assert len(returned) >= count, f"the producer stopped early ({child.returncode}): {stderr[-2000:]}"
    return returned


def _assert_exactly_once(queue: pathlib.Path, tag: str, returned: list[int]) -> None:
    values = _values(queue)
    assert len(values) == len(set(values)), "an entry was appended twice"
    missing = {f"{tag}-{i}" for i in returned} - set(values)
    assert not missing, f"returned but lost: {sorted(missing)[:5]}"


def test_a_jvm_producer_replays_a_killed_python_producers_spool(tmp_path: pathlib.Path) -> None:
    queue, spool = tmp_path / "queue", tmp_path / "spool"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    child = subprocess.Popen(
        [sys.executable, "-c", _PYTHON_CHILD, str(queue), str(spool)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    returned = _kill_after(child, RETURNED)
    before = len(_values(queue))
    # count 0: the JVM producer only replays what the spool holds, then closes
    jvm_tool.run("produce", str(queue), "jvm", "0", "--spool-dir", str(spool), "--flush-ms", "5")
    _assert_exactly_once(queue, "py", returned)
    assert len(_values(queue)) > before, "the killed producer had left nothing to replay"
    with Producer(str(queue), spool_dir=str(spool)) as p:  # settled: nothing left to replay
        p.flush(30)
    _assert_exactly_once(queue, "py", returned)


def test_a_python_producer_replays_a_killed_jvm_producers_spool(tmp_path: pathlib.Path) -> None:
    queue, spool = tmp_path / "queue", tmp_path / "spool"
    child = jvm_tool.start(
        "produce",
        str(queue),
        "jvm",
        "100000000",
        "--spool-dir",
        str(spool),
        "--durability",
        "local",
        "--print-returned",
        "true",
        "--flush-ms",
        "5",
    )

    def refused_while_the_jvm_lives() -> None:
        with pytest.raises(InvalidConfigError) as e:
            Spool(str(spool), clock=SystemClock())
        assert e.value.option == "spool_dir" and f"owned by pid {child.pid} on" in str(e.value)

    returned = _kill_after(child, RETURNED, refused_while_the_jvm_lives)
    before = len(_values(queue))
    with Producer(str(queue), spool_dir=str(spool), flush_interval=0.005) as p:
        p.flush(60)
    _assert_exactly_once(queue, "jvm", returned)
    assert len(_values(queue)) > before, "the killed producer had left nothing to replay"
