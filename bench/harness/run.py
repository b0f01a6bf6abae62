"""Runs the selected benchmarks and writes ``bench-<UTC time>[-quick].json``, ``.md`` and the plots."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.harness.client_benchmarks import bench_contention, bench_depth, bench_requests
from bench.harness.deep_v1 import bench_deep_v1
from bench.harness.delta import DELTA_SESSION_CONF, bench_delta, delta_jars, hadoop_aws_jars
from bench.harness.depth_benchmarks import bench_py_depth
from bench.harness.environment import Settings, environment, loadavg, machine_facts
from bench.harness.jvm_benchmarks import bench_jvm_depth, bench_py_vs_jvm, bench_raw_put
from bench.harness.kafka import bench_kafka, kafka_jars
from bench.harness.producer_processes import bench_producers_processes
from bench.harness.python_source_bench import bench_python_source
from bench.harness.report import markdown_report, write_plots
from bench.harness.spark_benchmarks import SparkHolder, bench_latency, bench_spark_file
from bench.harness.spark_depth import bench_spark_depth, bench_spark_depth_s3
from bench.harness.spool_benchmarks import bench_jvm_spool, bench_spool, bench_verify_read
from bench.harness.subscription_benchmarks import bench_subscriptions

FUNCTIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "contention": bench_contention,
    "depth": bench_depth,
    "py_depth": bench_py_depth,
    "deep_v1": bench_deep_v1,
    "jvm_depth": bench_jvm_depth,
    "spark_depth": bench_spark_depth,
    "spark_depth_s3": bench_spark_depth_s3,
    "py_vs_jvm": bench_py_vs_jvm,
    "requests": bench_requests,
    "raw_put": bench_raw_put,
    "spark_file": bench_spark_file,
    "kafka": bench_kafka,
    "latency": bench_latency,
    "producers_processes": bench_producers_processes,
    "python_source": bench_python_source,
    "spool": bench_spool,
    "jvm_spool": bench_jvm_spool,
    "verify_read": bench_verify_read,
    "delta": bench_delta,
    "subscriptions": bench_subscriptions,
}
"""Every benchmark by name, in the order a full run takes them."""
BENCHMARKS = tuple(FUNCTIONS)
SPARK_BENCHMARKS = ("spark_file", "kafka", "latency", "python_source", "delta")
QUICK_SKIPS = (
    "kafka",
    "delta",
    "py_depth",
    "deep_v1",
    "jvm_depth",
    "spark_depth",
    "spark_depth_s3",
    "producers_processes",
    "python_source",
    "spool",
    "jvm_spool",
    "verify_read",
    "subscriptions",
)
"""Not run by ``--quick`` unless named with ``--only`` (fetching jars and starting a broker, or building
a 1M-entry queue, is not fast)."""


def normalize_names(only: Sequence[str]) -> list[str]:
    """``--only`` values: names or comma-separated lists of names; '-' and '_' are the same."""
    names = [n.strip().replace("-", "_") for item in only for n in item.split(",") if n.strip()]
    for n in names:
        if n not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {n!r}: choose from {', '.join(BENCHMARKS)}")
    return names


def run_benchmarks(
    *,
    quick: bool,
    only: Sequence[str] = (),
    latency_ms: float = 20.0,
    out: str = "bench/results",
    endpoint: str | None = None,
    command: str = "python -m bench.harness run",
    log: Callable[[str], None] = print,
    spark_mb: int = 0,
    record_bytes: int = 1024,
    eager_flush: bool = False,
    latency_modes: Sequence[str] = (),
    latency_runs: int = 0,
    plots: bool = True,
) -> tuple[dict[str, Any], pathlib.Path]:
    """Runs the selected benchmarks and writes ``bench-<time>[-quick].json`` and ``.md`` (and PNG
    plots when matplotlib is installed) to ``out``.

    Returns:
        The results and the JSON file's path.
    """
    names = normalize_names(only) or [n for n in BENCHMARKS if not (quick and n in QUICK_SKIPS)]
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    settings = Settings(quick, latency_ms, log, spark_mb=spark_mb, record_bytes=record_bytes, eager_flush=eager_flush)
    settings.latency_modes = tuple(latency_modes)
    settings.latency_runs = latency_runs
    result: dict[str, Any] = {
        "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": quick,
        "command": command,
        "repeats": settings.repeats,
        "machine": machine_facts(),
        "benchmarks": {},
    }
    # Spark's Kafka connector jars must be on the session's class path from the start.
    if "kafka" in names:
        try:
            settings.kafka = kafka_jars(log)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            settings.kafka_error = f"could not fetch the Kafka jars with Maven: {e}"
    # So must Delta's (delta-spark for the pinned pyspark's line).
    if "delta" in names:
        try:
            settings.delta = delta_jars(log) + hadoop_aws_jars(log)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            settings.delta_error = f"could not fetch the delta-spark and hadoop-aws jars with Maven: {e}"
    if any(n in SPARK_BENCHMARKS for n in names):
        extra = [*(settings.kafka[1] if settings.kafka else ()), *(settings.delta or ())]
        conf = DELTA_SESSION_CONF if settings.delta else {}
        settings.spark = SparkHolder(settings, extra, conf)
    with contextlib.ExitStack() as stack:
        if settings.spark is not None:
            stack.callback(settings.spark.close)
        env = stack.enter_context(environment(latency_ms, endpoint, log))
        result["s3"] = {"kind": env.server_kind, "latency_ms": latency_ms}
        for name in names:
            log(f"== {name}")
            b0 = time.monotonic()
            load0 = loadavg()
            result["benchmarks"][name] = FUNCTIONS[name](env, settings)
            result["benchmarks"][name]["elapsed_s"] = round(time.monotonic() - b0, 1)
            result["benchmarks"][name]["loadavg_before_after"] = [load0, loadavg()]
    result["elapsed_s"] = time.monotonic() - t0
    with contextlib.suppress(OSError):
        result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out_dir = pathlib.Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{started.strftime('%Y%m%dT%H%M%SZ')}" + ("-quick" if quick else "")
    json_path = out_dir / f"{stem}.json"
    if plots:
        try:
            result["plots"] = write_plots(result, out_dir, stem)
        except ImportError as e:
            result["plots"] = []
            result["plots_skipped"] = f"matplotlib not installed ({e}); pip install '.[bench]'"
            log("plots skipped: matplotlib is not installed (pip install '.[bench]')")
    json_path.write_text(json.dumps(result, indent=1, default=_json_default) + "\n")
    (out_dir / f"{stem}.md").write_text(markdown_report(result) + "\n")
    return result, json_path


def _json_default(o: object) -> object:
    return str(o)
