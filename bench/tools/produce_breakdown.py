"""Where produce() -> durable goes, step by step, for the Python producer (supplementary; not part
of `python -m bench.harness run`).

    PYTHONPATH=python .venv/bin/python bench/tools/produce_breakdown.py [RECORDS, default 100] [LATENCY_MS, default 20] [--eager-flush] [--interval-ms=50]

The latency benchmark's producer (one record every 50 ms, flush_interval 0.02 s, the linger) on
moto through the latency proxy, with its store wrapped so that every request is timed in the
producer's process. Per record: the linger (produce() -> its batch PUT starts), the batch PUT,
the wait for the group committer, each manifest request of the append that carried it (GET, the
conditional PUT, any other), and the hand-over to the durable callback. Prints the medians and
p90 of each step over the records, and the requests per flush. ``--eager-flush``: the producer
sends a batch at once when none of its batches is in flight (``eager_flush=True``);
``--interval-ms=N``: one record every N ms instead of 50.
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import threading
import time
from typing import Any

sys.path[:0] = [
    str(pathlib.Path(__file__).resolve().parents[2] / "python"),
    str(pathlib.Path(__file__).resolve().parents[2]),
]
from bench.harness.environment import environment  # noqa: E402 (after the sys.path setup)

from osqueue.producer import Producer  # noqa: E402
from osqueue.store import ObjectStore, Written  # noqa: E402

MANIFEST = "ingest/manifest"


class TimedStore:
    """Delegates to a store; records (operation, key, start, end, data) of every request (monotonic s):
    a conditional write that landed is "CAS", one that did not "CAS-lost"."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.ops: list[tuple[str, str, float, float, bytes | None]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _timed(self, op: str, key: str, data: bytes | None, call: Any) -> Any:
        start = time.monotonic()
        result = None
        try:
            result = call()
            return result
        finally:
            if op == "CAS" and not isinstance(result, Written):
                op = "CAS-lost"
            with self._lock:
                self.ops.append((op, key, start, time.monotonic(), data))

    def get(self, key: str) -> Any:
        return self._timed("GET", key, None, lambda: self.inner.get(key))

    def put(self, key: str, data: bytes) -> None:
        self._timed("PUT", key, None, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes) -> Any:
        return self._timed("CAS", key, data, lambda: self.inner.put_if_absent(key, data))

    def put_if_version_matches(self, key: str, data: bytes, expected_version: Any) -> Any:
        return self._timed("CAS", key, data, lambda: self.inner.put_if_version_matches(key, data, expected_version))


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main() -> None:
    eager = "--eager-flush" in sys.argv
    interval_ms = next((float(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--interval-ms=")), 50.0)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    records = int(args[0]) if args else 100
    latency_ms = float(args[1]) if len(args) > 1 else 20.0
    with environment(latency_ms, None, print) as env:
        store = TimedStore(env.store("breakdown"))
        with Producer(store=store, flush_interval=0.02, eager_flush=eager) as p:  # type: ignore[arg-type]
            p.produce([b"warm"]).wait_durable(60)  # the store's conditional-write probe, the prefix record
            store.ops.clear()
            produced: list[tuple[float, Any]] = []
            durable: dict[int, float] = {}
            start = time.monotonic()
            for i in range(records):
                delay = start + i * interval_ms / 1000 - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                t0 = time.monotonic()
                h = p.produce([f"{i}".encode()])
                h.add_done_callback(lambda f, i=i: durable.__setitem__(i, time.monotonic()))
                produced.append((t0, h))
            p.flush(60)
        ops = list(store.ops)
    steps: dict[str, list[float]] = {}
    per_flush: list[int] = []
    manifest_ops = sorted((o for o in ops if o[1].startswith(MANIFEST)), key=lambda o: o[3])
    located = [(t0, h.wait_durable(1).location) for t0, h in produced]
    # The write that landed a record: the first landed conditional PUT carrying its location.
    landed = {
        loc: min((o for o in manifest_ops if o[0] == "CAS" and loc.encode() in (o[4] or b"")), key=lambda o: o[3])
        for _, loc in located
    }
    landed_ends = sorted({o[3] for o in landed.values()})
    for i, (t0, location) in enumerate(located):
        put = next(o for o in ops if o[0] == "PUT" and o[1] == location)
        cas = landed[location]
        # The append that landed it: the manifest requests since the previous landed write ended.
        previous_end = max((e for e in landed_ends if e < cas[3]), default=put[3])
        append = [o for o in manifest_ops if o[2] >= previous_end and o[3] <= cas[3]]
        first = min(o[2] for o in append)
        record = {
            "linger (produce -> batch PUT starts)": put[2] - t0,
            "batch PUT": put[3] - put[2],
            "wait for the committer (PUT end -> append's 1st request)": max(0.0, first - put[3]),
            "manifest GET": sum(o[3] - o[2] for o in append if o[0] == "GET" and o[1] == MANIFEST),
            "manifest conditional PUT (the one that landed)": cas[3] - cas[2],
            "other manifest requests (lost CAS, receipts, segments)": sum(
                o[3] - o[2] for o in append if o is not cas and not (o[0] == "GET" and o[1] == MANIFEST)
            ),
            "durable callback (CAS end -> handle done)": durable[i] - cas[3],
            "total produce -> durable": durable[i] - t0,
        }
        record["in between (step function, scheduling)"] = record["total produce -> durable"] - sum(
            v for k, v in record.items() if not k.startswith("total")
        )
        for k, v in record.items():
            steps.setdefault(k, []).append(v * 1000)
        per_flush.append(len(append))
    print(
        f"\n{records} records, one every {interval_ms:g} ms, flush_interval 0.02 s, eager_flush {eager}, "
        f"{latency_ms:g} ms per request (proxy)"
    )
    print(f"{'step':58} {'p50 ms':>8} {'p90 ms':>8} {'mean ms':>8}")
    for k, v in steps.items():
        print(f"{k:58} {statistics.median(v):8.1f} {pct(v, 90):8.1f} {statistics.mean(v):8.1f}")
    print(f"manifest requests per flush: median {statistics.median(per_flush):g}, max {max(per_flush)}")


if __name__ == "__main__":
    main()
