"""Benchmarks of the JVM core's producer: ``py_vs_jvm`` (the Python producer against it, same
workload), ``raw_put`` (against raw PUTs of the same objects, bench/jvm/ProducerVsRawPut.java) and
``jvm_depth`` (append and consume costs at 100 to 1,000,000 queued batches on a segmented
manifest, bench/jvm/SegmentedDepth.java)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import time
import uuid
from typing import Any

from bench.harness.environment import MANIFEST, REPO_ROOT, Env, Settings
from bench.harness.stats import summarize
from osqueue.queue import ManifestStore

# ---------------------------------------------------------------------------------------------
# benchmark 7: Python producer vs JVM producer


def jvm_classpath() -> str | None:
    java = shutil.which("java")
    if not java:
        return None
    try:
        import pyspark

        from osqueue import jar_path

        jars = pathlib.Path(pyspark.__file__).parent / "jars"
        jar = jar_path()
    except Exception:
        return None
    if not jars.is_dir() or not os.path.isfile(jar):
        return None
    return f"{jar}:{jars}/*"


def bench_classpath(s: Settings, name: str, program: pathlib.Path) -> str | None:
    """The class path a JVM bench program runs on (OSQUEUE_BENCH_JVM_CP, e.g. the last line of
    `bash .ci/sbt "export core/Test/fullClasspath"`, else the wheel's jars), or None, logged, when
    there is none or the program's source is missing."""
    cp = os.environ.get("OSQUEUE_BENCH_JVM_CP") or jvm_classpath()
    if cp is None or not program.is_file():
        s.log(f"{name}: skipped (needs java and osqueue on the class path: OSQUEUE_BENCH_JVM_CP or the wheel's jars)")
        return None
    return cp


def _python_produce(env: Env, prefix: str, tag: str, count: int, per_call: int, flush_s: float) -> float:
    from osqueue.producer import Producer

    t0 = time.monotonic()
    with Producer(env.uri(prefix), flush_interval=flush_s, store_options=env.options()) as p:
        for start in range(0, count, per_call):
            p.produce([f"{tag}-{i}".encode() for i in range(start, min(start + per_call, count))], tag.encode())
    return time.monotonic() - t0


def _jvm_produce(env: Env, cp: str, prefix: str, tag: str, count: int, per_call: int, flush_ms: int) -> float:
    opts = [x for k, v in env.options().items() for x in ("--opt", f"{k}={v}")]
    cmd = [
        shutil.which("java") or "java",
        "-cp",
        cp,
        "osqueue.tools.QueueTool",
        "produce",
        env.uri(prefix),
        tag,
        str(count),
        "--per-call",
        str(per_call),
        "--flush-ms",
        str(flush_ms),
        *opts,
    ]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"QueueTool produce failed ({p.returncode}): {p.stderr.strip()[-1000:]}")
    return elapsed


def _count_entries(env: Env, prefix: str) -> int:
    from osqueue.format import decode_batch

    store = env.store(prefix)
    try:
        raw = store.get(MANIFEST)
        if raw is None:
            return 0
        total = 0
        for e in ManifestStore(store, MANIFEST).decode(raw.data).entries:
            obj = store.get(e.location)
            assert obj is not None
            total += len(decode_batch(obj.data, e.location))
        return total
    finally:
        store.close()


def bench_py_vs_jvm(env: Env, s: Settings) -> dict[str, Any]:
    count = 30_000 if s.quick else 200_000
    per_call, flush_ms = 1000, 100
    tag = "b" * 1000  # QueueTool's entries are "<tag>-<i>": a long tag makes them ~1 KB
    payload = sum(len(f"{tag}-{i}") for i in range(count))
    cp = jvm_classpath()
    py_times, py_base, jvm_times, jvm_base, ratios, ratios_e2e = [], [], [], [], [], []
    verified = True
    for r in range(s.repeats):
        prefix = f"pyjvm-py-{r}-{uuid.uuid4().hex[:8]}"
        py_times.append(_python_produce(env, prefix, tag, count, per_call, flush_ms / 1000))
        if r == 0:
            verified &= _count_entries(env, prefix) == count
        # The fixed cost of a run (open the store, one flush interval, one upload and commit):
        # a 1-entry run, subtracted from both sides alike.
        py_base.append(_python_produce(env, f"pyjvm-pybase-{r}-{uuid.uuid4().hex[:8]}", tag, 1, 1, flush_ms / 1000))
        if cp is None:
            continue
        jprefix = f"pyjvm-jvm-{r}-{uuid.uuid4().hex[:8]}"
        jvm_times.append(_jvm_produce(env, cp, jprefix, tag, count, per_call, flush_ms))
        if r == 0:
            verified &= _count_entries(env, jprefix) == count
        # JVM start + S3 client + one flush of one entry.
        jvm_base.append(_jvm_produce(env, cp, f"pyjvm-base-{r}-{uuid.uuid4().hex[:8]}", tag, 1, 1, flush_ms))
        py_net = max(py_times[-1] - py_base[-1], 1e-3)
        jvm_net = max(jvm_times[-1] - jvm_base[-1], 1e-3)
        ratios.append(jvm_net / py_net)
        ratios_e2e.append(jvm_times[-1] / py_times[-1])
        s.log(
            f"py_vs_jvm run {r + 1}: python {py_times[-1]:.2f} s ({py_base[-1]:.2f} s fixed), jvm {jvm_times[-1]:.2f} s "
            f"end to end ({jvm_base[-1]:.2f} s fixed incl. JVM start), ratio python/jvm MB/s {ratios[-1]:.2f}"
        )
    mb = payload / 1e6
    result: dict[str, Any] = {
        "description": f"{count} entries '<tag>-<i>' of ~{payload // count} B ({payload} B in all) in calls of {per_call}, flush every "
        f"{flush_ms} ms, no compression, one producer each; JVM = QueueTool produce in a fresh JVM; "
        "each side's fixed cost (a 1-entry run: JVM start-up, store set-up, one flush interval and commit) is "
        "subtracted from its time",
        "entries": count,
        "payload_bytes": payload,
        "python_mb_per_s": summarize([mb / max(t - b, 1e-3) for t, b in zip(py_times, py_base)]),
        "python_mb_per_s_end_to_end": summarize([mb / t for t in py_times]),
        "python_fixed_s": summarize(py_base),
        "python_entries_per_s": summarize([count / max(t - b, 1e-3) for t, b in zip(py_times, py_base)]),
        "entries_verified": verified,
    }
    if cp is None:
        result["jvm"] = "skipped: java, pyspark's jars or the connector jar not found"
        s.log("py_vs_jvm: JVM side skipped (no java / pyspark jars / connector jar)")
        return result
    result.update(
        {
            "jvm_end_to_end_s": summarize(jvm_times),
            "jvm_startup_s": summarize(jvm_base),
            "jvm_mb_per_s": summarize([mb / max(t - b, 1e-3) for t, b in zip(jvm_times, jvm_base)]),
            "jvm_mb_per_s_end_to_end": summarize([mb / t for t in jvm_times]),
            "ratio_python_to_jvm": summarize(ratios),
            "ratio_python_to_jvm_end_to_end": summarize(ratios_e2e),
            "goal": "python/jvm MB/s >= 0.5",
            "goal_met": bool(summarize(ratios)["median"] >= 0.5),
        }
    )
    return result


# ---------------------------------------------------------------------------------------------
# benchmark 1: JVM producer vs raw PUTs of the same objects through the same client

JVM_BENCH_SOURCE = REPO_ROOT / "bench" / "jvm" / "ProducerVsRawPut.java"


