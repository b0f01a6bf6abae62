"""README's main job, run as README says (`bash integration/demo.sh`), in its short configuration:
the crash must land mid-stream and the counts must be exact at the end."""

import os
import pathlib
import re
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_demo_command_counts_exactly_across_a_mid_stream_crash(tmp_path):
    # demo.sh sets up (only checks stamps once CI's setup ran), reinstalls the wheel, runs demo.py.
    p = subprocess.run(
        ["bash", str(REPO / "integration" / "demo.sh"), "--short", "--workdir", str(tmp_path / "demo")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ),
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "simulating a crash" in p.stdout
    at_kill = re.search(
        r"at the kill: query (\w+), (\d+) micro-batches committed \((\d+) of (\d+) events counted\), "
        r"(\d+) of (\d+) producers not finished",
        p.stdout,
    )
    assert at_kill, p.stdout
    state, committed, counted, total = at_kill.group(1), *map(int, at_kill.group(2, 3, 4))
    assert state == "running"
    assert committed >= 1, "the restart would not resume from a checkpoint"
    assert counted < total, "nothing was left to count after the crash"
    assert "exact: every event counted exactly once" in p.stdout
    assert "queue after the drain (osqueue inspect --json): 0 entries queued" in p.stdout
    assert (tmp_path / "demo" / "queue" / "ingest" / "manifest").exists()
