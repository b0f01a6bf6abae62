"""Runs the JVM core's QueueTool (inside the bundled connector jar) from Python tests."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import osqueue


def classpath() -> str:
    import pyspark  # the jar leaves Scala, zstd-jni and slf4j to Spark: borrow pyspark's

    jars = pathlib.Path(pyspark.__file__).parent / "jars"
    # OSQUEUE_JVM_CORE_JAR: a core jar built in this checkout (`bash .ci/sbt core/assembly`) instead of the wheel's.
    return f"{os.environ.get('OSQUEUE_JVM_CORE_JAR') or osqueue.jar_path()}:{jars}/*"


def command(*args: str, store_options: dict | None = None) -> list[str]:
    java = shutil.which("java") or "java"
    opts = [x for k, v in (store_options or {}).items() for x in ("--opt", f"{k}={v}")]
    return [java, "-cp", classpath(), "osqueue.tools.QueueTool", *args, *opts]


def start(*args: str, store_options: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        command(*args, store_options=store_options), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def run(*args: str, store_options: dict | None = None, timeout: float = 300) -> str:
    p = subprocess.run(command(*args, store_options=store_options), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"QueueTool {args[0]} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout
