"""``producers_processes``: N producer OS processes on one queue (1, 8, 32), ``solo`` vs ``cooperative``
commit (docs/adr/0007 part 1) vs the same processes doing plain PUTs of batch-sized objects at the same
cadence (no manifest), and ``floor``: those PUTs plus only the requests any manifest protocol adds (a head
read to learn a batch landed, a committer's LIST and head PUT; ``_Floor``), what the machine allows at best. Each process produces one 100-byte entry every 10 ms with ``flush_interval``
0.1 s for a fixed time; figures: batches/s, the ratio to plain PUTs, p50/p99 produce -> durable, CAS
attempts per landed write, batches per CAS, duplicates (target 0) and missing.

    python -m bench.harness run --only producers-processes --latency-ms 20

``OSQUEUE_BENCH_PROFILE=DIR`` samples the first process of each run with py-spy (from PyPI; ``py-spy`` on
``PATH`` or ``OSQUEUE_BENCH_PYSPY``) into ``DIR/<n>-<mode>.txt`` (raw collapsed stacks, every thread);
``bench/tools/producer_profile.py DIR`` says where its CPU went per committed batch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from typing import Any

from bench.harness.environment import MANIFEST, Env, Settings, loadavg
from bench.harness.stats import percentile

ENTRY = b"x" * 100
CADENCE_S = 0.01
FLUSH_S = 0.1


def _child(spec: dict[str, Any]) -> None:
    """One process: waits for "go" on stdin, then produces (or PUTs) for ``duration`` seconds."""
    from osqueue import Producer
    from osqueue import metrics as m
    from osqueue.metrics import MetricsRegistry
    from osqueue.store import S3Store

    reg = MetricsRegistry()
    lat: list[float] = []
    mode, duration = spec["mode"], spec["duration"]
    store = S3Store(spec["bucket"], spec["prefix"], spec["options"])
    requests = _count_requests(store)
    producer = None
    if mode not in ("raw", "floor"):
        producer = Producer(store=store, flush_interval=FLUSH_S, commit_mode=mode, metrics=reg)
    floor = _Floor(store, spec["bucket"], spec["prefix"], spec["committer"], lat) if mode == "floor" else None
    print("ready", flush=True)
    sys.stdin.readline()
    requests.clear()
    cpu0 = time.process_time()
    start = time.monotonic()
    calls = puts = 0
    handles: list[Any] = []
    next_at = start
    while time.monotonic() - start < duration:
        if producer is not None:
            t0 = time.monotonic()
            h = producer.produce([ENTRY], b"bench")
            h.add_done_callback(lambda f, t0=t0: lat.append(time.monotonic() - t0) if f.exception() is None else None)
            handles.append(h)
            calls += 1
            next_at += CADENCE_S
        else:  # the same bytes per flush interval, one plain PUT each
            t0 = time.monotonic()
            name = uuid.uuid4().hex if floor is None else f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex}"
            store.put(f"raw/{name}.batch", ENTRY * int(FLUSH_S / CADENCE_S))
            if floor is None:
                lat.append(time.monotonic() - t0)
            else:
                floor.uploaded(t0)
            puts += 1
            next_at += FLUSH_S
        if floor is not None and floor.failure is not None:
            break
        time.sleep(max(0.0, next_at - time.monotonic()))
    failure = None
    if floor is not None:
        floor.stop()
        failure = floor.failure
    if producer is not None:
        try:
            producer.close()
        except Exception as e:  # e.g. ConflictRetriesExhausted: reported in the row, not a crash
            failure = f"{type(e).__name__}: {e}"
    elapsed = time.monotonic() - start
    cpu_s = time.process_time() - cpu0
    errors = sum(1 for h in handles if h.done() and h.exception() is not None)
    print(
        json.dumps(
            {
                "elapsed_s": elapsed,
                "batches": reg.counter(m.BATCHES_FLUSHED).value if producer is not None else puts,
                "calls": calls,
                "errors": errors,
                "failure": failure,
                "latencies": lat,
                "writes": reg.counter(m.MANIFEST_WRITES, role="producer").value,
                "conflicts": reg.counter(m.MANIFEST_CONFLICTS, role="producer").value,
                "announced": reg.counter(m.INTENTS_ANNOUNCED).value,
                "for_others": reg.counter(m.INTENTS_APPENDED_FOR_OTHERS).value,
                "cpu_s": cpu_s,
                "requests": dict(requests),
            }
        ),
        flush=True,
    )


def _floor_settings() -> tuple[float, float, int]:
    """The floor mode's committer round (s), confirming-read interval (s) and head size (bytes):
    OSQUEUE_BENCH_FLOOR="0.2,0.4,8192" (the defaults)."""
    raw = os.environ.get("OSQUEUE_BENCH_FLOOR", "0.2,0.4,8192")
    try:
        round_s, confirm_s, head_bytes = raw.split(",")
        settings = (float(round_s), float(confirm_s), int(head_bytes))
    except ValueError:
        settings = (0.0, 0.0, 0)
    if min(settings) <= 0:
        raise ValueError(f"OSQUEUE_BENCH_FLOOR={raw!r}: expected 'round seconds,confirm seconds,head bytes' > 0")
    return settings


FLOOR_ROUND_S, FLOOR_CONFIRM_S, FLOOR_HEAD_BYTES = _floor_settings()


class _Floor:
    """The ``floor`` mode: the requests any manifest protocol needs beside the batch PUTs, with no
    protocol logic. Every process reads the head every ``FLOOR_CONFIRM_S`` (the read that tells it its
    batches landed); one process (the committer) LISTs the new batches and PUTs the head every
    ``FLOOR_ROUND_S``. A batch counts durable at the first head read that shows a round whose LIST
    started after its PUT ended; its latency runs from the PUT's start (the linger not counted), so the
    row's p99 is what such a protocol would reach at the best."""

    def __init__(self, store: Any, bucket: str, prefix: str, committer: bool, lat: list[float]) -> None:
        import threading

        self.store, self.bucket, self.prefix, self.lat, self.failure = store, bucket, prefix.strip("/"), lat, None
        self.pending: list[tuple[float, float]] = []  # (PUT start, PUT end), monotonic
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._confirm, daemon=True)]
        if committer:
            self.threads.append(threading.Thread(target=self._commit, daemon=True))
        for t in self.threads:
            t.start()

    def uploaded(self, t0: float) -> None:
        with self.lock:
            self.pending.append((t0, time.monotonic()))

    def _guard(self, loop: Any) -> None:
        try:
            loop()
        except Exception as e:  # reported in the row
            self.failure = f"{type(e).__name__}: {e}"

    def _commit(self) -> None:
        client, bucket, prefix = self.store.client, self.bucket, self.prefix

        def loop() -> None:
            offset = time.time() - time.monotonic()  # the head carries the round's LIST start, in wall time
            while not self.done.wait(FLOOR_ROUND_S):
                listed_at = time.monotonic()
                # Only the batches of the last few seconds, as a protocol bounding its LIST by freshness would.
                since = f"{int((listed_at + offset - 2.0) * 1000):013d}"
                raw = f"{prefix}/raw/" if prefix else "raw/"
                client.list_objects_v2(Bucket=bucket, Prefix=raw, StartAfter=raw + since)
                body = f"{listed_at + offset:.6f}".encode().ljust(FLOOR_HEAD_BYTES, b" ")
                self.store.put("floor.head", body)

        self._guard(loop)

    def _confirm(self) -> None:
        def loop() -> None:
            offset = time.time() - time.monotonic()
            while not self.done.wait(FLOOR_CONFIRM_S):
                got = self.store.get("floor.head")
                if got is None:
                    continue
                listed_at = float(got.data[:32].decode().strip()) - offset
                now = time.monotonic()
                with self.lock:
                    landed = [p for p in self.pending if p[1] <= listed_at]
                    self.pending = [p for p in self.pending if p[1] > listed_at]
                self.lat.extend(now - t0 for t0, _ in landed)

        self._guard(loop)

    def stop(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join(5)


def _count_requests(store: Any) -> dict[str, int]:
    """Counts the store's requests by kind (the profile of where a committed batch's requests go)."""
    counts: dict[str, int] = {}

    def kind(key: str) -> str:
        if key.endswith(".intent"):
            return "intent"
        if key.endswith(MANIFEST):
            return "head"
        return "batch" if key.endswith(".batch") else "other"

    def wrap(name: str, label: Any) -> None:
        inner = getattr(store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            k = f"{name} {label(*args)}"
            counts[k] = counts.get(k, 0) + 1
            return inner(*args, **kwargs)

        setattr(store, name, counted)

    for name in ("get", "put", "put_if_absent", "put_if_version_matches", "delete"):
        wrap(name, lambda key, *_: kind(key))
    wrap("list", lambda prefix: "")

    def sent(model: Any = None, **_: Any) -> None:  # every S3 call the client makes (the HEAD after a 412 too)
        k = f"s3 {getattr(model, 'name', '?')}"
        counts[k] = counts.get(k, 0) + 1

    store.client.meta.events.register("before-call.s3", sent)
    return counts


def _run(env: Env, n: int, mode: str, duration: float) -> dict[str, Any]:
    prefix = f"procs-{mode}-{n}-{uuid.uuid4().hex[:8]}"
    spec = {"mode": mode, "duration": duration, "bucket": env.bucket, "prefix": prefix, "options": env.options()}

    def cmd(i: int) -> list[str]:
        return [sys.executable, "-m", "bench.harness.producer_processes", json.dumps({**spec, "committer": i == 0})]

    procs = [
        subprocess.Popen(cmd(i), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(n)
    ]
    profile_dir = os.environ.get("OSQUEUE_BENCH_PROFILE")
    spy = None
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"producer process failed: {p.stderr.read()[-2000:] if p.stderr else ''}")
        # The first process, sampled by py-spy from "go" to its exit (the thread holding the GIL: Python CPU).
        if profile_dir:
            pyspy = os.environ.get("OSQUEUE_BENCH_PYSPY") or shutil.which("py-spy") or "py-spy"
            os.makedirs(profile_dir, exist_ok=True)
            out = os.path.join(profile_dir, f"{n}-{mode}.txt")
            spy = subprocess.Popen(
                [pyspy, "record", "-r", "250", "--gil", "--format", "raw", "-o", out, "--pid", str(procs[0].pid)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.5)  # py-spy attaches
        cpu0 = os.times()
        for p in procs:  # all at once
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=duration + 300)
            if p.returncode != 0:
                raise RuntimeError(f"producer process exited {p.returncode}: {err[-2000:]}")
            outs.append(json.loads(out.strip().splitlines()[-1]))
        if spy is not None:
            spy.wait(60)
        if profile_dir:
            with open(os.path.join(profile_dir, f"{n}-{mode}.json"), "w") as f:
                json.dump({k: v for k, v in outs[0].items() if k != "latencies"}, f)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    cpu1 = os.times()
    elapsed = max(o["elapsed_s"] for o in outs)
    lat = sorted(x for o in outs for x in o["latencies"])
    batches = sum(o["batches"] for o in outs)
    writes = sum(o["writes"] for o in outs)
    conflicts = sum(o["conflicts"] for o in outs)
    row: dict[str, Any] = {
        "processes": n,
        "mode": mode,
        "elapsed_s": round(elapsed, 2),
        "batches": batches,
        "batches_per_s": batches / elapsed,
        "p50_ms": percentile(lat, 50) * 1000 if lat else None,
        "p99_ms": percentile(lat, 99) * 1000 if lat else None,
        "errors": sum(o["errors"] for o in outs),
        "failures": sorted({o["failure"][:160] for o in outs if o.get("failure")}),
        "client_cpu_ms_per_batch": 1000 * sum(o["cpu_s"] for o in outs) / batches if batches else None,
        "requests_per_batch": {
            k: round(sum(o["requests"].get(k, 0) for o in outs) / batches, 2)
            for k in sorted({k for o in outs for k in o["requests"]})
        }
        if batches
        else {},
        "children_cpu_s": round(
            (cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system), 2
        ),
    }
    if mode not in ("raw", "floor"):
        store = env.store(prefix)
        from osqueue.queue import ManifestStore

        raw = store.get(MANIFEST)
        entries = ManifestStore(store, MANIFEST).decode(raw.data).entries if raw is not None else []
        locations = [e.location for e in entries]
        store.close()
        row.update(
            {
                "manifest_writes": writes,
                "cas_attempts_per_write": (writes + conflicts) / writes if writes else None,
                "batches_per_cas": batches / writes if writes else None,
                "intents_announced": sum(o["announced"] for o in outs),
                "intents_appended_for_others": sum(o["for_others"] for o in outs),
                "duplicates": len(locations) - len(set(locations)),
                "missing": int(batches) - len(set(locations)),
            }
        )
    return row


def bench_producers_processes(env: Env, s: Settings) -> dict[str, Any]:
    duration = 2.0 if s.quick else 8.0
    counts = [1, 4] if s.quick else [1, 8, 32]
    if os.environ.get("OSQUEUE_BENCH_PROCESSES"):  # e.g. "8,32": only these counts
        counts = [int(x) for x in os.environ["OSQUEUE_BENCH_PROCESSES"].split(",")]
    rows = []
    for n in counts:
        load = loadavg()
        modes = os.environ.get("OSQUEUE_BENCH_MODES", "raw,floor,solo,cooperative").split(",")  # raw always runs
        by_mode = {mode: _run(env, n, mode, duration) for mode in dict.fromkeys(["raw", *modes])}
        raw_rate = by_mode["raw"]["batches_per_s"]
        if "floor" in by_mode:
            r = by_mode["floor"]
            r["ratio_to_raw_put"] = r["batches_per_s"] / raw_rate if raw_rate else None
            s.log(
                f"producers_processes[floor] {n} process(es): {r['batches_per_s']:.1f} PUTs/s "
                f"({r['ratio_to_raw_put'] or 0:.2f}x plain PUTs {raw_rate:.1f}/s), p50 {r['p50_ms'] or 0:.0f} ms, "
                f"p99 {r['p99_ms'] or 0:.0f} ms"
                + (f", failures {r['failures']}" if r["failures"] else "")
                + f", client CPU {r['client_cpu_ms_per_batch'] or 0:.1f} ms/batch, requests/batch {r['requests_per_batch']}"
            )
        for mode in [m for m in ("solo", "cooperative") if m in by_mode]:
            r = by_mode[mode]
            r["ratio_to_raw_put"] = r["batches_per_s"] / raw_rate if raw_rate else None
            s.log(
                f"producers_processes[{mode}] {n} process(es): {r['batches_per_s']:.1f} batches/s "
                f"({r['ratio_to_raw_put'] or 0:.2f}x plain PUTs {raw_rate:.1f}/s), p50 {r['p50_ms'] or 0:.0f} ms, "
                f"p99 {r['p99_ms'] or 0:.0f} ms, CAS attempts/write {r['cas_attempts_per_write'] or 0:.2f}, "
                f"batches/CAS {r['batches_per_cas'] or 0:.2f}, duplicates {r['duplicates']}, missing {r['missing']}"
                + (f", failures {r['failures']}" if r["failures"] else "")
                + f", client CPU {r['client_cpu_ms_per_batch'] or 0:.1f} ms/batch, requests/batch {r['requests_per_batch']}"
            )
        rows.append({"processes": n, "loadavg_before": load, **{m: by_mode[m] for m in by_mode}})
    top = rows[-1]
    coop = top.get("cooperative")  # absent when OSQUEUE_BENCH_MODES runs solo only (goal then not met)
    return {
        "description": "N producer OS processes (one 100 B entry every 10 ms each, flush_interval 0.1 s) on one "
        "queue: solo vs cooperative commit vs the same processes doing one plain PUT of the same bytes per 0.1 s",
        "duration_s": duration,
        "rows": rows,
        "goal": "cooperative at the largest N: >= 0.8x plain-PUT batches/s, p99 <= 1 s, 0 duplicates",
        "goal_met": bool(
            coop is not None
            and coop["ratio_to_raw_put"] is not None
            and coop["ratio_to_raw_put"] >= 0.8
            and (coop["p99_ms"] or 1e9) <= 1000
            and coop["duplicates"] == 0
        ),
    }


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
