"""The cost of named subscriptions (issue 26, docs/adr/0005) on the S3 test server through the
latency proxy: ``subscriptions``.

* Read throughput: one queue pre-filled with ``batches`` batches; one subscription reads it all
  alone (rows/s), then four subscriptions read it all at the same time (each one's rows/s). Each
  reader is a native Python :class:`~osqueue.Consumer` in its own thread that acks every batch with
  ``ack_interval`` (coalesced: at most one manifest write per interval per reader).
* Producer append latency: one producer produces a batch every 10 ms (produce → durable, p50/p99)
  while 1 or 4 subscriptions tail the queue and ack every batch; with coalesced acks (1 s) and,
  to show what coalescing saves, with a manifest write per ack (``ack_through`` every batch).

Targets (issue 26): each of 4 readers ≥ 0.8× the single reader's rows/s; append p50 with 4 active
subscriptions ≤ 1.3× its value with 1. Each reader of the read rows is its own
process, and so is each tailing reader of the append rows. The machine's cores bound four CPU-busy
readers: read the load average in the row.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import threading
import time
import uuid
from typing import Any

from bench.harness.environment import Env, Settings
from bench.harness.stats import fmt, percentile, summarize
from osqueue import metrics as m

ROW_BYTES = 100
ROWS_PER_BATCH = 100


def _fill(env: Env, prefix: str, batches: int) -> None:
    from osqueue.producer import Producer

    store = env.store(prefix)
    row = b"r" * ROW_BYTES
    with Producer(store=store, flush_interval=3600) as p:
        for _ in range(batches):
            p.produce([row] * ROWS_PER_BATCH)
            p.flush(timeout=600)  # one batch object and one manifest entry per produce
    store.close()


def _read_all(env: Env, prefix: str, name: str, batches: int, ack_interval: float) -> dict[str, Any]:
    """Reads ``batches`` batches as subscription ``name`` (ack per batch): rows/s. Runs in a child process."""
    from osqueue import Consumer

    out: dict[str, Any] = {}

    store = env.store(prefix)
    reg = m.MetricsRegistry()
    try:
        with Consumer(store=store, subscription=name, run_gc=False, ack_interval=ack_interval, metrics=reg) as c:
            t0 = time.monotonic()
            rows, n = 0, 0
            while n < batches:
                b = c.next_batch()
                if b is None:
                    break
                rows += len(b.entries)
                n += 1
                c.ack(b.sequence)
            elapsed = time.monotonic() - t0
        out[name] = {
            "rows": rows,
            "batches": n,
            "rows_per_s": rows / elapsed,
            "ack_writes": reg.counter(m.ACK_WRITES, subscription=name).value,
        }
    except Exception as e:  # reported in the row, never hidden
        out[name] = {"error": repr(e)}
    finally:
        store.close()
    return out


def _read_run(env: Env, batches: int, ack_interval: float) -> dict[str, Any]:
    from osqueue.queue.subscriptions import Subscriptions

    prefix = f"subs-read-{uuid.uuid4().hex[:8]}"
    _fill(env, prefix, batches)
    store = env.store(prefix)
    subs = Subscriptions(store)
    for name in ("solo", "s1", "s2", "s3", "s4"):
        subs.create(name)
    store.close()
    # Each reader in its own process (spawned: no shared GIL), the single one too.
    with concurrent.futures.ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        solo = pool.submit(_read_all, env, prefix, "solo", batches, ack_interval).result()
        four: dict[str, Any] = {}
        for f in [pool.submit(_read_all, env, prefix, n, batches, ack_interval) for n in ("s1", "s2", "s3", "s4")]:
            four.update(f.result())
    errors = [v["error"] for v in [*solo.values(), *four.values()] if "error" in v]
    single = solo["solo"].get("rows_per_s", float("nan"))
    each = [v.get("rows_per_s", float("nan")) for v in four.values()]
    return {
        "single_rows_per_s": single,
        "four_rows_per_s_each": each,
        "min_ratio_4_vs_1": min(each) / single if each and single else float("nan"),
        "rows_each": [v.get("rows") for v in [*solo.values(), *four.values()]],
        "ack_writes_each": [v.get("ack_writes") for v in [*solo.values(), *four.values()]],
        "errors": errors,
    }


def _tail(env: Env, prefix: str, name: str, ack_interval: float, stop: Any) -> dict[str, Any]:
    """Tails the queue as subscription ``name`` until ``stop`` is set, acking every batch (``ack_interval``
    0: one manifest write per batch; else at most one per interval). Runs in a child process."""
    from osqueue import Consumer

    s = env.store(prefix)
    reg = m.MetricsRegistry()
    read, errors = 0, []
    try:
        with Consumer(store=s, subscription=name, run_gc=False, ack_interval=ack_interval, metrics=reg) as c:
            while not stop.is_set():
                ds = c.next_descriptors(100)
                if not ds:
                    time.sleep(0.01)
                    continue
                for d in ds:
                    c.fetch(d)
                    read += 1
                    c.ack_through(d.sequence)
    except Exception as e:  # reported in the row, never hidden
        errors.append(repr(e))
    finally:
        s.close()
    return {"read": read, "ack_writes": reg.counter(m.ACK_WRITES, subscription=name).value, "errors": errors}


def _append_run(env: Env, readers: int, ack_interval: float | None, duration: float) -> dict[str, Any]:
    """A producer producing a batch every 10 ms while ``readers`` subscriptions tail the queue.
    ``ack_interval`` None: every batch is acknowledged with its own manifest write (``ack_through``)."""
    from osqueue.producer import Producer
    from osqueue.queue.subscriptions import Subscriptions

    prefix = f"subs-append-{readers}-{uuid.uuid4().hex[:8]}"
    store = env.store(prefix)
    names = [f"s{i}" for i in range(readers)]
    subs = Subscriptions(store)
    for n in names:
        subs.create(n)
    errors: list[str] = []
    ctx = multiprocessing.get_context("spawn")
    manager = ctx.Manager()
    stop = manager.Event()
    # Each tailing reader in its own process, so the producer's latency is not the GIL's.
    pool = concurrent.futures.ProcessPoolExecutor(readers, mp_context=ctx)
    tails = [pool.submit(_tail, env, prefix, n, ack_interval or 0.0, stop) for n in names]
    latencies: list[float] = []
    lock = threading.Lock()
    row = b"r" * ROW_BYTES
    with Producer(store=store, flush_interval=0.005) as p:
        t_end = time.monotonic() + duration
        while time.monotonic() < t_end:
            t0 = time.monotonic()

            def done(f: Any, t0: float = t0) -> None:
                if f.exception() is None:
                    with lock:
                        latencies.append(time.monotonic() - t0)
                else:
                    errors.append(repr(f.exception()))

            p.produce([row] * 10).add_done_callback(done)
            time.sleep(0.01)
        p.flush(timeout=120)
    time.sleep(0.5)
    stop.set()
    tailed = [t.result() for t in tails]
    pool.shutdown()
    manager.shutdown()
    store.close()
    errors += [e for t in tailed for e in t["errors"]]
    lat = sorted(latencies)
    return {
        "readers": readers,
        "ack": "per batch" if ack_interval is None else f"coalesced {ack_interval:g}s",
        "appends": len(lat),
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "batches_read_each": [t["read"] for t in tailed],
        "reader_ack_writes": sum(t["ack_writes"] for t in tailed),
        "errors": errors,
    }


def bench_subscriptions(env: Env, s: Settings) -> dict[str, Any]:
    batches = 30 if s.quick else 150
    duration = 2.0 if s.quick else 10.0
    reads = [_read_run(env, batches, 1.0) for _ in range(s.repeats)]
    ratio = summarize([r["min_ratio_4_vs_1"] for r in reads])
    s.log(
        f"subscriptions: single reader {fmt(summarize([r['single_rows_per_s'] for r in reads]), ' rows/s')}, "
        f"slowest of 4 ÷ single {fmt(ratio, 'x', 2)}"
    )
    appends: dict[str, list[dict[str, Any]]] = {}
    for label, readers, interval in (
        ("1_coalesced", 1, 1.0),
        ("4_coalesced", 4, 1.0),
        ("1_per_batch", 1, None),
        ("4_per_batch", 4, None),
    ):
        appends[label] = [_append_run(env, readers, interval, duration) for _ in range(s.repeats)]
        s.log(
            f"subscriptions: append with {label.replace('_', ' readers, ')} acks: p50 "
            f"{fmt(summarize([r['p50_ms'] for r in appends[label]]), ' ms', 0)}, p99 "
            f"{fmt(summarize([r['p99_ms'] for r in appends[label]]), ' ms', 0)}"
        )

    def p50_ratio(four: str, one: str) -> dict[str, Any]:
        return summarize([a["p50_ms"] / b["p50_ms"] for a, b in zip(appends[four], appends[one])])

    return {
        "batches": batches,
        "rows_per_batch": ROWS_PER_BATCH,
        "row_bytes": ROW_BYTES,
        "append_duration_s": duration,
        "reads": reads,
        "single_rows_per_s": summarize([r["single_rows_per_s"] for r in reads]),
        "min_ratio_4_vs_1": ratio,
        "appends": appends,
        "append_p50_ratio_4_vs_1": p50_ratio("4_coalesced", "1_coalesced"),
        "append_p50_ratio_4_vs_1_per_batch_acks": p50_ratio("4_per_batch", "1_per_batch"),
        "errors": sum(len(r["errors"]) for r in reads) + sum(len(a["errors"]) for v in appends.values() for a in v),
    }
