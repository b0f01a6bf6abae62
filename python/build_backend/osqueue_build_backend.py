"""PEP 517 backend: setuptools, plus the Spark connector jar built by sbt and bundled in the wheel.

The jar is rebuilt only when a JVM source or build file is newer than it. `OSQUEUE_JAR` names a
prebuilt jar to bundle instead (release pipelines, or machines without a JDK).
"""
from __future__ import annotations

import os
import pathlib
import re
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
    for base in (ROOT / "jvm" / "core" / "src" / "main", ROOT / "jvm" / "spark" / "src" / "main"):
        paths.extend(p for p in base.rglob("*") if p.is_file())
    return max(p.stat().st_mtime for p in paths if p.exists())


def ensure_jar() -> pathlib.Path:
    name = f"osqueue-spark_2.13-{_version()}.jar"
    prebuilt = os.environ.get("OSQUEUE_JAR")
    if prebuilt:
        built = pathlib.Path(prebuilt)
        if not built.is_file():
            raise RuntimeError(f"OSQUEUE_JAR={prebuilt} does not exist")
    else:
        built = ROOT / "jvm" / "spark" / "target" / "scala-2.13" / name
        if not built.exists() or built.stat().st_mtime < _newest_source_mtime():
            print(f"osqueue: building {name} with sbt (first build downloads sbt and dependencies)", flush=True)
            subprocess.run(["bash", str(ROOT / ".ci" / "sbt"), "spark/assembly"], cwd=ROOT, check=True)
    JAR_DIR.mkdir(parents=True, exist_ok=True)
    for old in JAR_DIR.glob("*.jar"):
        if old.name != name:
            old.unlink()
    target = JAR_DIR / name
    if not target.exists() or target.read_bytes() != built.read_bytes():
        shutil.copyfile(built, target)
    return target


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
