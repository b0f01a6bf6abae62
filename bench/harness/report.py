"""A run's results as a report: each measured goal with its verdict, the Markdown report and the PNG
plots (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

from bench.harness.stats import fmt, summarize


def goal_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measured ratio against its goal: (item, what, stat, goal, higher is better)."""
    b = result["benchmarks"]
    rows: list[dict[str, Any]] = []

    def add(
        item: str, what: str, stat: dict[str, Any] | None, goal: float, unit: str = "", higher: bool = True
    ) -> None:
        if stat and stat.get("median") is not None:
            met = stat["median"] >= goal if higher else stat["median"] <= goal
            rows.append(
                {"item": item, "what": what, "stat": stat, "goal": goal, "unit": unit, "higher": higher, "met": met}
            )

    if "raw_put" in b:
        add("1", "JVM producer MB/s ÷ raw PUT MB/s", b["raw_put"].get("ratio_producer_to_raw_put"), 0.9)
    if "contention" in b:
        add(
            "2",
            "8 producers ÷ 1 (batches/s, shared committer)",
            b["contention"]["modes"]["shared"]["speedup_8_vs_1"],
            6.0,
            "x",
        )
    if "spark_file" in b:
        add("3", "osqueue source rows/s ÷ text file source", b["spark_file"].get("ratio_osqueue_to_text"), 1.0)
    if "kafka" in b:
        add("4", "osqueue source rows/s ÷ Kafka source", b["kafka"].get("ratio_osqueue_to_kafka"), 1.0)
    if "subscriptions" in b and "skipped" not in b["subscriptions"]:
        sb = b["subscriptions"]
        add("26a", "slowest of 4 subscriptions ÷ 1 reader (rows/s)", sb.get("min_ratio_4_vs_1"), 0.8, "x")
        add(
            "26b",
            "append p50, 4 active subscriptions ÷ 1 (coalesced acks)",
            sb.get("append_p50_ratio_4_vs_1"),
            1.3,
            "x",
            higher=False,
        )
    if "latency" in b:
        add("5", "produce → visible in foreachBatch, p50", b["latency"]["p50_ms"], 400, " ms", higher=False)
        add("5", "produce → visible in foreachBatch, p99", b["latency"]["p99_ms"], 1000, " ms", higher=False)
        mbj = (b["latency"].get("modes") or {}).get("micro-batch-jvm")
        if mbj:
            add("5", "micro-batch → JVM foreach: produce → seen, p50", mbj["p50_ms"], 400, " ms", higher=False)
            add("5", "micro-batch → JVM foreach: produce → seen, p99", mbj["p99_ms"], 1000, " ms", higher=False)
        rt = (b["latency"].get("modes") or {}).get("real-time")
        if rt:
            add("5", "real-time mode: produce → seen by the sink, p50", rt["p50_ms"], 150, " ms", higher=False)
            add("5", "real-time mode: produce → seen by the sink, p99", rt["p99_ms"], 400, " ms", higher=False)
        rtj = (b["latency"].get("modes") or {}).get("real-time-jvm")
        if rtj:
            add("5", "real-time mode → JVM foreach: produce → seen, p50", rtj["p50_ms"], 150, " ms", higher=False)
            add("5", "real-time mode → JVM foreach: produce → seen, p99", rtj["p99_ms"], 400, " ms", higher=False)
    if "python_source" in b and "stores" in b["python_source"]:
        for store, sides in b["python_source"]["stores"].items():
            for side in ("source", "sink"):
                what = f"Python data source {side} rows/s ÷ JVM connector's ({store})"
                add("27", what, sides[side]["ratio_python_to_jvm"], 0.5)
    if "jvm_depth" in b:
        add(
            "15",
            "JVM append latency at 1M queued ÷ at 100",
            b["jvm_depth"].get("append_latency_ratio_deepest_to_100"),
            1.5,
            "x",
            higher=False,
        )
    if "spark_depth" in b:
        d = b["spark_depth"]
        add("15", "Spark source rows/s at 1M queued ÷ at 1,000", d.get("rows_per_s_ratio_deepest_to_1000"), 0.8, "x")
        peak = d.get("driver_peak_heap_mb")
        if peak is not None:
            add(
                "15",
                "Spark driver peak heap draining 1M queued",
                {"median": peak, "min": peak, "max": peak, "n": 1},
                512,
                " MB",
                higher=False,
            )
    if "spark_depth_s3" in b and "rows_per_s_ratio_deep_to_1000" in b["spark_depth_s3"]:
        d = b["spark_depth_s3"]
        add("15", "Spark source on S3: rows/s from 1M queued ÷ at 1,000", d["rows_per_s_ratio_deep_to_1000"], 0.8, "x")
        peak = d["driver_peak_heap_mb"]
        add(
            "15",
            "Spark driver peak heap on S3 (1M queued: a micro-batch, planning all)",
            {"median": peak, "min": peak, "max": peak, "n": 1},
            512,
            " MB",
            higher=False,
        )
    if "py_vs_jvm" in b:
        add("7", "Python producer MB/s ÷ JVM producer", b["py_vs_jvm"].get("ratio_python_to_jvm"), 0.5)
    return rows


