"""Issue 26's done-when for named subscriptions (docs/adr/0005), with real processes: two Spark
streaming queries on subscriptions ``a`` and ``b`` and a native Python consumer on ``c`` read one
queue while a producer writes; each reader is killed with kill -9 once mid-stream and restarted.
Every subscription sees every entry exactly once, in order, and entries leave the queue only after
all three passed them (asserted on the head while ``c`` lags, then after it caught up).

Cost: four Spark driver starts (two at a time) and two consumer processes; about 40-60 s."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

import osqueue
from osqueue.format.manifest_head import parse_head
from osqueue.queue.subscriptions import Subscriptions
from osqueue.store import open_store

HERE = pathlib.Path(__file__).resolve().parent
KEY = "ingest/manifest"


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def _spark(queue: pathlib.Path, sub: str, ckpt: pathlib.Path, out: pathlib.Path, *extra: str) -> subprocess.Popen[str]:
    return _spawn(str(HERE / "stream_job.py"), str(queue), str(ckpt), str(out), "--max-batches", "3",
                  "--option", f"subscription={sub}", *extra)  # fmt: skip


def _consumer(queue: pathlib.Path, out: pathlib.Path, *extra: str) -> subprocess.Popen[str]:
    return _spawn(str(HERE / "subscription_consumer_job.py"), str(queue), "c", str(out), *extra)


def _kill(job: subprocess.Popen[str]) -> None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)


def _wait_for(what: str, done, jobs: list[subprocess.Popen[str]], timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not done():
        for j in jobs:
            if j.poll() is not None:
                pytest.fail(f"a reader exited while waiting for {what}:\n" + (j.stdout.read() if j.stdout else ""))
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _head(queue: pathlib.Path):  # type: ignore[no-untyped-def]
    return parse_head((queue / KEY).read_bytes(), KEY)


def _spark_values(out: pathlib.Path) -> list[tuple[int, str]]:
    """(sequence, value) in delivery order: the batch files by batch id (a replayed id overwrote its file)."""
    rows: list[tuple[int, str]] = []
    for f in sorted(out.glob("batch-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        rows += [
            (r["sequence"], r["value"])
            for r in sorted(json.loads(f.read_text()), key=lambda r: (r["sequence"], r["index"]))
        ]
    return rows


def _consumer_values(out: pathlib.Path) -> list[tuple[int, str]]:
    rows: list[tuple[int, str]] = []
    for f in sorted(out.glob("seq-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        rows += [(int(f.stem.split("-")[1]), v) for v in json.loads(f.read_text())]
    return rows


def test_two_queries_and_a_consumer_on_three_subscriptions_survive_kill_dash_nine(tmp_path: pathlib.Path) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    store = open_store(str(queue))
    subs = Subscriptions(store, KEY)
    for name in ("a", "b", "c"):
        subs.create(name)
    store.close()

    produced: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        with osqueue.Producer(str(queue), flush_interval=3600) as p:
            i = 0
            while not stop.is_set():
                values = [f"v{i}-{k}" for k in range(3)]
                p.produce([v.encode() for v in values])
                p.flush()  # one batch, durable
                produced.extend(values)
                i += 1
                time.sleep(0.3)  # a few batches a second: the drains below stay a few micro-batches

    producer = threading.Thread(target=produce, name="producer")
    producer.start()
    out = {n: tmp_path / f"out-{n}" for n in ("a", "b", "c")}
    ckpt = {n: tmp_path / f"ckpt-{n}" for n in ("a", "b")}
    try:
        # Round 1: each reader runs until it has delivered something, then is killed with -9, while
        # the producer writes.
        jobs = {n: _spark(queue, n, ckpt[n], out[n]) for n in ("a", "b")}
        jobs["c"] = _consumer(queue, out["c"])
        thresholds = {"a": lambda: len(list(out["a"].glob("batch-*.json"))) >= 3,
                      "b": lambda: len(list(out["b"].glob("batch-*.json"))) >= 3,
                      "c": lambda: len(list(out["c"].glob("seq-*.json"))) >= 10}  # fmt: skip
        killed: set[str] = set()
        deadline = time.monotonic() + 150
        while len(killed) < 3:
            for n, job in jobs.items():
                if n not in killed and thresholds[n]():
                    _kill(job)
                    killed.add(n)
                elif n not in killed and job.poll() is not None:
                    pytest.fail(f"reader {n} exited early:\n" + (job.stdout.read() if job.stdout else ""))
            assert time.monotonic() < deadline, f"readers killed so far: {sorted(killed)}"
            time.sleep(0.05)
        time.sleep(0.3)  # a little more produced after the kills: c's restart has entries to read
    finally:
        stop.set()
        producer.join(60)
    total = len(produced)
    next_sequence = _head(queue).next_sequence
    assert next_sequence == total // 3

    # Round 2: the queries restart from their checkpoints (AvailableNow: drain, commit, ack, exit).
    a2, b2 = (_spark(queue, n, ckpt[n], out[n], "--available-now", "--max-batches", "500") for n in ("a", "b"))
    for j in (a2, b2):
        assert j.wait(240) == 0, j.stdout.read() if j.stdout else ""
    head = _head(queue)
    records = {s.name: s for s in head.sections.subscriptions}
    assert records["a"].next == records["b"].next == next_sequence
    # c was killed behind them: what it has not acknowledged stays queued, from its position on.
    assert records["c"].next < next_sequence
    assert head.first_sequence == records["c"].next and head.depth == next_sequence - records["c"].next

    # c restarts (kill -9 left its last acks unwritten: it reads those again, into the same files).
    c2 = _consumer(queue, out["c"], "--until", str(next_sequence - 1))
    assert c2.wait(120) == 0, c2.stdout.read() if c2.stdout else ""
    head = _head(queue)
    assert {s.name: s.next for s in head.sections.subscriptions} == dict.fromkeys("abc", next_sequence)
    assert head.depth == 0  # every reader passed every entry: the queue is empty

    for name in ("a", "b"):
        rows = _spark_values(out[name])
        assert [v for _, v in rows] == produced, name  # every entry once, in order
        assert [s for s, _ in rows] == sorted(s for s, _ in rows), name
    rows = _consumer_values(out["c"])
    assert [v for _, v in rows] == produced
    # In order: each consumer process delivered increasing sequences, the restart from its acked position.
    logs = sorted(out["c"].glob("deliveries-*.log"), key=lambda p: p.stat().st_mtime)
    runs = [[int(line) for line in p.read_text().split()] for p in logs]
    assert len(runs) == 2 and all(r == sorted(r) and len(set(r)) == len(r) for r in runs)
    assert runs[1][0] <= runs[0][-1] + 1 and runs[1][-1] == next_sequence - 1
