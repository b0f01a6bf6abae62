"""The chaos run, short CI version (issue 6), and the checker on hand-made logs.

The short run: ~20,000 entries from 2 JVM + 2 Python producer processes through the seeded fault
proxy (moto), a Spark streaming query into an idempotent per-batch sink, SIGKILLs of a JVM and a
Python producer and of the Spark driver, a fenced zombie consumer. It asserts the checker's
verdicts (0 lost, duplicated, out of order, unexpected, misplaced, sequence gaps; zombie landed 0)
and that the chaos really happened (each fault kind injected, each kill done), so it cannot pass
vacuously. The long run and the figures: docs/reliability.md, "Chaos run".
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from integration.chaos import checker

REPO = pathlib.Path(__file__).resolve().parents[1]


def _write(path: pathlib.Path, lines: list[str], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x + "\n" for x in lines) + tail)


def _sink(run: pathlib.Path, batch: int, rows: list[list]) -> None:
    _write(run / "out" / f"batch-{batch}.jsonl", [json.dumps(r) for r in rows])


def _clean_run(run: pathlib.Path) -> None:
    """Python producer py0 (2 calls of 2 entries) and JVM producer jvm0 (3 entries), all delivered."""
    _write(
        run / "producers" / "py0" / "inc-0.log",
        [
            "attempt\tpy0-0\t0\t2",
            "acked\tpy0-0\t0\t2\t0\tingest/A.batch\t0",
            "attempt\tpy0-0\t2\t2",
            "acked\tpy0-0\t2\t2\t1\tingest/B.batch\t0",
            "done\tpy0-0",
        ],
    )
    _write(
        run / "producers" / "jvm0" / "inc-0.log",
        [
            "attempt\tjvm0-0\t0\t3",
            "durable\t2\tingest/C.batch\tjvm0-0-0",
            "durable\t3\tingest/D.batch\tjvm0-0-1",
            "durable\t3\tingest/D.batch\tjvm0-0-2",
            "produced 3 entries, 0 failed",
        ],
        tail="durable\t9\tingest/cut",
    )  # a line cut by SIGKILL: ignored
    _sink(
        run,
        0,
        [
            [0, 0, "py0-0-0", "ingest/A.batch"],
            [0, 1, "py0-0-1", "ingest/A.batch"],
            [1, 0, "py0-0-2", "ingest/B.batch"],
            [1, 1, "py0-0-3", "ingest/B.batch"],
        ],
    )
    _sink(
        run,
        1,
        [
            [2, 0, "jvm0-0-0", "ingest/C.batch"],
            [3, 0, "jvm0-0-1", "ingest/D.batch"],
            [3, 1, "jvm0-0-2", "ingest/D.batch"],
        ],
    )
    _write(run / "zombie.log", ["init\t1", "go\t2", "attempt\t0\tnext_batch\tfenced\town 1 current 2"])


def test_checker_passes_a_clean_run(tmp_path: pathlib.Path) -> None:
    _clean_run(tmp_path)
    r = checker.check(tmp_path)
    assert r["verdict"] == "PASS", r
    assert r["total"]["acked"] == 7 and r["total"]["delivered"] == 7
    assert all(r["total"][v] == 0 for v in checker.VIOLATIONS)  # every verdict, those of subscriptions too
    assert r["zombie"] == {**r["zombie"], "attempts": 1, "fenced": 1, "landed": 0}
    assert checker.main([str(tmp_path), "--quiet"]) == 0
    assert (tmp_path / "report.json").exists() and "PASS" in (tmp_path / "report.md").read_text()


def test_checker_finds_a_lost_a_duplicated_and_an_out_of_order_entry(tmp_path: pathlib.Path) -> None:
    _clean_run(tmp_path)
    # lost: py0-0-3 was acked at (1, 1) but batch 0 no longer delivers it.
    _sink(
        tmp_path,
        0,
        [[0, 0, "py0-0-0", "ingest/A.batch"], [0, 1, "py0-0-1", "ingest/A.batch"], [1, 0, "py0-0-2", "ingest/B.batch"]],
    )
    # out of order: jvm0-0-2 (produced after jvm0-0-1) is delivered before it in (sequence, index).
    # duplicated: jvm0-0-0 delivered again under another key by a later micro-batch.
    _sink(
        tmp_path,
        1,
        [
            [2, 0, "jvm0-0-0", "ingest/C.batch"],
            [3, 1, "jvm0-0-1", "ingest/D.batch"],
            [3, 0, "jvm0-0-2", "ingest/D.batch"],
        ],
    )
    _sink(tmp_path, 2, [[4, 0, "jvm0-0-0", "ingest/E.batch"], [5, 0, "py9-0-5", "ingest/E.batch"]])
    _write(tmp_path / "zombie.log", ["init\t1", "go\t2", "attempt\t0\tdequeue_through\tlanded\tthrough 3"])
    r = checker.check(tmp_path)
    t = r["total"]
    assert r["verdict"] == "FAIL"
    assert t["lost"] == 1 and r["examples"]["lost"] == ["py0-0-3"], r
    assert t["duplicated"] == 1 and r["examples"]["duplicated"][0]["value"] == "jvm0-0-0", r
    assert t["out_of_order"] == 1 and r["examples"]["out_of_order"][0]["value"] == "jvm0-0-2", r
    assert t["unexpected"] == 1 and r["examples"]["unexpected"] == ["py9-0-5"], r
    assert t["zombie_landed"] == 1
    assert checker.main([str(tmp_path), "--quiet"]) == 1


def test_checker_finds_misplaced_conflicting_and_redelivered_keys(tmp_path: pathlib.Path) -> None:
    _clean_run(tmp_path)
    _sink(
        tmp_path,
        0,
        [
            [0, 0, "py0-0-0", "ingest/A.batch"],
            [0, 1, "py0-0-1", "ingest/A.batch"],
            [1, 1, "py0-0-2", "ingest/B.batch"],
            [1, 0, "py0-0-3", "ingest/B.batch"],
        ],
    )
    _sink(tmp_path, 3, [[0, 0, "py0-0-0", "ingest/A.batch"], [3, 1, "other", "ingest/D.batch"]])
    r = checker.check(tmp_path)
    assert r["total"]["misplaced"] == 2, r  # py0-0-2 and -3 were acked at indices 0 and 1
    assert r["sink"]["keys_redelivered"] == 2 and r["sink"]["key_conflicts"] == 1, r
    assert r["verdict"] == "FAIL"


def test_checker_bounds_a_killed_queuetool_by_its_call_in_flight(tmp_path: pathlib.Path) -> None:
    # Killed after 2 synchronous calls of 10: values 20..29 were maybe in flight, 30.. never produced.
    _write(
        tmp_path / "producers" / "jvm1" / "inc-0.log",
        [
            "attempt\tjvm1-0\t0\t1000",
            "per-call\tjvm1-0\t10",
            *(f"durable\t{n // 10}\tingest/{n // 10}.batch\tjvm1-0-{n}" for n in range(20)),
        ],
    )
    rows = [[n // 10, n % 10, f"jvm1-0-{n}", f"ingest/{n // 10}.batch"] for n in range(30)]
    _sink(tmp_path, 0, rows)
    r = checker.check(tmp_path)
    assert r["producers"]["jvm1"]["attempted"] == 30 and r["producers"]["jvm1"]["unknown"] == 10, r
    assert r["verdict"] == "PASS", r
    _sink(tmp_path, 0, rows + [[3, 5, "jvm1-0-35", "ingest/3.batch"]])
    r = checker.check(tmp_path)
    assert r["total"]["unexpected"] == 1 and r["examples"]["unexpected"] == ["jvm1-0-35"], r


def _chaos_prerequisites() -> str | None:
    if shutil.which("java") is None:
        return "no java"
    try:
        import pyspark  # noqa: F401

        import osqueue

        osqueue.jar_path()
    except Exception as e:  # noqa: BLE001
        return f"no connector jar or pyspark: {e}"
    return None


@pytest.mark.skipif(_chaos_prerequisites() is not None, reason=str(_chaos_prerequisites()))
def test_short_chaos_run_is_exact(tmp_path: pathlib.Path) -> None:
    run = tmp_path / "chaos"
    argv = [
        sys.executable,
        "-m",
        "integration.chaos.run",
        "--entries",
        "20000",
        "--seed",
        "3",
        "--kills-producers",
        "2",
        "--kills-driver",
        "1",
        "--chunk",
        "100",
        "--produce-seconds",
        "70",
        "--error-rate",
        "0.08",
        "--cas-error-rate",
        "0.05",
        "--drop-reply-rate",
        "0.03",
        "--drop-reply-every",
        "20",
        "--max-minutes",
        "8",
        "--report-every",
        "15",
        "--out",
        str(run),
    ]
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
    elapsed = time.monotonic() - t0
    print(p.stdout[-6000:])
    assert (run / "report.json").exists(), f"no report (exit {p.returncode}): {p.stdout[-3000:]} {p.stderr[-3000:]}"
    r = json.loads((run / "report.json").read_text())
    t, f, z = r["total"], r["faults"], r["zombie"]
    print(f"short chaos run: {elapsed:.0f} s")
    # The verdicts.
    assert r["meta"]["drained"], "the query did not catch up with the manifest"
    for v in checker.VIOLATIONS:
        assert t[v] == 0, (v, r["examples"])
    assert r["epochs"]["consistent"], r["epochs"]
    assert p.returncode == 0, p.stdout[-3000:]
    # Not vacuous: everything was produced and delivered, and the chaos happened.
    assert t["acked"] + t["failed"] >= 20000 and t["delivered"] >= t["acked"] > 0.5 * 20000, t
    assert all(f["injected"][k] > 0 for k in ("503", "500", "reset", "stall", "drop_reply")), f
    assert f["injected_on_conditional_puts"].get("drop_reply", 0) > 0, f
    assert r["kills"].get("producer-jvm", 0) >= 1 and r["kills"].get("producer-py", 0) >= 1, r["kills"]
    assert r["kills"].get("driver", 0) >= 1 and r["driver_starts"] >= 2, r["kills"]
    assert z["attempts"] > 0 and z["fenced"] == z["attempts"] and z["landed"] == 0, z


def test_checker_reads_a_final_manifest_that_is_segmented(tmp_path: pathlib.Path) -> None:
    from integration.chaos.checker import _manifest_footer

    golden = REPO / "tests" / "golden"
    (tmp_path / "manifest-final.bin").write_bytes((golden / "head_v2.bin").read_bytes())
    assert _manifest_footer(tmp_path) == {"next_sequence": 17, "epoch": 5, "entries": 6, "first_sequence": 11}
    (tmp_path / "manifest-final.bin").write_bytes((golden / "manifest_after_dequeue.bin").read_bytes())
    v1 = _manifest_footer(tmp_path)
    assert v1 is not None and v1["entries"] == v1["next_sequence"] - v1["first_sequence"]


def _subscriptions_head(tmp_path: pathlib.Path, acked: dict[str, int]) -> bytes:
    """A real head (local store) with 4 sequences and subscriptions s0, s1 acknowledged through
    ``acked[name]`` (-1: nothing)."""
    import osqueue
    from osqueue.queue.subscriptions import Subscriptions
    from osqueue.store import open_store

    q = tmp_path / "q"
    q.mkdir(parents=True)
    store = open_store(str(q))
    for name in acked:
        Subscriptions(store, "ingest/manifest").create(name)
    with osqueue.Producer(store=store, flush_interval=3600) as p:
        for i in range(4):
            p.produce([f"x{i}".encode()])
            p.flush()
    for name, through in acked.items():
        with osqueue.Consumer(store=store, subscription=name, run_gc=False) as c:
            while through >= 0 and (b := c.next_batch()) is not None:
                c.ack(b.sequence)
                if b.sequence >= through:
                    break
    return (q / "ingest" / "manifest").read_bytes()


def _subscriptions_run(run: pathlib.Path, head: bytes, final_gc: dict | None) -> None:
    """The clean run's producers and sink, read by two subscriptions s0 and s1 (out/s0, out/s1)."""
    _clean_run(run)
    for name in ("s0", "s1"):
        shutil.copytree(run / "out", run / "out-copy" / name)
    shutil.rmtree(run / "out")
    (run / "out-copy").rename(run / "out")
    (run / "zombie.log").unlink()
    (run / "manifest-final.bin").write_bytes(head)
    meta = {"args": {"subscriptions": 2}, **({"final_gc": final_gc} if final_gc else {})}
    (run / "run.json").write_text(json.dumps(meta))