def bench_raw_put(env: Env, s: Settings) -> dict[str, Any]:
    cp = jvm_classpath()
    if cp is None or not JVM_BENCH_SOURCE.is_file():
        s.log("raw_put: skipped (needs java, pyspark's jars, the connector jar and bench/jvm/ProducerVsRawPut.java)")
        return {"skipped": "java, pyspark's jars, the connector jar or bench/jvm/ProducerVsRawPut.java not found"}
    entry_bytes, per_call, flush_ms = 1024, 1000, 100
    total = (8 if s.quick else 256) << 20
    warmup = (4 if s.quick else 64) << 20
    opts = [f"{k}={v}" for k, v in env.options().items()]
    cmd = [
        shutil.which("java") or "java",
        "-Xmx6g",
        "-cp",
        cp,
        str(JVM_BENCH_SOURCE),
        env.uri(f"rawput-{uuid.uuid4().hex[:8]}"),
        str(entry_bytes),
        str(total),
        str(per_call),
        str(flush_ms),
        str(s.ratio_repeats),
        str(warmup),
        *opts,
    ]
    s.log(f"raw_put: one JVM, {s.ratio_repeats} repeats of {total >> 20} MiB (+ a {warmup >> 20} MiB warm-up) ...")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = []
    assert proc.stdout is not None and proc.stderr is not None
    for line in proc.stdout:
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r["repeat"] < 0:
            continue
        r["producer_mb_per_s"] = r["payload_bytes"] / r["producer_s"] / 1e6
        r["raw_mb_per_s"] = r["raw_bytes"] / r["raw_s"] / 1e6
        r["ratio"] = r["producer_mb_per_s"] / r["raw_mb_per_s"]
        runs.append(r)
        s.log(
            f"raw_put run {r['repeat'] + 1}: producer {r['producer_mb_per_s']:.1f} MB/s ({r['batches']} batches, "
            f"{r['producer_s']:.2f} s), raw PUT {r['raw_mb_per_s']:.1f} MB/s ({r['raw_s']:.2f} s), "
            f"encode alone {r['encode_s']:.2f} s, ratio {r['ratio']:.2f}"
        )
    err = proc.stderr.read()
    rc = proc.wait()
    if rc != 0 or not runs:
        raise RuntimeError(f"ProducerVsRawPut.java exited {rc}: {err.strip()[-2000:]}")
    verified = all(r["entries_decoded"] == r["entries"] and r["manifest_entries"] == r["batches"] for r in runs)
    ratio = summarize([r["ratio"] for r in runs])
    return {
        "description": f"one warm JVM (bench/jvm/ProducerVsRawPut.java, after a {warmup >> 20} MiB warm-up): a Producer "
        f"(flush {flush_ms} ms, flushSizeBytes 64 MiB default) gets {total >> 20} MiB of {entry_bytes}-byte entries in "
        f"calls of {per_call}, timed from the first produce() to every handle durable; then the batch files' exact "
        "sizes are PUT again as plain objects one after the other from one thread through the same S3Store "
        "(AWS SDK v2); order alternates per repeat",
        "entry_bytes": entry_bytes,
        "payload_bytes": runs[0]["payload_bytes"],
        "batches": summarize([r["batches"] for r in runs]),
        "producer_mb_per_s": summarize([r["producer_mb_per_s"] for r in runs]),
        "raw_put_mb_per_s": summarize([r["raw_mb_per_s"] for r in runs]),
        "producer_s": summarize([r["producer_s"] for r in runs]),
        "raw_put_s": summarize([r["raw_s"] for r in runs]),
        "encode_s": summarize([r["encode_s"] for r in runs]),
        "ratio_producer_to_raw_put": ratio,
        "entries_verified": verified,
        "raw_runs": runs,
        "goal": "producer MB/s / raw PUT MB/s >= 0.9",
        "goal_met": bool(ratio["median"] >= 0.9),
    }


# ---------------------------------------------------------------------------------------------
# issue 15: cost vs queue depth with a segmented manifest (JVM core)

DEPTH_BENCH_SOURCE = REPO_ROOT / "bench" / "jvm" / "SegmentedDepth.java"


def bench_jvm_depth(env: Env, s: Settings) -> dict[str, Any]:
    cp = bench_classpath(s, "jvm_depth", DEPTH_BENCH_SOURCE)
    if cp is None:
        return {"skipped": "java or the core's class path not found"}
    k, heap_mb = 2048, 512
    appends, deliveries = (10, 2000) if s.quick else (50, 20000)
    depths = [100, 10_000] if s.quick else [100, 100_000, 1_000_000]
    opts = [f"{key}={v}" for key, v in env.options().items()]
    cmd = [
        shutil.which("java") or "java",
        f"-Xmx{heap_mb}m",
        "-cp",
        cp,
        str(DEPTH_BENCH_SOURCE),
        env.uri(f"jvmdepth-{uuid.uuid4().hex[:8]}"),
        str(k),
        str(appends),
        str(deliveries),
        *map(str, depths),
        *opts,
    ]
    s.log(
        f"jvm_depth: K = {k}, depths {depths}, {appends} appends and {deliveries} deliveries each, -Xmx{heap_mb}m ..."
    )
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or len(rows) != len(depths):
        raise RuntimeError(f"SegmentedDepth.java exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    for r in rows:
        s.log(
            f"jvm_depth {r['depth']:>9}: {r['segments']} segments ({r['refs']} refs in the head, {r['levels']} levels), "
            f"tail {r['tail']}, head {r['head_bytes']} B; append "
            f"{r['append_latency_ms_median']:.1f} ms median ({r['bytes_written_per_append_mean']} B written); "
            f"consumer {r['consumer_us_per_delivered']:.1f} us/descriptor, {r['consumer_heap_held_mb']:.1f} MB held"
        )
    ratio = rows[-1]["append_latency_ms_median"] / rows[0]["append_latency_ms_median"]
    return {
        "description": f"bench/jvm/SegmentedDepth.java, one JVM (-Xmx{heap_mb}m), K = {k}: a queue of each depth built "
        "through the producers' sealing and folding edit (tail left at K/2), then single-entry appends through ManifestAppender "
        "round-robin over the depths (after 10 unmeasured each), and a Consumer handing out descriptors one at a "
        "time (no batch GETs; acks every 1,000); a seal adds seal_bytes_per_append_amortized",
        "k": k,
        "rows": rows,
        "append_latency_ratio_deepest_to_100": {"median": ratio, "min": ratio, "max": ratio, "n": 1},
        "goal": "append latency at the deepest ÷ at 100 queued <= 1.5",
        "goal_met": bool(ratio <= 1.5),
    }
