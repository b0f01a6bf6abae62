"""The Scala 2.13 jars run in Spark 3.5's Scala 2.13.8 although they are compiled with a newer 2.13.

Scala 2.13's library is backward, not forward, binary compatible: a class compiled with 2.13.17
that calls a library member added since 2.13.8 fails in Spark 3.5 (Scala 2.13.8) with
NoSuchMethodError. `.ci/check_scala_library_refs.py` reads every constant pool of our 2.13 jars
and looks each `scala/...` reference up in scala-library 2.13.8 (README, "Spark lines").
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".ci"))

import check_scala_library_refs as check  # noqa: E402

SPARK35_SCALA_213 = "2.13.8"  # spark-parent 3.5.x's scala.version for its Scala 2.13 build
MAVEN_REPO = pathlib.Path(os.environ.get("OSQUEUE_MAVEN_REPO", pathlib.Path.home() / ".m2" / "repository"))


def scala_library(version: str) -> pathlib.Path:
    """scala-library `version` from the local Maven repository, fetched through Maven if missing."""
    jar = MAVEN_REPO / "org" / "scala-lang" / "scala-library" / version / f"scala-library-{version}.jar"
    if not jar.is_file():
        subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                f"-Dmaven.repo.local={MAVEN_REPO}",
                "dependency:get",
                f"-Dartifact=org.scala-lang:scala-library:{version}",
                "-Dtransitive=false",
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return jar


def our_213_jars() -> list[pathlib.Path]:
    version = re.search(
        r'__version__\s*=\s*"([^"]+)"', (ROOT / "python" / "osqueue" / "_version.py").read_text()
    ).group(1)
    jars = [ROOT / "jvm" / "core" / "target" / "scala-2.13" / f"osqueue-core-assembly_2.13-{version}.jar"]
    jars += sorted(
        (ROOT / "jvm" / "spark" / "target").glob(f"line-*-2.13/scala-2.13/osqueue-spark-*_2.13-{version}.jar")
    )
    if not all(j.is_file() for j in jars) or len(jars) < 5:
        message = "the 2.13 jars are not built: run `bash .ci/sbt spark/package core/assembly`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return jars


def test_the_scala_213_jars_use_only_what_spark_35s_scala_library_has(capsys):
    jars = our_213_jars()
    assert check.main(str(scala_library(SPARK35_SCALA_213)), [str(j) for j in jars]) == 0, capsys.readouterr().out
    assert " 0 missing" in capsys.readouterr().out


def test_the_check_finds_members_an_older_scala_library_lacks(capsys):
    """The check can fail: scala-library 2.13.17 itself uses members 2.13.8 does not have."""
    newer = scala_library("2.13.17")
    assert check.main(str(scala_library(SPARK35_SCALA_213)), [str(newer)], skip_own=False) == 1
    assert "class scala/collection/IndexedSeqSlidingIterator" in capsys.readouterr().out  # not in 2.13.8
