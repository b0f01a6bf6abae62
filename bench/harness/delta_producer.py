"""One small producer of the ``delta`` benchmark, run as its own OS process.

    python -m bench.harness.delta_producer KIND TARGET ID RATE DURATION START_AT LINGER

KIND ``osqueue``: ``osqueue.Producer(TARGET, flush_interval=LINGER)``, one ``produce()`` per row.
KIND ``delta``: ``deltalake.write_deltalake(TARGET, ..., mode="append")`` (delta-rs), one append
of the rows due so far (a row is due at START_AT + i / RATE; while an append runs, the next rows
wait for the next one, as a service's rows would). Each row's value is ``"<ID>-<i>:<time_ns at
its due time>"``. ``OSQUEUE_BENCH_STORE_OPTIONS`` (JSON) holds the store's options: osqueue's
``store_options`` or delta-rs's ``storage_options``. Prints one JSON line: rows written, appends made, appends that failed and the
produce -> durable (append returned) latencies' p50 / p99 in ms.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main(argv: list[str]) -> int:
    kind, target, pid, rate, duration, start_at, linger = argv
    n = int(float(rate) * float(duration))
    step = 1.0 / float(rate)
    t_start = float(start_at)
    durable: list[float] = []
    options = json.loads(os.environ.get("OSQUEUE_BENCH_STORE_OPTIONS") or "{}") or None
    result: dict[str, Any] = {"kind": kind, "id": pid, "rows": 0, "appends": 0, "failed_appends": 0}
    while time.time() < t_start:
        time.sleep(min(0.01, max(0.0, t_start - time.time())))
    if kind == "osqueue":
        from osqueue import Producer

        with Producer(target, flush_interval=float(linger), store_options=options) as p:
            for i in range(n):
                due = t_start + i * step
                delay = due - time.time()
                if delay > 0:
                    time.sleep(delay)
                t0 = time.time()
                h = p.produce([f"{pid}-{i}:{int(due * 1e9)}".encode()])
                h.add_done_callback(lambda _f, t0=t0: durable.append(time.time() - t0))
                result["rows"] += 1
        result["appends"] = result["rows"]
    elif kind == "delta":
        import pyarrow as pa
        from deltalake import write_deltalake

        i = 0
        while i < n:
            now = time.time()
            due_until = min(n, int((now - t_start) / step) + 1)
            if due_until <= i:
                time.sleep(max(0.0, t_start + i * step - now))
                continue
            values = [f"{pid}-{j}:{int((t_start + j * step) * 1e9)}".encode() for j in range(i, due_until)]
            t0 = time.time()
            try:
                write_deltalake(
                    target, pa.table({"value": pa.array(values, pa.binary())}), mode="append", storage_options=options
                )
            except Exception as e:  # a commit conflict that delta-rs did not retry: counted, rows written again
                result["failed_appends"] += 1
                result["last_error"] = str(e)[:300]
                continue
            t1 = time.time()
            durable.extend(t1 - (t_start + j * step) for j in range(i, due_until))
            result["appends"] += 1
            result["rows"] += len(values)
            i = due_until
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    result["durable_p50_ms"] = (_pct(durable, 50) or 0) * 1000
    result["durable_p99_ms"] = (_pct(durable, 99) or 0) * 1000
    result["ended_s_after_start"] = time.time() - t_start
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