GC_CLEAN = {"deleted": 3, "failed": 0, "kept_referenced": 0, "kept_in_grace": 1, "kept_newer_than_oldest": 0,
            "grace_period_ms": 600000, "batch_files_left": 1}  # fmt: skip


def test_checker_checks_each_subscription_its_position_the_head_and_the_gc(tmp_path: pathlib.Path) -> None:
    caught_up = _subscriptions_head(tmp_path / "h1", {"s0": 3, "s1": 3})
    run = tmp_path / "run"
    _subscriptions_run(run, caught_up, GC_CLEAN)
    r = checker.check(run)
    assert r["verdict"] == "PASS", r
    subs = r["subscriptions"]
    assert subs["positions"] == {"s0": 4, "s1": 4} and subs["head_entries"] == 0
    assert {n: s["total"]["delivered"] for n, s in subs["per_subscription"].items()} == {"s0": 7, "s1": 7}
    assert r["total"]["delivered"] == 7 and r["sink"]["rows"] == 14 and "| s1 | 4 |" in checker.markdown(r)

    # s1's sink lost a micro-batch: s1 fails with exactly those entries lost, s0 still passes.
    (run / "out" / "s1" / "batch-1.jsonl").unlink()
    r = checker.check(run)
    assert r["verdict"] == "FAIL"
    per = r["subscriptions"]["per_subscription"]
    assert per["s0"]["verdict"] == "PASS" and per["s1"]["verdict"] == "FAIL"
    assert per["s1"]["total"]["lost"] == 3 and r["total"]["lost"] == 3

    # s1 stopped behind: its position, the entries the head still holds, and a GC that did not run.
    behind = _subscriptions_head(tmp_path / "h2", {"s0": 3, "s1": 1})
    run2 = tmp_path / "run2"
    _subscriptions_run(run2, behind, None)
    r = checker.check(run2)
    assert r["verdict"] == "FAIL"
    assert r["subscriptions"]["positions"] == {"s0": 4, "s1": 2}
    assert r["total"]["positions_behind"] == 1 and r["total"]["head_not_empty"] == 2
    assert r["total"]["gc_referenced"] == 1 and r["total"]["lost"] == 0
