"""What importing the Python data source loads (issue 27). Spark starts several Python processes per
query (the data source's creation, the stream runner, the read planner, the write and commit workers,
the task workers); each one unpickles the data source and so imports ``osqueue.spark_source``. Only
what it uses may load with it: not the producer, the consumer or the jar helpers (the top-level
``osqueue`` loads its user API at first use), nor a cloud SDK or the command line's libraries. Checked
in a fresh interpreter through ``sys.modules``, not by timing."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

PYTHON = pathlib.Path(__file__).resolve().parents[2] / "python"

NOT_AT_IMPORT = (
    "osqueue.producer",
    "osqueue.consumer",
    "osqueue._jar",
    "osqueue.cli",
    "osqueue.spark",
    "boto3",
    "botocore",
    "azure",
    "google",
    "requests",
    "zstandard",
    "rich",
    "click",
    "pandas",
)


def loaded_by(statement: str) -> set[str]:
    """The modules that running ``statement`` in a fresh interpreter loads."""
    code = f"import sys, json\nbefore = set(sys.modules)\n{statement}\nprint(json.dumps(sorted(set(sys.modules) - before)))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(PYTHON), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def heavy(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in NOT_AT_IMPORT))


def test_importing_the_data_source_loads_no_producer_consumer_sdk_or_cli() -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    loaded = loaded_by("import osqueue.spark_source.data_source")
    assert "osqueue.spark_source.reader" in loaded and "osqueue.spark_source.writer" in loaded
    assert heavy(loaded) == []


def test_importing_osqueue_loads_its_user_api_at_first_use() -> None:
    assert heavy(loaded_by("import osqueue")) == []
    loaded = loaded_by("import osqueue\nosqueue.Producer\nosqueue.Consumer\nosqueue.jar_path")
    assert {"osqueue.producer", "osqueue.consumer", "osqueue._jar"} <= loaded


def test_the_lazy_names_are_the_defining_modules_names() -> None:
    import importlib

    import osqueue

    for name, module in osqueue.LAZY_NAMES.items():
        assert getattr(osqueue, name) is getattr(importlib.import_module(module), name), name
    assert set(osqueue.LAZY_NAMES) == set(osqueue.__all__) - {"__version__"}
    assert set(dir(osqueue)) >= set(osqueue.__all__)
    assert osqueue.errors.FencedError is osqueue.FencedError  # a subpackage the old eager imports exposed
    with pytest.raises(AttributeError, match="no_such_name"):
        osqueue.no_such_name  # noqa: B018
