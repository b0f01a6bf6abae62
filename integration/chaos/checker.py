"""The chaos run's checker: exact, from the run directory's logs alone (Jepsen-style).

    python -m integration.chaos.checker RUN_DIR [--quiet]

Inputs (written by ``integration.chaos.run``; every file is optional except the producer logs):

- ``producers/<name>/inc-<k>.log``: one file per producer incarnation, tag ``<name>-<k>``, values
  ``<tag>-<n>``. Python producers write ``attempt``/``acked``/``failed`` lines per ``produce()``
  call (see ``py_producer.py``); for JVM producers the harness writes one ``attempt`` line for
  the incarnation's whole range and a ``per-call<TAB>tag<TAB>N`` line (QueueTool runs with
  ``--sync true --per-call N``: a killed incarnation attempted what resolved plus one call of N),
  then QueueTool's stdout follows (``durable<TAB>seq<TAB>location
  <TAB>value`` / ``failed<TAB>ErrorClass<TAB>value`` per entry). An attempted value with no
  acked/failed line is *unknown*, like a failed one: it may or may not be in the queue.
  A line cut by a SIGKILL (no trailing newline) is ignored.
- ``out/batch-<id>.jsonl``: the sink, ``[sequence, index, value, location]`` per line.
- ``manifest-final.bin``: the manifest at the end (its ``next_sequence`` bounds what must have
  been delivered); ``proxy.json``: the fault proxy's counts; ``events.jsonl``: kills, restarts,
  query failures; ``zombie.log``; ``epochs.jsonl``: the manifest's epoch sampled during the run.

Verdicts (any non-zero one fails the run, exit status 1):

- **lost**: acked, never delivered.
- **duplicated**: a value delivered under more than one (sequence, index) key, a key delivered
  with two different values, or one key delivered by two different micro-batches.
- **out_of_order**: within one producer incarnation, an acked value whose delivery key
  (sequence, index) is below that of an acked value produced before it.
- **unexpected**: delivered but never attempted (or not a value any producer makes).
- **misplaced**: acked at a (sequence, location[, index]) other than where it was delivered.
- **sequence_gaps**: sequences below the final manifest's next_sequence that no micro-batch
  delivered (every producer batch holds at least one entry, so each sequence must show up).
- **zombie_landed**: zombie consumer calls that did not raise FencedError-or-error.

With subscriptions (``run.json``'s ``args.subscriptions`` N > 0; ``out/<name>/`` per subscription)
the sink verdicts above are checked for each subscription on its own, and three more apply:

- **positions_behind**: subscriptions whose position in the final head is not its ``next_sequence``
  (every reader acknowledged everything before it stopped);
- **head_not_empty**: entries the final head still holds (they leave once every subscription passed);
- **gc_referenced**: batch files the final GC cycle (``run.json``'s ``final_gc``) found still
  referenced, plus its failed deletes (1 when the cycle did not run).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import glob
import json
import os
import pathlib
import re
import sys
from typing import Any

VIOLATIONS = (
    "lost",
    "duplicated",
    "out_of_order",
    "unexpected",
    "misplaced",
    "sequence_gaps",
    "zombie_landed",
    "positions_behind",
    "head_not_empty",
    "gc_referenced",
)
_VALUE = re.compile(r"^(?P<tag>(?P<name>[A-Za-z0-9_]+)-(?P<inc>\d+))-(?P<n>\d+)$")


def _lines(path: str):
    """Complete lines only: a SIGKILL may cut the last one."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.endswith("\n"):
                yield line[:-1]


class Incarnation:
    __slots__ = ("tag", "name", "kind", "attempted", "acked", "failed", "done", "log", "_starts")

    def __init__(self, tag: str, name: str, log: str) -> None:
        self.tag, self.name, self.log = tag, name, log
        self.kind = "jvm" if name.startswith("jvm") else "py"
        self.attempted: list[tuple[int, int]] = []  # (n0, k)
        self.acked: dict[int, tuple[int, str, int | None]] = {}  # n -> (sequence, location, index)
        self.failed: dict[int, str] = {}  # n -> error class
        self.done = False
        self._starts: tuple[list[int], list[int]] | None = None

    def attempted_count(self) -> int:
        return sum(k for _, k in self.attempted)

    def was_attempted(self, n: int) -> bool:
        if self._starts is None:
            ranges = sorted(self.attempted)
            self._starts = ([n0 for n0, _ in ranges], [n0 + k for n0, k in ranges])
        starts, ends = self._starts
        i = bisect.bisect_right(starts, n) - 1
        return i >= 0 and n < ends[i]


