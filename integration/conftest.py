"""Integration tests need the project venv (pyspark for the JVM's runtime jars) and the installed wheel."""

import pathlib
import sys

import pytest

pytest.importorskip("pyspark", reason="integration tests run in the project venv (tests/run_all.sh)")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "s3"))
