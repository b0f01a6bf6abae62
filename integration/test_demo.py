"""README's main job, in its short configuration: it must end with exact counts."""
import pathlib
import subprocess
import sys


def test_demo_counts_are_exact_across_a_crash(tmp_path):
    demo = pathlib.Path(__file__).resolve().parent / "demo.py"
    p = subprocess.run([sys.executable, str(demo), "--short", "--workdir", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "simulating a crash" in p.stdout
    assert "exact: every event counted exactly once" in p.stdout
