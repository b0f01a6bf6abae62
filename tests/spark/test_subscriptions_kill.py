"""Issue 26's done-when for named subscriptions (docs/adr/0005), with real processes: two Spark
streaming queries on subscriptions ``a`` and ``b`` and a native Python consumer on ``c`` read one
queue while a producer writes; each reader is killed with kill -9 once mid-stream and restarted at
once, while the producer still writes (the producer stops only after every restarted reader
delivered more). Every subscription sees every entry exactly once, in order, and entries leave the
queue only after all three passed them (the head's first sequence is checked against the slowest
subscription on every poll, and the queue is empty at the end).

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


def _spawn(log: pathlib.Path, *args: str) -> subprocess.Popen[bytes]:
    """A reader process in its own session, its output appended to ``log`` (a pipe nobody reads
    could fill up and stall it)."""
    with open(log, "ab") as f:
        job = subprocess.Popen([sys.executable, *args], stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    job.log = log  # type: ignore[attr-defined]
    return job


def _output(job: subprocess.Popen[bytes]) -> str:
    return str(job.log.read_text(errors="replace")[-6000:])  # type: ignore[attr-defined]


def _spark(
    queue: pathlib.Path, sub: str, ckpt: pathlib.Path, out: pathlib.Path, *extra: str
) -> subprocess.Popen[bytes]:
    return _spawn(out.with_suffix(".log"), str(HERE / "stream_job.py"), str(queue), str(ckpt), str(out),
                  "--max-batches", "3", "--option", f"subscription={sub}", *extra)  # fmt: skip


def _consumer(queue: pathlib.Path, out: pathlib.Path, *extra: str) -> subprocess.Popen[bytes]:
    return _spawn(
        out.with_suffix(".log"), str(HERE / "subscription_consumer_job.py"), str(queue), "c", str(out), *extra
    )


def _kill(job: subprocess.Popen[bytes]) -> None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)


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


def _write_atomically(path: pathlib.Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _batch_ids(out: pathlib.Path) -> list[int]:
    return [int(p.stem.split("-")[1]) for p in out.glob("batch-*.json")]


def _check_pinned(queue: pathlib.Path) -> None:
    """Entries leave the queue only after every subscription passed them: the head's first sequence is
    never above the slowest subscription's position (sampled on every poll of the test)."""
    head = _head(queue)
    nexts = [s.next for s in head.sections.subscriptions]
    assert head.first_sequence <= min(nexts), (head.first_sequence, nexts)


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
                time.sleep(0.3)  # a few batches a second

    producer = threading.Thread(target=produce, name="producer")
    producer.start()
    out = {n: tmp_path / f"out-{n}" for n in ("a", "b", "c")}
    ckpt = {n: tmp_path / f"ckpt-{n}" for n in ("a", "b")}
    until = {n: tmp_path / f"until-{n}" for n in ("a", "b", "c")}

    killed_at: dict[str, int] = {}  # reader -> its highest batch id / delivered sequence at the kill

    def start(n: str) -> subprocess.Popen[bytes]:
        if n == "c":
            return _consumer(queue, out["c"], "--until-file", str(until["c"]))
        # A restarted query takes up to 100 producer batches per micro-batch: it catches up after its
        # restart however long the restart took (the first start's 3 give several batches to kill in).
        more = ["--max-batches", "100"] if n in killed_at else []
        return _spark(queue, n, ckpt[n], out[n], "--stop-file", str(until[n]), *more)

    jobs = {n: start(n) for n in ("a", "b", "c")}
    try:
        # Each reader runs until it has delivered something, is killed with -9 and restarted at once,
        # and must deliver more after its restart, all while the producer writes: the producer stops
        # only once all three restarted readers delivered batches they had not reached before the kill.
        progress = {"a": lambda: max(_batch_ids(out["a"]), default=-1),
                    "b": lambda: max(_batch_ids(out["b"]), default=-1),
                    "c": lambda: max((int(p.stem.split("-")[1]) for p in out["c"].glob("seq-*.json")), default=-1)}  # fmt: skip
        first_round = {"a": 2, "b": 2, "c": 9}  # kill after 3 batches (a, b) or 10 sequences (c)
        recovered: set[str] = set()
        deadline = time.monotonic() + 360  # generous: a Spark start takes 80 s on a machine loaded 15x
        while len(recovered) < 3:
            for n, job in jobs.items():
                if job.poll() is not None:
                    pytest.fail(f"reader {n} exited early:\n" + _output(job))
                reached = progress[n]()
                if n not in killed_at and reached >= first_round[n]:
                    _kill(job)
                    killed_at[n] = progress[n]()
                    jobs[n] = start(n)  # restarted while the producer writes
                elif n in killed_at and reached > killed_at[n]:
                    recovered.add(n)
            _check_pinned(queue)
            assert time.monotonic() < deadline, (
                f"killed: {sorted(killed_at)}, delivered after restart: {sorted(recovered)}"
            )
            time.sleep(0.05)
    except BaseException:
        for n, job in jobs.items():
            if job.poll() is None:
                _kill(job)
            print(f"--- reader {n}:\n{_output(job)}")
        raise
    finally:
        stop.set()
        producer.join(60)
    total = len(produced)
    next_sequence = _head(queue).next_sequence
    assert next_sequence == total // 3

    # The restarted readers drain what the producer wrote, then stop cleanly at the last sequence:
    # the queries with query.stop() once it is committed (the source acknowledges it), the consumer
    # by closing once it acknowledged it.
    for n in ("a", "b", "c"):
        _write_atomically(until[n], str(next_sequence - 1))
    deadline = time.monotonic() + 180
    try:
        for n, job in jobs.items():
            while job.poll() is None:
                _check_pinned(queue)
                assert time.monotonic() < deadline, f"reader {n} did not drain to {next_sequence - 1}"
                time.sleep(0.1)
            assert job.returncode == 0, _output(job)
    except BaseException:
        for n, job in jobs.items():
            print(f"--- reader {n}:\n{_output(job)}")
        raise
    finally:
        for job in jobs.values():
            if job.poll() is None:
                _kill(job)
    head = _head(queue)
    assert {s.name: s.next for s in head.sections.subscriptions} == dict.fromkeys("abc", next_sequence)
    assert head.depth == 0 and head.first_sequence == next_sequence  # every reader passed every entry

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
