"""Cooperative commit across languages (docs/adr/0007 part 1): 4 Python and 4 JVM producer processes
in ``commit_mode="cooperative"`` on one local-store queue, one of them killed with -9 mid-write and
replaced. Every call that returned durable is in the queue exactly once at the sequence it returned,
each producer's calls in order, each (writer, batch) once (integration/chaos/coop_chaos.py checks)."""

from __future__ import annotations

import pathlib

from .chaos import coop_chaos


def test_python_and_jvm_cooperative_producers_land_every_call_once(tmp_path: pathlib.Path) -> None:
    report = coop_chaos.run(tmp_path / "queue", py=4, jvm=4, calls=15, kills=1, seed=3, deadline_s=120)
    assert report["processes"] == 9 and report["killed"] == 1
    assert report["duplicates"] == 0 and report["missing"] == 0
    # Both languages' writers are in the one writers section (9 writer ids: one per process).
    assert report["writers"] == 9, report
