"""Where a spooled producer's caller time goes (supplementary; not part of `python -m bench.harness run`).

    PYTHONPATH=python .venv/bin/python bench/tools/spool_profile.py [CALLS, default 2000] [off|local|queue] [--profile]

The `spool` row's caller loop (CALLS `produce()` calls of 16 × 1 KiB, `flush_interval=0.05`) on the
local store in a temporary directory, so the store's own fsyncs are in the counts too: no spool
(`off`), a spool with `durability="local"` (each call fsync'd before it returns) or with
`durability="queue"` (the streaming path). Prints the caller's time per call, the time `close()`
still waits, the caller thread's CPU time a call (`time.thread_time`), the log writes (`os.pwrite`,
count and threads) and every `os.fdatasync` / `os.fsync` of the process (count, time, threads:
wrapped to count them). `--profile`: cProfile of the caller's thread, the 15 costliest functions.
"""

from __future__ import annotations

import cProfile
import importlib.util
import os
import pathlib
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable

if importlib.util.find_spec("osqueue") is None:  # PYTHONPATH may name another checkout's (a before/after)
    sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[2] / "python")]

from osqueue.producer import Producer  # noqa: E402 (after the sys.path setup)
from osqueue.store.local_file_system_store import LocalFileSystemStore  # noqa: E402

SYNCS: dict[str, list[float]] = {"fdatasync": [], "fsync": [], "pwrite": []}
THREADS: dict[str, set[str]] = {"fdatasync": set(), "fsync": set(), "pwrite": set()}
_lock = threading.Lock()


def _counted(name: str, call: Callable[..., int | None]) -> Callable[..., int | None]:
    def wrapper(*args: object) -> int | None:
        t0 = time.perf_counter()
        out = call(*args)
        took = time.perf_counter() - t0
        with _lock:
            SYNCS[name].append(took)
            THREADS[name].add(threading.current_thread().name)
        return out

    return wrapper


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    calls = int(args[0]) if args else 2000
    mode = args[1] if len(args) > 1 else "local"
    profile = "--profile" in sys.argv
    os.fdatasync = _counted("fdatasync", os.fdatasync)  # type: ignore[assignment]
    os.fsync = _counted("fsync", os.fsync)  # type: ignore[assignment]
    os.pwrite = _counted("pwrite", os.pwrite)  # type: ignore[assignment]
    record = b"s" * 1024
    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="osq-spool-profile-") as d:
        store = LocalFileSystemStore(os.path.join(d, "queue"))
        kwargs = {} if mode == "off" else {"spool_dir": os.path.join(d, "spool"), "durability": mode}
        t0 = time.perf_counter()
        with Producer(store=store, flush_interval=0.05, **kwargs) as p:  # type: ignore[arg-type]
            if profile:
                prof.enable()
            cpu0, proc0 = time.thread_time(), time.process_time()
            for _ in range(calls):
                p.produce([record] * 16)
            cpu = time.thread_time() - cpu0
            if profile:
                prof.disable()
            t1 = time.perf_counter()
        t2 = time.perf_counter()
        proc = time.process_time() - proc0
    print(
        f"{mode}: calls {t1 - t0:.3f} s ({1000 * (t1 - t0) / calls:.3f} ms a call, caller CPU "
        f"{1e6 * cpu / calls:.1f} us a call; process CPU to close()'s end {1e6 * proc / calls:.1f} us a call), "
        f"close() {t2 - t1:.3f} s"
    )
    for name, times in SYNCS.items():
        each = 1000 * sum(times) / max(1, len(times))
        print(
            f"  {name}: {len(times)} ({len(times) / calls:.2f} a call), {1000 * sum(times):.0f} ms, {each:.3f} ms each; "
            f"threads {sorted(THREADS[name])}"
        )
    if profile:
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
