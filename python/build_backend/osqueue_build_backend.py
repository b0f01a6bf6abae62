"""PEP 517 backend: setuptools, plus the Spark connector jars built by sbt and bundled in the wheel.

The wheel carries one relocated core per Scala version (the AWS SDK is most of its size) and one
thin connector per Spark line; `osqueue.jar_path()` joins the two a Spark needs. The jars are
rebuilt only when a JVM source or build file is newer than one of them. `OSQUEUE_JAR` names a
directory of prebuilt jars (the same names) to bundle instead (release pipelines, or machines
without a JDK).
"""

from __future__ import annotations

import os
import pathlib
import re
import runpy
import shutil
import subprocess

from setuptools import build_meta as _setuptools

ROOT = pathlib.Path(__file__).resolve().parents[2]
JAR_DIR = ROOT / "python" / "osqueue" / "jars"
# setuptools checks that the `osqueue.jars` package directory exists while it gathers build
# requirements, before build_wheel can build the jar: a fresh checkout has no such directory.
JAR_DIR.mkdir(parents=True, exist_ok=True)


def _version() -> str:
    text = (ROOT / "python" / "osqueue" / "_version.py").read_text()
    return re.search(r'__version__\s*=\s*"([^"]+)"', text).group(1)


def _newest_source_mtime() -> float:
    paths = [ROOT / "build.sbt", ROOT / "project" / "plugins.sbt", ROOT / "project" / "build.properties"]
    paths.append(ROOT / "python" / "osqueue" / "_spark_lines.py")
    paths.extend((ROOT / "project").glob("*.scala"))
    for base in (ROOT / "jvm" / "core" / "src" / "main", ROOT / "jvm" / "spark" / "src" / "main"):
        paths.extend(p for p in base.rglob("*") if p.is_file())
    return max(p.stat().st_mtime for p in paths if p.exists())


# (Spark line, Scala binary version), written once in python/osqueue/_spark_lines.py (build.sbt reads it too).
SPARK_LINES = runpy.run_path(str(ROOT / "python" / "osqueue" / "_spark_lines.py"))["SPARK_LINES"]
SBT_TASKS = ["core/assembly", "core_2_12/assembly", "spark/package"]


def built_jars(version: str) -> dict[str, pathlib.Path]:
    """Every jar the wheel bundles, by file name, at the path sbt builds it."""
    core_targets = {"2.13": ROOT / "jvm" / "core" / "target", "2.12": ROOT / "jvm" / "core" / "target" / "cross-2.12"}
    jars = {}
    for scala, target in core_targets.items():
        name = f"osqueue-core-assembly_{scala}-{version}.jar"
        jars[name] = target / f"scala-{scala}" / name
    for line, scala in SPARK_LINES:
        name = f"osqueue-spark-{line}_{scala}-{version}.jar"
        jars[name] = ROOT / "jvm" / "spark" / "target" / f"line-{line}-{scala}" / f"scala-{scala}" / name
    return jars


def ensure_jar() -> list[pathlib.Path]:
    wanted = built_jars(_version())
    prebuilt = os.environ.get("OSQUEUE_JAR")
    if prebuilt:
        source = pathlib.Path(prebuilt)
        if not source.is_dir():
            raise RuntimeError(f"OSQUEUE_JAR={prebuilt} is not a directory of prebuilt osqueue jars")
        built = {name: source / name for name in wanted}
        missing = [str(p) for p in built.values() if not p.is_file()]
        if missing:
            raise RuntimeError(f"OSQUEUE_JAR={prebuilt} lacks {', '.join(missing)}")
    else:
        built = wanted
        newest = _newest_source_mtime()
        if any(not p.exists() or p.stat().st_mtime < newest for p in built.values()):
            print(
                "osqueue: building the Spark connector jars with sbt (first build downloads sbt and dependencies)",
                flush=True,
            )
            subprocess.run(["bash", str(ROOT / ".ci" / "sbt"), *SBT_TASKS], cwd=ROOT, check=True)
    JAR_DIR.mkdir(parents=True, exist_ok=True)
    for old in JAR_DIR.glob("*.jar"):
        if old.name not in built:
            old.unlink()
    targets = []
    for name, path in built.items():
        target = JAR_DIR / name
        if not target.exists() or target.read_bytes() != path.read_bytes():
            shutil.copyfile(path, target)
        targets.append(target)
    return targets


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    ensure_jar()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    ensure_jar()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    return _setuptools.build_sdist(sdist_directory, config_settings)


get_requires_for_build_wheel = _setuptools.get_requires_for_build_wheel
get_requires_for_build_sdist = _setuptools.get_requires_for_build_sdist
get_requires_for_build_editable = _setuptools.get_requires_for_build_editable
prepare_metadata_for_build_wheel = _setuptools.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable
