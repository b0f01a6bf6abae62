"""The outage chaos case of issue 28 (docs/adr/0006 part 2; docs/reliability.md "Store outage").

A moto S3 server behind the fault proxy; two spooled Python producers (separate processes,
``durability="local"``) produce steadily. The proxy then resets every request for the outage
(``OSQUEUE_OUTAGE_SECONDS``, 10 s by default in CI; the documented run uses 60), during which one
producer is killed with kill -9 and started again on its spool. After the outage both are stopped
(``close()``: everything spooled lands). Checked on the queue read directly from the server: every
value whose ``produce()`` returned (it is in the producer's durable log) is in the queue exactly
once, in the order its process made it, and nothing else is there but values produced by those processes.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "tests" / "s3", pathlib.Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from fault_proxy import FaultProxy  # noqa: E402
from fixtures import new_bucket, run_s3_server  # noqa: E402

from osqueue.consumer import Consumer  # noqa: E402
from osqueue.store import S3Store  # noqa: E402

OUTAGE_S = float(os.environ.get("OSQUEUE_OUTAGE_SECONDS", "10"))
RESULTS: dict[str, Any] = {}


def _lines(path: pathlib.Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _wait_for(what: str, cond: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_two_spooled_producers_survive_an_outage_and_a_kill_9_with_every_durable_entry_once(
    tmp_path: pathlib.Path,
) -> None:
    t0 = time.monotonic()
    with run_s3_server("moto") as s3:
        bucket, prefix = new_bucket(s3), "chaos"
        with FaultProxy(s3.endpoint, seed=28) as proxy:

            def start(name: str) -> subprocess.Popen[bytes]:
                cfg = {
                    "bucket": bucket,
                    "prefix": prefix,
                    "endpoint": proxy.endpoint,
                    "access_key": s3.access_key,
                    "secret_key": s3.secret_key,
                    "region": s3.region,
                    "spool_dir": str(tmp_path / f"spool-{name}"),
                    "name": name,
                    "durable_log": str(tmp_path / f"durable-{name}.log"),
                    "stop_file": str(tmp_path / "stop"),
                    "pace_s": 0.01,
                }
                path = tmp_path / f"config-{name}.json"
                path.write_text(json.dumps(cfg), encoding="utf-8")
                err = (tmp_path / f"stderr-{name}.log").open("ab")
                return subprocess.Popen(
                    [sys.executable, str(pathlib.Path(__file__).with_name("outage_producer.py")), str(path)],
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )

            logs = {n: tmp_path / f"durable-{n}.log" for n in ("a", "b")}
            procs = {n: start(n) for n in logs}
            _wait_for("both producers producing", lambda: all(len(_lines(p)) >= 20 for p in logs.values()), 60)

            proxy.rates = {"reset": 1.0}  # the store is unreachable: every request is reset
            outage_start = time.monotonic()
            before_kill = len(_lines(logs["a"]))
            _wait_for("a producing in the outage", lambda: len(_lines(logs["a"])) >= before_kill + 20, OUTAGE_S)
            procs["a"].send_signal(signal.SIGKILL)
            procs["a"].wait(10)
            killed_at = len(_lines(logs["a"]))
            procs["a"] = start("a")  # on the same spool, still in the outage
            b_in_outage = len(_lines(logs["b"]))
            remaining = OUTAGE_S - (time.monotonic() - outage_start)
            if remaining > 0:
                time.sleep(remaining)  # the outage's length is the point of the test
            proxy.rates = {}
            outage_s = time.monotonic() - outage_start
            during = {
                "a_before_kill": killed_at - before_kill,
                "a_after_restart": len(_lines(logs["a"])) - killed_at,
                "b": len(_lines(logs["b"])) - b_in_outage,
            }
            _wait_for("the restarted producer producing", lambda: len(_lines(logs["a"])) >= killed_at + 20, 60)
            (tmp_path / "stop").touch()
            for n, proc in procs.items():
                rc = proc.wait(120)
                assert rc == 0, f"producer {n} exited {rc}: {(tmp_path / f'stderr-{n}.log').read_text()[-2000:]}"
            faults = proxy.injected()

        durable = [v for p in logs.values() for v in _lines(p)]
        direct = S3Store(
            bucket,
            prefix,
            options={
                "fs.s3a.endpoint": s3.endpoint,
                "fs.s3a.path.style.access": "true",
                "fs.s3a.access.key": s3.access_key,
                "fs.s3a.secret.key": s3.secret_key,
                "fs.s3a.endpoint.region": s3.region,
            },
        )
        queued: list[str] = []
        with Consumer(store=direct, run_gc=False) as c:
            while (batch := c.next_batch()) is not None:
                queued.extend(e.decode() for e in batch.entries)
        direct.close()

    seen = collections.Counter(queued)
    dups = {v: n for v, n in seen.items() if n > 1}
    assert not dups, f"entries in the queue twice: {sorted(dups)[:10]}"
    missing = [v for v in durable if v not in seen]
    assert not missing, f"entries whose produce() returned are missing: {missing[:10]}"
    # Values are <name>-<pid>-<i>; a killed process's last values may be queued without a log line.
    parts = [v.split("-") for v in queued]
    strangers = [
        v for v, p in zip(queued, parts) if not (len(p) == 3 and p[0] in logs and p[1].isdigit() and p[2].isdigit())
    ]
    assert not strangers, strangers[:10]
    last: dict[str, int] = {}
    for v, (name, pid, i) in zip(queued, parts):  # one producer's calls land in the order it made them
        assert int(i) > last.get(f"{name}-{pid}", -1), f"{v} is queued after a later call of its process"
        last[f"{name}-{pid}"] = int(i)
    RESULTS.update(
        outage_s=round(outage_s, 1),
        durable=len(durable),
        queued=len(queued),
        produced_during_outage=during,
        resets=faults["reset"],
        wall_s=round(time.monotonic() - t0, 1),
    )
    print(f"\noutage chaos: {RESULTS}")
