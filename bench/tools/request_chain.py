"""The floor of a real-time row's latency (supplementary; not part of `python -m bench.harness run`).

    PYTHONPATH=python .venv/bin/python bench/tools/request_chain.py [ROUNDS, default 300] [LATENCY_MS, default 20]

A row reaches a real-time reader through four requests one after the other, whatever the code around
them: the batch PUT, the manifest's conditional PUT (the manifest may name only a batch that exists),
the reader's GET of the manifest that names it, and its GET of the batch. This times just those four,
back to back from one client on moto through the latency proxy, with no linger, no poll wait and no
decoding, and prints each step's p50/p99 and the chain's: no reader of the RFC's format sees a row
sooner on this store.
"""

from __future__ import annotations

import pathlib
import sys
import time
import uuid

sys.path[:0] = [
    str(pathlib.Path(__file__).resolve().parents[2] / "python"),
    str(pathlib.Path(__file__).resolve().parents[2]),
]
from bench.harness.environment import environment  # noqa: E402 (after the sys.path setup)
from bench.harness.stats import percentile  # noqa: E402

BATCH = b"x" * 1200  # the latency row's batch: a few 100-byte records, framed
HEAD = b"h" * 300


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    latency_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    with environment(latency_ms, None, print) as env:
        store = env.store(f"request-chain-{uuid.uuid4().hex[:8]}")
        store.put("manifest", HEAD)
        head = store.get("manifest")
        assert head is not None
        version = head.version
        steps: dict[str, list[float]] = {k: [] for k in ("batch PUT", "manifest CAS", "manifest GET", "batch GET")}
        totals: list[float] = []
        for i in range(rounds):
            marks = [time.monotonic()]
            store.put(f"batches/{i}.batch", BATCH)
            marks.append(time.monotonic())
            written = store.put_if_version_matches("manifest", HEAD, version)
            version = written.version  # type: ignore[union-attr] (a lone writer: always Written)
            marks.append(time.monotonic())
            store.get("manifest")
            marks.append(time.monotonic())
            store.get(f"batches/{i}.batch")
            marks.append(time.monotonic())
            for times, a, b in zip(steps.values(), marks, marks[1:]):
                times.append((b - a) * 1000)
            totals.append((marks[-1] - marks[0]) * 1000)
        for name, times in [*steps.items(), ("the chain", totals)]:
            times.sort()
            print(f"{name}: p50 {percentile(times, 50):.1f} ms, p99 {percentile(times, 99):.1f} ms")


if __name__ == "__main__":
    main()