def read_producer_logs(run: pathlib.Path) -> dict[str, Incarnation]:
    incs: dict[str, Incarnation] = {}
    for path in sorted(glob.glob(str(run / "producers" / "*" / "inc-*.log"))):
        name = pathlib.Path(path).parent.name
        k = int(re.search(r"inc-(\d+)\.log$", path).group(1))
        inc = Incarnation(f"{name}-{k}", name, path)
        incs[inc.tag] = inc
        per_call = 0
        for line in _lines(path):
            p = line.split("\t")
            kind = p[0]
            if kind == "attempt" and len(p) == 4:
                inc.attempted.append((int(p[2]), int(p[3])))
            elif kind == "acked" and len(p) == 7:  # Python, per call
                n0, cnt, seq, loc, start = int(p[2]), int(p[3]), int(p[4]), p[5], int(p[6])
                for j in range(cnt):
                    inc.acked[n0 + j] = (seq, loc, start + j)
            elif kind == "failed" and len(p) == 5:  # Python, per call
                for j in range(int(p[3])):
                    inc.failed[int(p[2]) + j] = p[4]
            elif kind == "durable" and len(p) == 4:  # JVM QueueTool, per entry
                m = _VALUE.match(p[3])
                if m and m.group("tag") == inc.tag:
                    inc.acked[int(m.group("n"))] = (int(p[1]), p[2], None)
            elif kind == "failed" and len(p) == 3:  # JVM QueueTool, per entry
                m = _VALUE.match(p[2])
                if m and m.group("tag") == inc.tag:
                    inc.failed[int(m.group("n"))] = p[1]
            elif kind == "per-call" and len(p) == 3:  # JVM: QueueTool --sync true --per-call N
                per_call = int(p[2])
            elif kind == "done" or line.startswith("produced "):
                inc.done = True
        if per_call and not inc.done and inc.attempted:
            # A synchronous QueueTool produces its values in order, one call of per_call entries
            # at a time: when killed, what it attempted is what resolved plus one call in flight.
            resolved = [*inc.acked, *inc.failed]
            reached = max(len(resolved), max(resolved) + 1 if resolved else 0)
            n0, count = inc.attempted[0]
            inc.attempted = [(n0, min(count, reached + per_call))]
    return incs


def read_sink(
    run: pathlib.Path, out: pathlib.Path | None = None
) -> tuple[dict[tuple[int, int], tuple[str, str]], dict[str, Any]]:
    """(sequence, index) -> (value, location), and the duplicate findings of the sink itself
    (``out``: one subscription's sink directory; default ``run/out``)."""
    keys: dict[tuple[int, int], tuple[str, str]] = {}
    key_batch: dict[tuple[int, int], int] = {}
    conflicts, redelivered, rows, batches = [], [], 0, 0
    files = glob.glob(str((out or run / "out") / "batch-*.jsonl"))
    for path in sorted(files, key=lambda p: int(re.search(r"batch-(\d+)\.jsonl$", p).group(1))):
        b = int(re.search(r"batch-(\d+)\.jsonl$", path).group(1))
        batches += 1
        for line in _lines(path):
            s, i, v, loc = json.loads(line)
            rows += 1
            key = (s, i)
            if key in keys:
                if keys[key][0] != v:
                    conflicts.append({"key": key, "values": [keys[key][0], v]})
                if key_batch[key] != b:
                    redelivered.append({"key": key, "batches": [key_batch[key], b], "value": v})
                continue
            keys[key] = (v, loc)
            key_batch[key] = b
    return keys, {"rows": rows, "batches": batches, "key_conflicts": conflicts, "keys_redelivered": redelivered}