def write_plots(result: dict[str, Any], out_dir: pathlib.Path, stem: str) -> list[str]:
    """PNG figures beside the JSON: contention curve, depth cost, latency distribution, the ratios
    against their goals and the Spark sources' rows/s. Returns the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = result["benchmarks"]
    written: list[str] = []
    title_suffix = f" ({'quick' if result['quick'] else 'full'} run {result['started']})"

    def save(fig: Any, name: str) -> None:
        path = out_dir / f"{stem}-{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path.name)

    def err(stats: Sequence[dict[str, Any]]) -> list[list[float]]:
        return [[st["median"] - st["min"] for st in stats], [st["max"] - st["median"] for st in stats]]

    if "contention" in b:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for mode, md in b["contention"]["modes"].items():
            xs = [r["producers"] for r in md["rows"]]
            st = [r["batches_per_s"] for r in md["rows"]]
            ax.errorbar(
                xs,
                [x["median"] for x in st],
                yerr=err(st),
                marker="o",
                capsize=3,
                label=f"{mode} ({'one group committer' if mode == 'shared' else 'one committer each'})",
            )
        one = b["contention"]["modes"]["shared"]["rows"][0]["batches_per_s"]["median"]
        xs = [r["producers"] for r in b["contention"]["modes"]["shared"]["rows"]]
        ax.plot(xs, [one * x for x in xs], "k:", label="linear (N × one producer)")
        ax.plot(xs, [one * 6 / 8 * x for x in xs], color="grey", ls="--", lw=0.8, label="goal: 8 producers ≥ 6× one")
        ax.set_xlabel("producers (threads, one manifest)")
        ax.set_ylabel("batches enqueued / s (median, min–max)")
        ax.set_xticks(xs)
        ax.set_title("Manifest contention" + title_suffix, fontsize=9)
        ax.legend(fontsize=8)
        save(fig, "contention")

    if "depth" in b:
        rows = b["depth"]["rows"]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        xs = [r["queued_entries"] for r in rows]
        st = [r["append_latency_ms"] for r in rows]
        ax.errorbar(xs, [x["median"] for x in st], yerr=err(st), marker="o", capsize=3, label="append latency (ms)")
        ax.set_xscale("log")
        ax.set_xlabel("queued entries in the manifest")
        ax.set_ylabel("append latency, ms (median, min–max)")
        ax2 = ax.twinx()
        ax2.plot(
            xs,
            [r["bytes_rewritten_per_append"] / 1e6 for r in rows],
            "s--",
            color="tab:red",
            label="MB rewritten per append",
        )
        ax2.set_ylabel("MB rewritten per append", color="tab:red")
        ax.set_title("Cost vs queue depth" + title_suffix, fontsize=9)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
        save(fig, "depth")

    if "latency" in b and b["latency"].get("samples_ms"):
        lat = b["latency"]
        samples = sorted(lat["samples_ms"])
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9.6, 4.0))
        ax.hist(samples, bins=60, color="tab:blue", alpha=0.8)
        for q, style in (("p50_ms", "-"), ("p99_ms", "--")):
            ax.axvline(lat[q]["median"], color="k", ls=style, lw=1, label=f"{q[:3]} {lat[q]['median']:.0f} ms")
        ax.axvline(400, color="tab:green", ls=":", label="goal p50 ≤ 400 ms")
        ax.axvline(1000, color="tab:red", ls=":", label="goal p99 ≤ 1 s")
        ax.set_xlabel("produce() → row visible in foreachBatch, ms")
        ax.set_ylabel("records")
        ax.legend(fontsize=8)
        ax2.plot(samples, [i / len(samples) for i in range(1, len(samples) + 1)])
        ax2.set_xlim(left=0)
        ax2.set_xlabel("ms")
        ax2.set_ylabel("fraction of records (CDF)")
        ax2.axvline(400, color="tab:green", ls=":")
        ax2.axvline(1000, color="tab:red", ls=":")
        ax2.grid(True, which="both", alpha=0.3)
        fig.suptitle(
            f"End-to-end latency, {len(samples)} records over {lat['samples_per_run']['n']} runs, "
            f"S3 +{result['s3']['latency_ms']:g} ms/request" + title_suffix,
            fontsize=9,
        )
        save(fig, "latency")

    goals = goal_rows(result)
    if goals:
        fig, ax = plt.subplots(figsize=(8.8, 0.55 * len(goals) + 1.6))
        labels, vals, lo, hi, colors = [], [], [], [], []
        for g in goals:
            st, goal = g["stat"], g["goal"]
            # measured / goal, so that 1.0 is the goal for every row ("≥" rows) or goal / measured ("≤" rows)
            f = (
                (lambda v, goal=goal: v / goal)
                if g["higher"]
                else (lambda v, goal=goal: goal / v if v else float("nan"))
            )
            med, a, c = f(st["median"]), f(st["min"]), f(st["max"])
            labels.append(
                f"{g['item']}: {g['what']}\n{st['median']:.2f}{g['unit']} vs goal {'≥' if g['higher'] else '≤'} {goal:g}{g['unit']}"
            )
            vals.append(med)
            lo.append(med - min(a, c))
            hi.append(max(a, c) - med)
            colors.append("tab:green" if g["met"] else "tab:red")
        ys = list(range(len(goals)))[::-1]
        ax.barh(ys, vals, xerr=[lo, hi], color=colors, alpha=0.8, capsize=3)
        ax.axvline(1.0, color="k", ls="--", lw=1)
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xlabel(
            "measured ÷ goal (latency: goal ÷ measured); ≥ 1 meets the goal\nmedian, min–max over the repeats",
            fontsize=8,
        )
        ax.set_title("Goals of issue 7" + title_suffix, fontsize=9)
        save(fig, "ratios")

    sources = [
        (n, k) for n, k in (("spark_file", "text"), ("kafka", "kafka")) if n in b and b[n].get("osqueue_rows_per_s")
    ]
    if sources:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        names, st = [], []
        for n, k in sources:
            names += [f"osqueue\n({n} run)", {"text": "text files", "kafka": "Kafka"}[k]]
            st += [b[n]["osqueue_rows_per_s"], b[n][f"{k}_rows_per_s"]]
        ax.bar(
            range(len(names)),
            [x["median"] for x in st],
            yerr=err(st),
            capsize=4,
            color=["tab:blue", "tab:orange"] * len(sources),
        )
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=8)
        ax.set_ylabel("rows/s, availableNow → noop (median, min–max)")
        ax.set_title("Spark streaming sources, same records" + title_suffix, fontsize=9)
        save(fig, "spark-sources")
    return written


# ---------------------------------------------------------------------------------------------
# report


def markdown_report(result: dict[str, Any]) -> str:
    mf = result["machine"]
    lines = [
        f"# osqueue benchmarks ({'quick' if result['quick'] else 'full'} run)",
        "",
        f"- started {result['started']}, took {result['elapsed_s']:.0f} s; command: `{result['command']}`",
        f"- machine: {mf['cpu_count']} cores ({mf.get('cpu_model')}), {mf.get('memory_gib')} GiB, "
        f"{mf['platform']}; load average at start {mf.get('loadavg_at_start')}, at end {result.get('loadavg_at_end')}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in mf["versions"].items()),
        f"- S3: {result['s3']['kind']} on loopback, injected latency {result['s3']['latency_ms']:g} ms per request "
        "(proxy in its own process)",
        "- each figure: median (min–max) over the repeats; timings are noisy (shared machine)",
        "",
    ]
    b = result["benchmarks"]
    goals = goal_rows(result)
    if goals:
        lines += [
            "## Goals",
            "",
            "| # | what | goal | measured (median, min–max) | verdict |",
            "| --- | --- | --- | --- | --- |",
        ]
        if result["quick"]:
            lines[-4] = "## Goals (a --quick run: sizes too small for the verdicts to mean anything)"
        for g in goals:
            verdict = "met" if g["met"] else "**missed**"
            lines.append(
                f"| {g['item']} | {g['what']} | {'≥' if g['higher'] else '≤'} {g['goal']:g}{g['unit']} | "
                f"{fmt(g['stat'], g['unit'], 2)} | {'(quick) ' + verdict if result['quick'] else verdict} |"
            )
        lines.append("")
    skipped = {n: v["skipped"] for n, v in b.items() if isinstance(v, dict) and "skipped" in v}
    for n, why in skipped.items():
        lines += [f"- `{n}` skipped: {why}"]
    if skipped:
        lines.append("")
    if result.get("plots"):
        lines += ["Plots: " + ", ".join(f"[{p}]({p})" for p in result["plots"]), ""]
    if "contention" in b:
        c = b["contention"]
        lines += ["## Manifest contention", "", c["description"] + f"; {c['duration_s']:g} s per run.", ""]
        for mode, md in c["modes"].items():
            lines += [
                f"### {mode}",
                "",
                "| producers | batches/s | CAS attempts/write | batches/write | p50 ms | p99 ms | duplicates |",
                "| --- | --- | --- | --- | --- | --- | --- |",
            ]
            for r in md["rows"]:
                lines.append(
                    f"| {r['producers']} | {fmt(r['batches_per_s'])} | {fmt(r['cas_attempts_per_write'], '', 2)} | "
                    f"{fmt(r['batches_per_write'], '', 2)} | {fmt(r['p50_ms'], '', 0)} | {fmt(r['p99_ms'], '', 0)} | "
                    f"{r['duplicates']} |"
                )
            goal = "goal ≥ 6x" if mode == "shared" else "no goal: separate committers racing on the CAS"
            lines += ["", f"8 vs 1 producers: {fmt(md['speedup_8_vs_1'], 'x', 2)} ({goal})", ""]
    if "depth" in b:
        lines += [
            "## Cost vs queue depth",
            "",
            b["depth"]["description"] + ".",
            "",
            "| queued entries | manifest bytes | bytes rewritten/append | append latency ms | append CPU ms |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in b["depth"]["rows"]:
            lines.append(
                f"| {r['queued_entries']} | {r['manifest_bytes']} | {r['bytes_rewritten_per_append']} | "
                f"{fmt(r['append_latency_ms'])} | {fmt(r['append_cpu_ms'], '', 3)} |"
            )
        lines.append("")
    if "py_vs_jvm" in b:
        p = b["py_vs_jvm"]
        lines += ["## Python producer vs JVM producer", "", p["description"] + ".", ""]
        lines.append(
            f"- Python: {fmt(p['python_mb_per_s'], ' MB/s', 2)} without fixed cost, "
            f"{fmt(p['python_entries_per_s'], ' entries/s', 0)} ({fmt(p['python_mb_per_s_end_to_end'], ' MB/s', 2)} end to end; "
            f"fixed {fmt(p['python_fixed_s'], ' s', 2)})"
        )
        if isinstance(p.get("jvm"), str):
            lines.append(f"- JVM: {p['jvm']}")
        else:
            lines += [
                f"- JVM: {fmt(p['jvm_mb_per_s'], ' MB/s', 2)} without fixed cost "
                f"({fmt(p['jvm_mb_per_s_end_to_end'], ' MB/s', 2)} end to end; fixed incl. JVM start {fmt(p['jvm_startup_s'], ' s', 2)})",
                f"- ratio Python/JVM: {fmt(p['ratio_python_to_jvm'], '', 2)} "
                f"(end to end: {fmt(p['ratio_python_to_jvm_end_to_end'], '', 2)}); goal ≥ 0.5",
            ]
        lines.append("")
    if "requests" in b:
        q = b["requests"]
        lines += [
            "## Object-store requests per 1,000 entries",
            "",
            q["description"]
            + f"; {fmt(q['batches'], ' batches', 0)}, {fmt(q['entries_per_batch'], ' entries per batch', 0)}.",
            "",
            "| phase | PUT | GET | LIST | DELETE |",
            "| --- | --- | --- | --- | --- |",
        ]
        for phase in ("produce", "consume", "gc", "total"):
            lines.append(
                f"| {phase} | " + " | ".join(fmt(q[phase][k], "", 2) for k in ("PUT", "GET", "LIST", "DELETE")) + " |"
            )
        lines.append("")
    if "raw_put" in b and "skipped" not in b["raw_put"]:
        r = b["raw_put"]
        lines += [
            "## JVM producer vs raw PUT",
            "",
            r["description"] + ".",
            "",
            "| | MB/s | seconds |",
            "| --- | --- | --- |",
            f"| producer (payload) | {fmt(r['producer_mb_per_s'])} | {fmt(r['producer_s'], '', 2)} |",
            f"| raw PUT (same objects) | {fmt(r['raw_put_mb_per_s'])} | {fmt(r['raw_put_s'], '', 2)} |",
            f"| BatchCodec.encode alone | | {fmt(r['encode_s'], '', 2)} |",
            "",
            f"Ratio producer/raw PUT: {fmt(r['ratio_producer_to_raw_put'], '', 2)} (goal ≥ 0.9); "
            f"{fmt(r['batches'], ' batches', 0)} per run; entries verified: {r['entries_verified']}.",
            "",
        ]
    for n, other, label in (
        ("spark_file", "text", "Spark's text file source"),
        ("kafka", "kafka", "Spark's Kafka source"),
    ):
        if n in b and "skipped" not in b[n]:
            r = b[n]
            lines += [
                f"## Spark source vs {label}",
                "",
                r["description"] + ".",
                "",
                "| source | rows/s | MB/s |",
                "| --- | --- | --- |",
                f"| osqueue | {fmt(r['osqueue_rows_per_s'], '', 0)} | {fmt(r['osqueue_mb_per_s'])} |",
                f"| {other} | {fmt(r[other + '_rows_per_s'], '', 0)} | {fmt(r[other + '_mb_per_s'])} |",
                "",
                f"Ratio osqueue/{other}: {fmt(r['ratio_osqueue_to_' + other], '', 2)} (goal ≥ 1.0).",
                "",
            ]
            if n == "kafka":
                lines += [
                    "Versions: "
                    + ", ".join(f"{k} {v}" for k, v in r["versions"].items())
                    + f"; loading the topic took {r['kafka_load_s']:.1f} s.",
                    "",
                ]
    if "latency" in b:
        r = b["latency"]
        lines += [
            "## End-to-end latency",
            "",
            r["description"] + ".",
            "",
            "| produce() → | p50 ms | p99 ms |",
            "| --- | --- | --- |",
            f"| durable (in the manifest) | {fmt(r['produce_to_durable_p50_ms'], '', 0)} | {fmt(r['produce_to_durable_p99_ms'], '', 0)} |",
            f"| micro-batch handed to foreachBatch | {fmt(r['handed_to_foreach_batch_p50_ms'], '', 0)} | |",
            f"| row visible (after collect) | {fmt(r['p50_ms'], '', 0)} | {fmt(r['p99_ms'], '', 0)} |",
            "",
            f"{fmt(r['samples_per_run'], ' samples', 0)} per run, {fmt(r['micro_batches'], ' micro-batches', 0)} per run, "
            f"collect() p50 {fmt(r['collect_p50_ms'], ' ms', 0)}; max {fmt(r['max_ms'], ' ms', 0)}.",
            "",
            "A micro-batch with rows, by Spark's phases (`durationMs` of its progress; median per run, then over runs): "
            + ", ".join(f"{k} {fmt(v, ' ms', 0)}" for k, v in r["micro_batch_phase_p50_ms"].items())
            + ".",
            "",
        ]
        modes = r.get("modes") or {}
        if modes:
            lines += [
                "| mode | produce → durable p50 | seen p50 ms | p90 | p99 | max | batches/run | idle manifest GET/min | idle PUT/min |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            ]
            for name, m in modes.items():
                lines.append(
                    f"| {name} | {fmt(m['produce_to_durable_p50_ms'], '', 0)} | {fmt(m['p50_ms'], '', 0)} | "
                    f"{fmt(m['p90_ms'], '', 0)} | {fmt(m['p99_ms'], '', 0)} | {fmt(m['max_ms'], '', 0)} | "
                    f"{fmt(m['batches'], '', 0)} | {fmt(m['idle_manifest_gets_per_min'], '', 0) if m['idle_manifest_gets_per_min'] else 'n/a'} | "
                    f"{fmt(m['idle_manifest_puts_per_min'], '', 0) if m['idle_manifest_puts_per_min'] else 'n/a'} |"
                )
            lines.append("")
            for name, m in modes.items():
                if m.get("batch_phase_p50_ms"):
                    lines.append(
                        f"- {name}: a batch with rows by Spark's phases (median): "
                        + ", ".join(f"{k} {fmt(v, ' ms', 0)}" for k, v in m["batch_phase_p50_ms"].items())
                    )
            for name, m in modes.items():
                if m.get("add_batch_ms"):
                    lines.append(
                        f"- {name}: addBatch by the listener's job, stage and task events (median; `_sum`: over the "
                        "micro-batch's tasks): "
                        + ", ".join(f"{k} {fmt(v, '', 0)}" for k, v in m["add_batch_ms"].items())
                    )
            lines.append("")
    if "python_source" in b and "stores" in b["python_source"]:
        ps = b["python_source"]
        lines += [
            "## Python data source vs the JVM connector",
            "",
            ps["description"] + ".",
            "",
            "| store | side | JVM rows/s | Python rows/s | Python ÷ JVM |",
            "| --- | --- | --- | --- | --- |",
        ]
        for store, sides in ps["stores"].items():
            for side in ("source", "sink"):
                r = sides[side]
                lines.append(
                    f"| {store} | {side} | {fmt(r['jvm_rows_per_s'], '', 0)} | {fmt(r['python_rows_per_s'], '', 0)} | "
                    f"{fmt(r['ratio_python_to_jvm'], 'x', 2)} |"
                )
        lines.append("")
        if any("fixed_cost" in sides["source"] for sides in ps["stores"].values()):
            lines += [
                "Per-query fixed cost (a whole query or write of one batch file) and steady state (rows past the "
                "first file over the wall time past the one-file query's; the source's Spark `addBatch` rate beside "
                "it):",
                "",
                "| store | side | JVM fixed s | Python fixed s | Python − JVM s | steady from | JVM rows/s steady | "
                "Python rows/s steady | Python ÷ JVM steady | JVM / Python addBatch rows/s |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            ]
            for store, sides in ps["stores"].items():
                for side in ("source", "sink"):
                    f, st = sides[side].get("fixed_cost"), sides[side].get("steady_state")
                    if not f or not st:
                        continue
                    add_batch = (
                        f"{fmt(st['jvm_add_batch_rows_per_s'], '', 0)} / {fmt(st['python_add_batch_rows_per_s'], '', 0)}"
                        if "jvm_add_batch_rows_per_s" in st
                        else "—"
                    )
                    lines.append(
                        f"| {store} | {side} | {fmt(f['jvm_wall_s'], '', 2)} | {fmt(f['python_wall_s'], '', 2)} | "
                        f"{fmt(f['python_minus_jvm_s'], '', 2)} | {st['records']:,} | "
                        f"{fmt(st['jvm_rows_per_s'], '', 0)} | {fmt(st['python_rows_per_s'], '', 0)} | "
                        f"{fmt(st['ratio_python_to_jvm'], 'x', 2)} | {add_batch} |"
                    )
            for store, sides in ps["stores"].items():
                for side in ("source", "sink"):
                    big = sides[side].get("large")
                    if big:
                        lines.append(
                            f"- {store} {side}, {big['records']:,} records, whole query: JVM "
                            f"{fmt(big['jvm_rows_per_s'], ' rows/s', 0)}, Python {fmt(big['python_rows_per_s'], ' rows/s', 0)}, "
                            f"Python ÷ JVM {fmt(big['ratio_python_to_jvm'], 'x', 2)}"
                        )
            lines.append("")
    if "delta" in b and "results" in b["delta"]:
        r = b["delta"]
        lines += [
            "## osqueue vs delta-rs -> Spark's Delta source",
            "",
            r["description"],
            "",
            "| store | load | side | produce → seen p50 ms | p99 ms | rows/s delivered | producer durable p50 ms | failed appends |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for store, loads in r["results"].items():
            for load, sides in loads.items():
                for side, m in sides.items():
                    lines.append(
                        f"| {store} | {load} | {side} | {fmt(m['p50_ms'], '', 0)} | {fmt(m['p99_ms'], '', 0)} | "
                        f"{fmt(m['rows_per_s_delivered'], '', 0)} | {fmt(m['producer_durable_p50_ms'], '', 0)} | "
                        f"{m['producer_failed_appends']} |"
                    )
        lines.append("")
        for store, q in r["ratios"].items():
            lines.append(
                f"- {store}: p50 osqueue ÷ Delta (latency load) {q['p50_ratio_osqueue_over_delta']:.2f} (goal ≤ 0.5); "
                f"rows/s osqueue ÷ Delta (throughput load) {q['rows_per_s_ratio_osqueue_over_delta']:.2f} (goal ≥ 1)."
            )
        lines.append("")
    if "subscriptions" in b and "skipped" not in b["subscriptions"]:
        sb = b["subscriptions"]
        lines += [
            "## Named subscriptions (issue 26)",
            "",
            f"{sb['batches']} batches of {sb['rows_per_batch']} × {sb['row_bytes']} B rows; each reader acks every "
            "batch (coalesced, `ack_interval` 1 s); readers of the read rows are processes.",
            "",
            f"- one reader: {fmt(sb['single_rows_per_s'], ' rows/s')}; slowest of 4 at once ÷ one: "
            f"{fmt(sb['min_ratio_4_vs_1'], 'x', 2)}",
            "",
            "| producer append (produce → durable) | p50 ms | p99 ms | reader ack writes (per run) |",
            "| --- | --- | --- | --- |",
        ]
        for label, runs in sb["appends"].items():
            readers, acks = label.split("_", 1)
            lines.append(
                f"| {readers} subscription(s), acks {acks.replace('_', ' ')} | "
                f"{fmt(summarize([r['p50_ms'] for r in runs]), '', 0)} | "
                f"{fmt(summarize([r['p99_ms'] for r in runs]), '', 0)} | "
                f"{', '.join(str(int(r['reader_ack_writes'])) for r in runs)} |"
            )
        lines += [
            "",
            f"- append p50, 4 ÷ 1: {fmt(sb['append_p50_ratio_4_vs_1'], 'x', 2)} with coalesced acks, "
            f"{fmt(sb['append_p50_ratio_4_vs_1_per_batch_acks'], 'x', 2)} with a write per ack; errors {sb['errors']}",
            "",
        ]
    return "\n".join(lines)


def replot(json_path: str) -> list[str]:
    """(Re)writes the PNG plots of a results JSON beside it; returns their names."""
    path = pathlib.Path(json_path)
    result = json.loads(path.read_text())
    return write_plots(result, path.parent, path.stem)
