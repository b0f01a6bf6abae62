"""Where one producer process's CPU went per committed batch (supplementary; not part of the harness run).

    OSQUEUE_BENCH_PROFILE=/tmp/prof OSQUEUE_BENCH_PROCESSES=8,32 \\
        PYTHONPATH=python .venv/bin/python -m bench.harness run --only producers-processes --latency-ms 20
    python3 bench/tools/producer_profile.py /tmp/prof

Reads the py-spy raw stacks (``<n>-<mode>.txt``) and the process's own counts (``<n>-<mode>.json``) the
``producers_processes`` row leaves with ``OSQUEUE_BENCH_PROFILE``, drops the start-up (imports), and sorts
every sample into one bucket: a store request (by the ``S3Store`` method and the osqueue caller that made
it: boto3, urllib3 and the socket under it), else the osqueue module and function the CPU was in (head
parse and encode, intents, the producer's own ``produce()``), else the leaf. Prints ms per committed
batch per bucket (samples x interval / batches of that process).
"""

from __future__ import annotations

import collections
import json
import pathlib
import re
import sys

RATE_HZ = 250  # as the row's py-spy record -r
_FRAME = re.compile(r"^(?P<fn>.*) \((?P<file>[^:()]*)(?::\d+)?\)$")
_STORE_CALLERS = ("cas_object.py", "cooperative_commit.py", "manifest_appender.py", "manifest_store.py", "producer")


def _frames(stack: str) -> list[tuple[str, str]]:
    out = []
    for f in stack.split(";"):
        m = _FRAME.match(f.strip())
        out.append((m.group("fn"), m.group("file")) if m else (f.strip(), ""))
    return out


def bucket(stack: str) -> str | None:
    """The bucket of one sample (root first), or None for start-up."""
    frames = _frames(stack)
    if any(fn == "_find_and_load" for fn, _ in frames):
        return None  # imports (start-up; a lazy import later is rare and small)
    store_at = [i for i, (_, f) in enumerate(frames) if f.endswith("s3_store.py")]
    if store_at:
        method = frames[store_at[-1]][0]
        caller = next(
            (fn for fn, f in reversed(frames[: store_at[0]]) if f.endswith(_STORE_CALLERS) or "osqueue/" in f), "?"
        )
        return f"store request: {method} <- {caller}"
    ours = [(fn, f) for fn, f in frames if "osqueue/" in f and not f.endswith(("threading.py",))]
    if ours:
        fn, f = ours[-1]
        return f"osqueue: {f.rsplit('osqueue/', 1)[1]} {fn}"
    fn, f = frames[-1]
    return f"other: {fn} ({f})"


def report(directory: pathlib.Path) -> None:
    for stacks in sorted(
        directory.glob("*.txt"), key=lambda p: tuple(int(x) if x.isdigit() else x for x in p.stem.split("-"))
    ):
        counts_file = stacks.with_suffix(".json")
        own = json.loads(counts_file.read_text()) if counts_file.exists() else {}
        batches = own.get("batches") or 0
        totals: collections.Counter[str] = collections.Counter()
        for line in stacks.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if not stack or not n.isdigit():
                continue
            b = bucket(stack)
            if b is not None:
                totals[b] += int(n)
        sampled_ms = sum(totals.values()) * 1000 / RATE_HZ
        print(
            f"## {stacks.stem}: {batches} batches, sampled CPU {sampled_ms:.0f} ms "
            f"(process_time {1000 * own.get('cpu_s', 0):.0f} ms), requests {own.get('requests', {})}"
        )
        if not batches:
            continue
        print(f"   {sampled_ms / batches:7.2f} ms/batch in all")
        for name, n in totals.most_common(25):
            print(f"   {n * 1000 / RATE_HZ / batches:7.2f} ms/batch  {100 * n / sum(totals.values()):5.1f}%  {name}")


if __name__ == "__main__":
    report(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/osqueue-producer-profile"))
