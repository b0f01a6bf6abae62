"""The connector jar for each Spark line: the installed pyspark gets its own line's jar; a jar of
another line fails at once naming the artifact to use; a Spark newer than the newest line runs the
newest jar with one warning line. Runs in every pyspark of the matrix (tests/spark_lines.sh)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap
import warnings

import pyspark
import pytest

import osqueue
from osqueue import _jar
from osqueue._jar import installed_scala_version

from .support import produce_entries

SPARK = pyspark.__version__
LINE = ".".join(SPARK.split(".")[:2])
SCALA = ".".join((installed_scala_version() or _jar._default_scala(LINE)).split(".")[:2])
NEWER = _jar._line_key(LINE) > _jar._line_key(_jar.NEWEST_LINE)

READ = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[3])
    from support import spark_builder
    spark = spark_builder("osqueue-line-check").config("spark.jars", sys.argv[1]).getOrCreate()
    try:
        print("rows", spark.read.format("osqueue").load(sys.argv[2]).count(), flush=True)
    except Exception as e:  # noqa: BLE001 - the message is what the test checks
        lines = str(e).splitlines()
        print("failed", next((x for x in lines if "OSQUEUE_" in x), lines[0]), flush=True)
        sys.exit(3)
""")


def _read_in_a_new_session(jar: str, queue: pathlib.Path) -> subprocess.CompletedProcess:
    here = pathlib.Path(__file__).resolve().parent
    return subprocess.run(
        [sys.executable, "-c", READ, jar, str(queue), str(here)], capture_output=True, text=True, timeout=300
    )


def test_the_installed_pyspark_gets_the_jar_of_its_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jar = pathlib.Path(osqueue.jar_path())
    line = _jar.NEWEST_LINE if NEWER else LINE
    assert jar.name.startswith(f"osqueue-spark-{line}-assembly_{SCALA}-"), jar.name
    assert bool(caught) == NEWER, [str(w.message) for w in caught]
    assert osqueue.jar_path(SPARK) == str(jar)


def test_a_jar_of_another_line_fails_at_once_naming_the_artifact_to_use(tmp_path):
    produce_entries(str(tmp_path / "q"), batches=1, per_batch=2)
    other = ("4.1", "2.13") if LINE == "3.5" else ("3.5", "2.12")
    p = _read_in_a_new_session(osqueue.jar_path(*other), tmp_path / "q")
    assert p.returncode == 3, p.stdout + p.stderr[-3000:]
    (line,) = [x for x in p.stdout.splitlines() if x.startswith("failed")]
    assert "OSQUEUE_INCOMPATIBLE_SPARK" in line and f"loaded into Spark {SPARK}" in line, line
    wanted = _jar.NEWEST_LINE if NEWER else LINE
    assert f"io.github.osqueue:osqueue-spark-{wanted}_{SCALA}:{osqueue.__version__}" in line, line


@pytest.mark.skipif(not NEWER, reason=f"Spark {SPARK} is a line osqueue builds for")
def test_a_spark_newer_than_the_newest_line_runs_with_one_warning_line(tmp_path):
    produce_entries(str(tmp_path / "q"), batches=2, per_batch=3)
    p = _read_in_a_new_session(osqueue.jar_path(), tmp_path / "q")
    assert p.returncode == 0 and "rows 6" in p.stdout, p.stdout + p.stderr[-3000:]
    assert (p.stdout + p.stderr).count("OSQUEUE_UNTESTED_SPARK") == 1, p.stderr[-3000:]
