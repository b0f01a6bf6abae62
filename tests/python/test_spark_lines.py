"""The Spark lines are written once, in python/osqueue/_spark_lines.py (build.sbt, the wheel's build
backend and osqueue._jar read it). What cannot read it names the lines again, and is checked here: the
sbt projects in build.sbt, the pyspark of each line in the test matrix (.ci/pyspark-lines.env, plus
the project venv's pyspark in pyproject.toml) and README's table of Maven coordinates."""

from __future__ import annotations

import pathlib
import re
import runpy

from osqueue import _jar
from osqueue._spark_lines import SPARK_LINES

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _line(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_the_jar_finder_and_the_build_backend_read_the_one_list() -> None:
    backend = runpy.run_path(str(ROOT / "python" / "build_backend" / "osqueue_build_backend.py"))
    assert backend["SPARK_LINES"] == SPARK_LINES
    assert _jar.SPARK_LINES is SPARK_LINES
    assert list(SPARK_LINES) == sorted(SPARK_LINES, key=lambda ls: (_line(ls[0]), ls[1])), "oldest first"
    assert len(set(SPARK_LINES)) == len(SPARK_LINES)


def test_build_sbt_has_one_project_per_line_in_order() -> None:
    build = (ROOT / "build.sbt").read_text(encoding="utf-8")
    projects = re.findall(r"^lazy val (\w+) = sparkLineProject\((\w+)", build, re.M)
    # SparkLine.id: spark<line without dots>_<scala binary without dots>
    wanted = [f"spark{line.replace('.', '')}_{scala.replace('.', '')}" for line, scala in SPARK_LINES]
    assert [name for name, _ in projects] == wanted
    aggregated = re.search(r"^lazy val lineProjects = Seq\[ProjectReference\]\((.*)\)$", build, re.M)
    assert aggregated is not None and aggregated.group(1).split(", ") == wanted


def test_every_line_has_a_pyspark_in_the_test_matrix() -> None:
    env = (ROOT / ".ci" / "pyspark-lines.env").read_text(encoding="utf-8")
    matrix = re.findall(r'^PYSPARK_LINE_VERSIONS="([^"]*)"', env, re.M)[0].split()
    # The project venv's pyspark (pyproject.toml's `spark` extra) runs the full suite.
    project_venv = re.findall(r'^spark = \["pyspark==([\d.]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[0]
    tested = {_line(v) for v in [*matrix, project_venv]}
    built = {_line(line) for line, _ in SPARK_LINES}
    assert built - tested == set(), "a line whose connector no pyspark runs"
    newest = max(built)
    assert {v for v in tested - built if v < newest} == set(), "a pyspark of a line that is no longer built"
    assert _line(matrix[-1]) > newest, "the last pyspark of the matrix is newer than every line (it runs the newest)"


def test_readme_lists_every_line_and_no_other() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`io\.github\.osqueue:osqueue-spark-(\d+\.\d+)_(2\.1\d):", readme))
    assert listed == set(SPARK_LINES)