def _manifest_footer(run: pathlib.Path) -> dict[str, int] | None:
    path = run / "manifest-final.bin"
    if not path.exists():
        return None
    from osqueue.format import parse_head

    h = parse_head(path.read_bytes(), "manifest-final.bin")  # v1 or a segmented head (docs/format.md §2.2)
    return {"next_sequence": h.next_sequence, "epoch": h.epoch, "entries": h.depth, "first_sequence": h.first_sequence}


def _read_json(path: pathlib.Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def _events(run: pathlib.Path) -> list[dict[str, Any]]:
    path = run / "events.jsonl"
    return [json.loads(x) for x in _lines(str(path))] if path.exists() else []


def zombie_figures(run: pathlib.Path) -> dict[str, Any]:
    path = run / "zombie.log"
    z: dict[str, Any] = {
        "present": path.exists(),
        "init_epoch": None,
        "go_epoch": None,
        "attempts": 0,
        "fenced": 0,
        "landed": 0,
        "errors": 0,
        "by_kind": {},
        "landed_examples": [],
    }
    if not path.exists():
        return z
    by_kind: collections.Counter[str] = collections.Counter()
    for line in _lines(str(path)):
        p = line.split("\t")
        if p[0] == "init":
            z["init_epoch"] = int(p[1])
        elif p[0] == "go":
            z["go_epoch"] = int(p[1])
        elif p[0] == "attempt" and len(p) >= 4:
            z["attempts"] += 1
            by_kind[f"{p[2]}:{p[3]}"] += 1
            if p[3] == "fenced":
                z["fenced"] += 1
            elif p[3] == "landed":
                z["landed"] += 1
                if len(z["landed_examples"]) < 5:
                    z["landed_examples"].append(line)
            else:
                z["errors"] += 1
    z["by_kind"] = dict(sorted(by_kind.items()))
    return z


def epoch_figures(
    run: pathlib.Path, zombie: dict[str, Any], footer: dict[str, int] | None, driver_starts: int
) -> dict[str, Any]:
    path = run / "epochs.jsonl"
    samples = [json.loads(x) for x in _lines(str(path))] if path.exists() else []
    epochs = [s["epoch"] for s in samples]
    decreases = sum(1 for a, b in zip(epochs, epochs[1:]) if b < a)
    distinct = sorted(set(epochs))
    final = footer["epoch"] if footer else (epochs[-1] if epochs else None)
    z = zombie.get("init_epoch")
    # The epoch only grows; the Spark query's first start moved it past the zombie's, and every
    # later start (after a kill or a failure) bumps it again.
    consistent = decreases == 0 and (
        z is None or final is None or (final > z and (zombie.get("go_epoch") is None or zombie["go_epoch"] > z))
    )
    return {
        "samples": len(samples),
        "distinct": distinct[:50],
        "decreases": decreases,
        "final": final,
        "zombie_epoch": z,
        "driver_starts": driver_starts,
        "bumps_after_zombie": (final - z) if (final is not None and z is not None) else None,
        "consistent": consistent,
    }


def verify_sink(
    incs: dict[str, Incarnation],
    keys: dict[tuple[int, int], tuple[str, str]],
    sink: dict[str, Any],
    footer: dict[str, int] | None,
) -> dict[str, Any]:
    """One sink (the query's, or one subscription's) against the producers' logs."""
    # value -> first key; values seen under a second key are duplicates.
    delivered: dict[str, tuple[int, int]] = {}
    dup_values: list[dict[str, Any]] = []
    unexpected: list[str] = []
    by_tag: dict[str, dict[int, tuple[int, int]]] = collections.defaultdict(dict)
    seq_locations: dict[int, str] = {}
    seq_location_conflicts = 0
    for key, (v, loc) in keys.items():
        if seq_locations.setdefault(key[0], loc) != loc:
            seq_location_conflicts += 1
        if v in delivered:
            dup_values.append({"value": v, "keys": [delivered[v], key]})
            continue
        delivered[v] = key
        m = _VALUE.match(v)
        inc = incs.get(m.group("tag")) if m else None
        if inc is None or not inc.was_attempted(int(m.group("n"))):
            unexpected.append(v)
            continue
        by_tag[inc.tag][int(m.group("n"))] = key

    per: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    lost, misplaced, ooo = [], [], []
    failed_kinds: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for tag, inc in incs.items():
        c = per[inc.name]
        got = by_tag.get(tag, {})
        c["incarnations"] += 1
        c["attempted"] += inc.attempted_count()
        c["acked"] += len(inc.acked)
        c["failed"] += len(inc.failed)
        c["unknown"] += inc.attempted_count() - len(inc.acked) - len(inc.failed)
        c["delivered"] += len(got)
        for n, err in inc.failed.items():
            failed_kinds[inc.name][err] += 1
            if n in got:
                c["failed_but_delivered"] += 1
        c["unknown_but_delivered"] += sum(1 for n in got if n not in inc.acked and n not in inc.failed)
        prev_key, prev_n = None, None
        for n in sorted(inc.acked):
            seq, loc, idx = inc.acked[n]
            key = got.get(n)
            if key is None:
                c["lost"] += 1
                if len(lost) < 20:
                    lost.append(f"{tag}-{n}")
                continue
            if key[0] != seq or keys[key][1] != loc or (idx is not None and key[1] != idx):
                c["misplaced"] += 1
                if len(misplaced) < 20:
                    misplaced.append(
                        {"value": f"{tag}-{n}", "acked": [seq, loc, idx], "delivered": [*key, keys[key][1]]}
                    )
            if prev_key is not None and key < prev_key:
                c["out_of_order"] += 1
                if len(ooo) < 20:
                    ooo.append({"value": f"{tag}-{n}", "key": key, "after": f"{tag}-{prev_n}", "after_key": prev_key})
            else:
                prev_key, prev_n = key, n
    for d in dup_values:
        m = _VALUE.match(d["value"])
        per[m.group("name") if m else "?"]["duplicated"] += 1
    for v in unexpected:
        m = _VALUE.match(v)
        per[m.group("name") if m else "?"]["unexpected"] += 1

    fields = (
        "incarnations",
        "attempted",
        "acked",
        "failed",
        "unknown",
        "delivered",
        "lost",
        "duplicated",
        "out_of_order",
        "unexpected",
        "misplaced",
        "failed_but_delivered",
        "unknown_but_delivered",
    )
    producers = {name: {f: per[name][f] for f in fields} for name in sorted(per)}
    total = {f: sum(p[f] for p in producers.values()) for f in fields}
    total["duplicated"] += len(sink["key_conflicts"]) + len(sink["keys_redelivered"])

    gaps: list[int] = []
    if footer is not None:
        seen = {s for s, _ in keys}
        gaps = [s for s in range(0, footer["next_sequence"]) if s not in seen]
    total["sequence_gaps"] = len(gaps)
    return {
        "verdict": "PASS" if all(total.get(v, 0) == 0 for v in VIOLATIONS) else "FAIL",
        "total": total,
        "producers": producers,
        "failure_kinds": {k: dict(v) for k, v in failed_kinds.items()},
        "sink": {
            "rows": sink["rows"],
            "batches": sink["batches"],
            "distinct_keys": len(keys),
            "sequences": len({s for s, _ in keys}),
            "key_conflicts": len(sink["key_conflicts"]),
            "keys_redelivered": len(sink["keys_redelivered"]),
            "sequence_location_conflicts": seq_location_conflicts,
        },
        "examples": {
            "lost": lost,
            "duplicated": (dup_values[:10] + sink["key_conflicts"][:5] + sink["keys_redelivered"][:5]),
            "out_of_order": ooo,
            "unexpected": unexpected[:20],
            "misplaced": misplaced,
            "sequence_gaps": gaps[:20],
        },
    }


def _subscription_figures(run: pathlib.Path, names: list[str], meta: dict[str, Any]) -> dict[str, Any]:
    """The final head's subscription positions and depth, and the final GC cycle's counts."""
    path = run / "manifest-final.bin"
    positions: dict[str, int | None] = dict.fromkeys(names)
    depth, next_sequence = None, None
    if path.exists():
        from osqueue.format import parse_head

        h = parse_head(path.read_bytes(), "manifest-final.bin")
        depth, next_sequence = h.depth, h.next_sequence
        for rec in h.sections.subscriptions:
            positions[rec.name] = rec.next
    gc = meta.get("final_gc")
    return {
        "positions": positions,
        "next_sequence": next_sequence,
        "positions_behind": sum(1 for n in names if positions[n] is None or positions[n] != next_sequence),
        "head_entries": depth,
        "head_not_empty": 1 if depth is None else depth,
        "final_gc": gc,
        "gc_referenced": 1 if not gc else gc["kept_referenced"] + gc["failed"],
    }


def check(run: str | os.PathLike[str]) -> dict[str, Any]:
    run = pathlib.Path(run)
    incs = read_producer_logs(run)
    footer = _manifest_footer(run)
    meta = _read_json(run / "run.json", {})
    names = [f"s{i}" for i in range(int(meta.get("args", {}).get("subscriptions", 0) or 0))]
    if not names:
        one = verify_sink(incs, *read_sink(run), footer)
    else:
        per_sub = {n: verify_sink(incs, *read_sink(run, run / "out" / n), footer) for n in names}
        one = dict(per_sub[names[0]])  # what the producers did is the same for every subscription
        one["total"] = dict(one["total"])
        # The producers' table is s0's; the violations add up over the subscriptions.
        for v in ("lost", "duplicated", "out_of_order", "unexpected", "misplaced", "sequence_gaps"):
            one["total"][v] = sum(r["total"][v] for r in per_sub.values())
        one["sink"] = {k: sum(r["sink"][k] for r in per_sub.values()) for k in one["sink"]}
        one["examples"] = {n: r["examples"] for n, r in per_sub.items() if r["verdict"] != "PASS"}
        subs = _subscription_figures(run, names, meta)
        for v in ("positions_behind", "head_not_empty", "gc_referenced"):
            one["total"][v] = subs[v]
        subs["per_subscription"] = {
            n: {"verdict": r["verdict"], "total": r["total"], "sink": r["sink"]} for n, r in per_sub.items()
        }
    total = one["total"]
    for v in ("positions_behind", "head_not_empty", "gc_referenced"):
        total.setdefault(v, 0)  # without subscriptions: not checked

    events = _events(run)
    kills = collections.Counter(e["kind"] for e in events if e.get("event") == "kill")
    query_failures = sum(1 for e in events if e.get("event") == "query_failed")
    driver_starts = sum(1 for e in events if e.get("event") == "start" and e.get("kind") == "driver")
    zombie = zombie_figures(run)
    total["zombie_landed"] = zombie["landed"]

    proxy = _read_json(run / "proxy.json", {})
    counts = proxy.get("counts", {})
    injected = proxy.get("injected", {})
    requests = counts.get("requests", 0)
    cond = counts.get("conditional_puts", 0)
    on_cond = proxy.get("injected_on_conditional", {})
    puts = proxy.get("by_method", {}).get("PUT", 0)
    faults = {
        "requests": requests,
        "by_method": proxy.get("by_method", {}),
        "injected": injected,
        "injected_total": sum(injected.values()),
        "error_pct": round(100.0 * sum(injected.values()) / requests, 2) if requests else 0.0,
        "conditional_puts": cond,
        "injected_on_conditional_puts": on_cond,
        "conditional_puts_reply_dropped_pct": round(100.0 * on_cond.get("drop_reply", 0) / cond, 2) if cond else 0.0,
        "puts": puts,
        "puts_reply_dropped": proxy.get("drop_reply_on_put", on_cond.get("drop_reply", 0)),
    }
    faults["puts_reply_dropped_pct"] = round(100.0 * faults["puts_reply_dropped"] / puts, 2) if puts else 0.0

    report = {
        "run": str(run),
        "verdict": "PASS" if all(total.get(v, 0) == 0 for v in VIOLATIONS) else "FAIL",
        "total": total,
        "producers": one["producers"],
        "failure_kinds": one["failure_kinds"],
        "sink": one["sink"],
        "manifest": footer,
        "faults": faults,
        "kills": dict(kills),
        "query_failures": query_failures,
        "driver_starts": driver_starts,
        "zombie": zombie,
        "epochs": epoch_figures(run, zombie, footer, driver_starts),
        "examples": one["examples"],
        "meta": meta,
    }
    if names:
        report["subscriptions"] = subs
    if not report["epochs"]["consistent"]:
        report["verdict"] = "FAIL"
    return report


def markdown(report: dict[str, Any]) -> str:
    cols = (
        "attempted",
        "acked",
        "failed",
        "unknown",
        "delivered",
        "lost",
        "duplicated",
        "out_of_order",
        "unexpected",
        "misplaced",
    )
    out = [
        f"Verdict: **{report['verdict']}**",
        "",
        "| producer | " + " | ".join(cols) + " |",
        "| --- |" + " --- |" * len(cols),
    ]
    for name, p in report["producers"].items():
        out.append(f"| {name} | " + " | ".join(f"{p[c]:,}" for c in cols) + " |")
    t = report["total"]
    out.append("| **total** | " + " | ".join(f"**{t[c]:,}**" for c in cols) + " |")
    f, z, e = report["faults"], report["zombie"], report["epochs"]
    inj = f["injected"]
    out += [
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| sink | {report['sink']['rows']:,} rows in {report['sink']['batches']:,} micro-batches, "
        f"{report['sink']['sequences']:,} sequences; sequence gaps {t['sequence_gaps']} |",
        f"| requests through the proxy | {f['requests']:,} ({', '.join(f'{k} {v:,}' for k, v in sorted(f['by_method'].items()))}) |",
        f"| faults injected | {f['injected_total']:,} = {f['error_pct']}% of requests "
        f"(503 {inj.get('503', 0):,}, 500 {inj.get('500', 0):,}, reset {inj.get('reset', 0):,}, "
        f"stall {inj.get('stall', 0):,}, drop_reply {inj.get('drop_reply', 0):,}) |",
        f"| conditional PUTs (manifest CAS) with reply dropped | {f['injected_on_conditional_puts'].get('drop_reply', 0):,} "
        f"of {f['conditional_puts']:,} = {f['conditional_puts_reply_dropped_pct']}% |",
        f"| all PUTs with reply dropped | {f['puts_reply_dropped']:,} of {f['puts']:,} = {f['puts_reply_dropped_pct']}% |",
        f"| kills (SIGKILL) | {', '.join(f'{k} {v}' for k, v in sorted(report['kills'].items())) or 'none'} |",
        f"| query failures (restarted) | {report['query_failures']} |",
        f"| driver starts | {report['driver_starts']} |",
        f"| zombie consumer | {z['attempts']:,} attempts, {z['fenced']:,} fenced, {z['landed']} landed, {z['errors']} errors |",
        f"| manifest epoch | zombie {e['zombie_epoch']}, final {e['final']}, "
        f"{e['decreases']} decreases in {e['samples']} samples, consistent: {e['consistent']} |",
        f"| producer failures by class | {json.dumps(report['failure_kinds'], sort_keys=True)} |",
    ]
    subs = report.get("subscriptions")
    if subs:
        scols = ("delivered", "lost", "duplicated", "out_of_order", "unexpected", "misplaced", "sequence_gaps")
        out += ["", "| subscription | position | " + " | ".join(scols) + " | verdict |",
                "| --- | --- |" + " --- |" * len(scols) + " --- |"]  # fmt: skip
        for n, r in subs["per_subscription"].items():
            pos = subs["positions"].get(n)
            out.append(f"| {n} | {pos if pos is not None else '-'} | "
                       + " | ".join(f"{r['total'][c]:,}" for c in scols) + f" | {r['verdict']} |")  # fmt: skip
        gc = subs["final_gc"] or {}
        out += [
            "",
            f"Final head: next_sequence {subs['next_sequence']}, {subs['head_entries']} entries, "
            f"{subs['positions_behind']} subscription(s) behind. Final GC cycle: "
            + (
                f"{gc['deleted']:,} batch files deleted, {gc['kept_referenced']} referenced, "
                f"{gc['kept_in_grace']:,} kept in the grace period ({gc['grace_period_ms'] // 1000} s), "
                f"{gc['failed']} failed; {gc['batch_files_left']:,} batch files left."
                if gc
                else "did not run."
            ),
        ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    report = check(args.run_dir)
    run = pathlib.Path(args.run_dir)
    (run / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=list) + "\n")
    md = markdown(report)
    (run / "report.md").write_text(md)
    if not args.quiet:
        print(md)
    return 0 if report["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
