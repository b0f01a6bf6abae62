"""The benchmark harness (bench/harness, a development tool run from the checkout):
`python -m bench.harness run --quick` reports every benchmark's figures with spreads (no speed
goals), and the installed package holds none of it."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import pathlib
import re
import sys

import pytest
from click.testing import CliRunner

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the harness is imported from the checkout, as `python -m bench.harness` does
    sys.path.insert(0, str(ROOT))

from bench.harness.__main__ import main as harness  # noqa: E402
from bench.harness.client_benchmarks import CountingStore  # noqa: E402
from bench.harness.report import replot  # noqa: E402
from bench.harness.run import BENCHMARKS, QUICK_SKIPS, normalize_names  # noqa: E402
from bench.harness.spark_benchmarks import FILE_SOURCE_MODE, LATENCY_TWEAKS, _mode_parts  # noqa: E402
from bench.harness.stats import summarize  # noqa: E402

from osqueue.cli import cli  # noqa: E402
from osqueue.store import InMemoryStore  # noqa: E402

SPREAD_KEYS = ("median", "min", "max", "p25", "p75", "n")


def _is_stat(value: object) -> bool:
    if not isinstance(value, dict) or any(k not in value for k in SPREAD_KEYS):
        return False
    if value["n"] < 1 or any(not isinstance(value[k], (int, float)) or math.isnan(value[k]) for k in SPREAD_KEYS):
        return False
    return value["min"] <= value["p25"] <= value["median"] <= value["p75"] <= value["max"]


def test_summarize_gives_median_and_spread() -> None:
    s = summarize([5, 1, 3, 2, 4])
    assert (s["median"], s["min"], s["max"], s["p25"], s["p75"], s["n"]) == (3, 1, 5, 2, 4, 5)
    assert summarize([])["n"] == 0


def test_counting_store_counts_each_kind() -> None:
    store = CountingStore(InMemoryStore())
    store.put("a/x", b"1")
    store.put_if_absent("a/y", b"2")
    assert store.get("a/x") is not None
    store.list("a/")
    store.delete("a/x")
    assert store.snapshot() == {"PUT": 2, "GET": 1, "LIST": 1, "DELETE": 1}


def test_only_takes_comma_separated_names_with_either_separator() -> None:
    assert normalize_names(["spark-file,latency", "raw_put"]) == ["spark_file", "latency", "raw_put"]
    assert normalize_names([]) == []
    with pytest.raises(ValueError, match="unknown benchmark 'nope'"):
        normalize_names(["depth,nope"])


def test_a_latency_mode_carries_named_settings() -> None:
    # `--latency-modes micro-batch-jvm,micro-batch-jvm+ckpt-shm` runs a pair in one session, alternating.
    assert _mode_parts("real-time-jvm") == ("real-time-jvm", [])
    assert _mode_parts(FILE_SOURCE_MODE) == ("micro-batch-filesource-jvm", [])
    assert _mode_parts("micro-batch-jvm+async-override+ckpt-shm") == ("micro-batch-jvm", ["async-override", "ckpt-shm"])
    assert LATENCY_TWEAKS["poll25"] == {"source": {"pollInterval": "25ms"}}
    with pytest.raises(ValueError, match="unknown settings"):
        _mode_parts("micro-batch+nope")


def test_every_benchmark_the_harness_runs_can_be_named() -> None:
    # The names come from the table of functions: a row can no longer be runnable but unnamed.
    assert normalize_names(["spool,verify_read", "subscriptions"]) == ["spool", "verify_read", "subscriptions"]
    assert set(QUICK_SKIPS) <= set(BENCHMARKS)


def test_harness_rejects_an_unknown_benchmark(tmp_path) -> None:
    result = CliRunner().invoke(harness, ["run", "--only", "nope", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "unknown benchmark 'nope'" in result.output


def test_bench_is_not_a_user_command() -> None:
    result = CliRunner().invoke(cli, ["bench", "--quick"])
    assert result.exit_code != 0 and "No such command 'bench'" in result.output


def test_the_package_imports_neither_the_harness_nor_the_tests() -> None:
    imports = []
    for module in sorted((ROOT / "python" / "osqueue").rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            where = str(module.relative_to(ROOT))
            if isinstance(node, ast.Import):
                imports += [(where, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imports += [(where, f"{node.module}.{alias.name}") for alias in node.names]
    assert ("python/osqueue/cli/app.py", "click") in imports, "the scan is broken"
    bad = [
        (m, name) for m, name in imports if name.split(".")[0] in ("bench", "tests") or name.startswith("osqueue.bench")
    ]
    assert bad == []


def test_the_docs_name_harness_commands_and_modules_that_exist() -> None:
    docs = "".join((ROOT / p).read_text() for p in ("README.md", "bench/README.md", "docs/performance.md"))
    commands = set(re.findall(r"bench\.harness (\w+)", docs))
    modules = set(re.findall(r"bench\.harness\.(\w+)", docs))
    assert commands == {"run", "plots"}, commands
    assert modules, "no bench.harness.<module> found: the pattern is broken"
    assert commands <= set(harness.commands)
    assert all(importlib.util.find_spec(f"bench.harness.{m}") for m in modules), modules


def test_the_committed_results_replot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    committed = ROOT / "bench" / "results" / "bench-20261121T145240Z.json"
    copy = tmp_path / committed.name
    copy.write_bytes(committed.read_bytes())
    written = replot(str(copy))
    assert written == [f"{copy.stem}-{n}.png" for n in ("contention", "depth", "latency", "ratios", "spark-sources")]
    for name in written:
        assert (tmp_path / name).stat().st_size > 1000


def test_the_producer_processes_floor_row_confirms_batches_by_head_reads(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OSQUEUE_BENCH_PROCESSES", "2")
    monkeypatch.setenv("OSQUEUE_BENCH_MODES", "floor")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "python"), str(ROOT)]))  # the processes' imports
    out = tmp_path / "results"
    result = CliRunner().invoke(
        harness, ["run", "--quick", "--only", "producers-processes", "--out", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    [json_file] = list(out.glob("bench-*-quick.json"))
    [row] = json.loads(json_file.read_text())["benchmarks"]["producers_processes"]["rows"]
    assert set(row) >= {"raw", "floor"}
    floor = row["floor"]
    assert floor["failures"] == [] and floor["batches"] > 0 and floor["ratio_to_raw_put"] > 0
    # Confirmed only by a head read after a committer round: never as soon as the PUT returns.
    assert floor["p50_ms"] > row["raw"]["p50_ms"]
    requests = floor["requests_per_batch"]
    assert requests["s3 GetObject"] > 0 and requests["s3 ListObjectsV2"] > 0 and requests["put batch"] == 1.0


def test_quick_bench_writes_every_figure_with_spreads(tmp_path) -> None:
    out = tmp_path / "results"
    result = CliRunner().invoke(harness, ["run", "--quick", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "contention[shared] 8 producer(s)" in result.output  # progress as it goes
    [json_file] = list(out.glob("bench-*-quick.json"))
    assert json_file.with_suffix(".md").is_file()
    data = json.loads(json_file.read_text())

    machine = data["machine"]
    assert machine["cpu_count"] >= 1 and machine["memory_bytes"] > 0
    assert machine["versions"]["python"] and machine["versions"]["osqueue"]
    assert data["quick"] is True and data["s3"]["latency_ms"] == 20

    b = data["benchmarks"]
    # --quick runs everything but Kafka (fetching jars and starting a broker is not quick).
    assert set(b) == {"contention", "depth", "py_vs_jvm", "requests", "raw_put", "spark_file", "latency"}

    c = b["contention"]
    assert c["duplicates"] == 0
    for mode in ("shared", "separate"):
        rows = c["modes"][mode]["rows"]
        assert [r["producers"] for r in rows] == [1, 2, 4, 8]
        for r in rows:
            for k in ("batches_per_s", "cas_attempts_per_write", "p50_ms", "p99_ms"):
                assert _is_stat(r[k]), (mode, r["producers"], k, r[k])
            assert r["batches_per_s"]["median"] > 0
            assert r["cas_attempts_per_write"]["min"] >= 1
            assert r["duplicates"] == 0 and r["missing"] == 0 and r["errors"] == 0
        assert _is_stat(c["modes"][mode]["speedup_8_vs_1"])
    # One group committer: every manifest write lands on its first attempt.
    assert all(r["cas_attempts_per_write"]["max"] == 1 for r in c["modes"]["shared"]["rows"])

    d = b["depth"]
    assert [r["queued_entries"] for r in d["rows"]] == [100, 10_000, 100_000]
    for r in d["rows"]:
        assert _is_stat(r["append_latency_ms"]) and _is_stat(r["append_cpu_ms"])
        assert r["bytes_rewritten_per_append"] > r["manifest_bytes"]

    p = b["py_vs_jvm"]
    assert p["entries_verified"] is True
    assert _is_stat(p["python_mb_per_s"])
    if not isinstance(p.get("jvm"), str):  # skipped only without java or the jars
        assert _is_stat(p["jvm_mb_per_s"]) and _is_stat(p["ratio_python_to_jvm"])

    q = b["requests"]
    for phase in ("produce", "consume", "gc", "total"):
        for kind in ("PUT", "GET", "LIST", "DELETE"):
            assert _is_stat(q[phase][kind]), (phase, kind)
    assert q["produce"]["PUT"]["median"] > 0 and q["gc"]["DELETE"]["median"] > 0

    r = b["raw_put"]
    if "skipped" not in r:  # skipped only without java or the jars
        assert r["entries_verified"] is True
        for k in ("producer_mb_per_s", "raw_put_mb_per_s", "encode_s", "ratio_producer_to_raw_put"):
            assert _is_stat(r[k]), k

    f = b["spark_file"]
    assert f["records"] > 0 and f["batches"] >= 2
    for k in ("osqueue_rows_per_s", "text_rows_per_s", "ratio_osqueue_to_text"):
        assert _is_stat(f[k]), k
    for run in f["raw_runs"]:  # every run read every record (checked by the benchmark too)
        assert run["osqueue"]["rows"] == run["text"]["rows"] == f["records"]

    lat = b["latency"]
    assert lat["samples_per_run"]["min"] >= 50
    for k in ("p50_ms", "p99_ms", "produce_to_durable_p50_ms"):
        assert _is_stat(lat[k]), k
    assert 0 < lat["p50_ms"]["median"] <= lat["p99_ms"]["median"]
    assert "processingTime" in lat["trigger"]
    modes = lat["modes"]
    for name, m in modes.items():  # micro-batch, and real-time mode on Spark 4.1+, side by side
        assert m["samples_per_run"]["min"] >= 50, name
        assert 0 < m["p50_ms"]["median"] <= m["p99_ms"]["median"], name
        if name != FILE_SOURCE_MODE:  # Spark's file source has no manifest to count requests on
            assert m["idle_manifest_gets_per_min"]["median"] >= 0, name
    if FILE_SOURCE_MODE in modes:  # the JVM modes' addBatch, cut by the listener's events
        for name in ("micro-batch-jvm", FILE_SOURCE_MODE):
            parts = modes[name]["add_batch_ms"]
            assert parts["tasks"]["min"] >= 1 and parts["job"]["median"] > 0, name
        assert modes["micro-batch-jvm"]["add_batch_ms"]["osqueue_fetch_sum"]["median"] >= 0

    goals = {g for g in json_file.with_suffix(".md").read_text().splitlines() if g.startswith("| 5 |")}
    osqueue_modes = [m for m in modes if m != FILE_SOURCE_MODE]  # the file source is a peer row, not a goal
    assert len(goals) == 2 * len(osqueue_modes)  # p50 and p99 rows per mode in the goals table
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert data["plots"] == [] and "matplotlib" in data["plots_skipped"]
    else:
        assert {p.split("-quick-")[1] for p in data["plots"]} >= {
            "contention.png",
            "depth.png",
            "latency.png",
            "ratios.png",
        }
        for name in data["plots"]:
            assert (out / name).stat().st_size > 1000


def test_deep_v1_bench_reports_the_chunked_and_the_one_segment_head(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/harness/deep_v1.py on the in-memory store at a small depth: the rows and the chunked head."""
    from bench.harness import deep_v1
    from bench.harness.environment import Settings

    class _Env:
        def store(self, prefix: str) -> InMemoryStore:
            return InMemoryStore(prefix)

    monkeypatch.setattr(deep_v1, "K", 128)
    settings = Settings(True, 0.0, lambda _: None)
    monkeypatch.setattr(deep_v1, "QUICK_DEPTH", 1_000)
    result = deep_v1.bench_deep_v1(_Env(), settings)  # type: ignore[arg-type]
    rows = {r["queue"]: r for r in result["rows"]}
    assert rows["chunked"]["segments"] == 8 and rows["chunked"]["largest_segment_entries"] == 128
    assert rows["one_segment"]["segments"] == 1 and rows["one_segment"]["largest_segment_entries"] == 1_000
    assert rows["v1_100"]["segments"] == 0
    assert set(result["open_first_3_extra_s_vs_100"]) == {"chunked", "one_segment"}


def test_spool_and_verify_read_rows_run_on_the_in_memory_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/harness/spool_benchmarks.py (issue 28's rows), small, on the in-memory store: every figure."""
    from bench.harness import spool_benchmarks
    from bench.harness.environment import Settings

    monkeypatch.setattr(spool_benchmarks, "SPOOL_CALLS", (40, 40))
    monkeypatch.setattr(spool_benchmarks, "VERIFY_BATCHES", (10, 10))

    class _Env:
        def store(self, prefix: str) -> InMemoryStore:
            return InMemoryStore(prefix)

    settings = Settings(True, 0.0, lambda _: None)
    spool = spool_benchmarks.bench_spool(_Env(), settings)  # type: ignore[arg-type]
    for key in ("unspooled_mb_s", "spooled_mb_s", "ratio", "durable_p50_ms", "durable_p99_ms", "streaming_ratio"):
        assert spool[key]["n"] == settings.ratio_repeats and spool[key]["median"] > 0, key
    read = spool_benchmarks.bench_verify_read(_Env(), settings)  # type: ignore[arg-type]
    assert 0 < read["verification_share"]["median"] < 1
    assert read["rows_s_without_checks"]["median"] > read["rows_s"]["median"] > 0


def test_jvm_spool_row_runs_its_three_producers_on_the_local_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """bench/jvm/SpoolProducers.java through the jvm_spool row, tiny, on the local store: every figure."""
    from bench.harness import spool_benchmarks
    from bench.harness.environment import Settings
    from bench.harness.jvm_benchmarks import jvm_classpath

    if not (os.environ.get("OSQUEUE_BENCH_JVM_CP") or jvm_classpath()):
        pytest.skip("needs java and the core's class path (OSQUEUE_BENCH_JVM_CP or the wheel's jars)")
    monkeypatch.setattr(spool_benchmarks, "SPOOL_CALLS", (30, 30))

    class _Env:
        def uri(self, prefix: str) -> str:
            return (tmp_path / prefix).as_uri()

        def options(self) -> dict[str, str]:
            return {}

    settings = Settings(True, 0.0, lambda _: None)
    out = spool_benchmarks.bench_jvm_spool(_Env(), settings)  # type: ignore[arg-type]
    for key in ("unspooled_mb_s", "spooled_mb_s", "streaming_mb_s", "ratio", "streaming_ratio", "durable_p99_ms"):
        assert out[key]["n"] == settings.ratio_repeats and out[key]["median"] > 0, key
    assert all(r["entries_decoded"] == 30 * 16 for r in out["raw_runs"])


def test_python_source_row_waits_for_the_dequeue_not_for_the_takeover(tmp_path) -> None:
    """The python_source row restores the manifest between runs; it must first wait for the Python
    source's end-of-run dequeue. The source's takeover (an epoch bump) changes the manifest too: a wait
    for "any change" returned at once and the late dequeue emptied the next run's queue (0 rows read)."""
    from bench.harness.environment import MANIFEST
    from bench.harness.python_source_bench import _await_dequeue

    from osqueue.producer import Producer
    from osqueue.queue import QueueConsumer
    from osqueue.store import LocalFileSystemStore

    with Producer(str(tmp_path), manifest_path=MANIFEST) as p:
        p.produce([b"a", b"b"])
        p.flush()
    store = LocalFileSystemStore(str(tmp_path))
    restored = store.get(MANIFEST)
    assert restored is not None
    consumer = QueueConsumer(store, MANIFEST)
    consumer.initialize()  # the takeover: the manifest changed, nothing dequeued
    with pytest.raises(RuntimeError, match="dequeue did not land"):
        _await_dequeue(store, restored.data, timeout_s=0.2)
    consumer.dequeue_through(consumer.read().next_sequence - 1)
    _await_dequeue(store, restored.data, timeout_s=5)


def test_python_source_row_steady_state_takes_the_fixed_cost_out_for_both_sides() -> None:
    """The steady state is the rows past the first file over the wall time past the one-file query's
    median, per side; a run shorter than that median (noise on a small queue) gives no rate, not a
    huge or negative one."""
    from bench.harness.python_source_bench import _steady
    from bench.harness.stats import summarize

    fixed = {"jvm_wall_s": summarize([0.5, 0.5, 0.5]), "python_wall_s": summarize([1.5, 1.0, 2.0])}
    runs = [{"jvm": {"wall_s": 2.5}, "python": {"wall_s": 5.5}}, {"jvm": {"wall_s": 4.5}, "python": {"wall_s": 9.5}}]
    steady = _steady(fixed, {"raw_runs": runs}, 401_024, 1_024)
    assert steady["jvm_rows_per_s"]["median"] == pytest.approx((200_000 + 100_000) / 2)
    assert steady["python_rows_per_s"]["median"] == pytest.approx((100_000 + 50_000) / 2)
    assert steady["ratio_python_to_jvm"]["median"] == pytest.approx(0.5)
    noisy = _steady(fixed, {"raw_runs": [{"jvm": {"wall_s": 0.4}, "python": {"wall_s": 1.2}}]}, 2_048, 1_024)
    assert noisy["jvm_rows_per_s"]["median"] is None and noisy["ratio_python_to_jvm"]["median"] is None
