"""Spark's scratch space, and the ``jvm`` marker that splits the full run into two lanes.

Scratch: one directory per pytest session, removed when the session ends. Every Spark a test starts, in this process or in a child (pyspark, spark-submit, a stream job, the
chaos run's driver), inherits it. A driver killed with kill -9 cannot delete its own scratch
directories, and the tests kill many: in /tmp they would pile up run after run.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import pytest

_SAVED = pytest.StashKey[tuple[str, dict[str, str | None]]]()
_VARIABLES = ("SPARK_LOCAL_DIRS", "SPARK_SUBMIT_OPTS")


_ROOT = pathlib.Path(__file__).resolve().parent
# Tests that need the connector's jars (Spark, the JVM tools, the bench's JVM programs). The full run
# (tests/run_all.sh) builds the jars while every other test runs; a test elsewhere that needs them
# carries @pytest.mark.jvm itself.
_NEEDS_JARS = ("tests/spark/", "integration/", "tests/python/test_bench.py", "tests/azure/test_azure_spark.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.resolve().relative_to(_ROOT).as_posix().startswith(_NEEDS_JARS):
            item.add_marker(pytest.mark.jvm)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "jvm: needs the connector jars (built by sbt); run after them in the full run")
    scratch = tempfile.mkdtemp(prefix="osqueue-spark-")
    config.stash[_SAVED] = (scratch, {k: os.environ.get(k) for k in _VARIABLES})
    # Local dirs (block manager, user files, pyspark's): the environment wins over spark.local.dir.
    os.environ["SPARK_LOCAL_DIRS"] = scratch
    # The driver's own temp dirs (spark-*, a query's temporary checkpoint) follow java.io.tmpdir;
    # spark-submit, and so pyspark's launcher, passes SPARK_SUBMIT_OPTS to the driver JVM.
    opts = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [opts, f"-Djava.io.tmpdir={scratch}"]))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SAVED not in config.stash:
        return
    scratch, saved = config.stash[_SAVED]
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    shutil.rmtree(scratch, ignore_errors=True)
