"""What README.md tells Python users about handles and `pip install .` holds for the code."""

from __future__ import annotations

import concurrent.futures
import pathlib
import re

import pytest

from osqueue.producer import Producer, WriteHandle

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_names_the_handle_calls_that_exist() -> None:
    for name in ("wait_durable", "result", "try_result", "done", "add_done_callback"):
        assert f"`{name}(" in README, name
        assert callable(getattr(WriteHandle, name)), name
    assert "`concurrent.futures.Future`" in README and issubclass(WriteHandle, concurrent.futures.Future)


def test_result_blocks_and_try_result_does_not_as_the_readme_says(tmp_path: pathlib.Path) -> None:
    assert re.search(r"`result\(timeout\)` \*\*block\*\*", README)
    with Producer(str(tmp_path / "q"), flush_interval=3600) as producer:
        handle = producer.produce([b"x"])
        assert handle.try_result() is None
        with pytest.raises(concurrent.futures.TimeoutError):
            handle.result(timeout=0.05)
        producer.flush(timeout=30)
        assert handle.try_result() == handle.result(timeout=0) == handle.wait_durable(0)


def test_readme_names_what_pip_install_needs_and_the_build_reads_it() -> None:
    assert "JDK 17 and Maven" in README and "`OSQUEUE_JAR`" in README
    backend = (ROOT / "python" / "build_backend" / "osqueue_build_backend.py").read_text()
    assert 'os.environ.get("OSQUEUE_JAR")' in backend and '.ci" / "sbt"' in backend


def test_readme_names_only_commands_the_cli_has() -> None:
    from osqueue.cli import cli

    named = set(re.findall(r"`osqueue ([a-z-]+)", README))
    assert named, "no `osqueue <command>` found: the pattern is broken"
    assert named <= set(cli.commands), sorted(named - set(cli.commands))


def test_readme_recipes_use_no_py4j_so_they_run_under_spark_connect() -> None:
    code = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", README, flags=re.S))
    assert "spark.readStream" in code, "no code block found: the pattern is broken"
    for private in ("._jvm", "._jwrite", "._jdf", "._jsc", "sparkContext._"):
        assert private not in code, private


def test_readme_says_where_it_runs() -> None:
    section = README.split("## Where it runs", 1)[1].split("\n## ", 1)[0]
    for place in (
        "classic PySpark",
        "Spark Connect",
        "Databricks, dedicated",
        "standard (shared)",
        "serverless",
        "EMR",
        "Dataproc",
    ):
        assert place in section, place
    assert "tests/spark/test_connect.py" in section and (ROOT / "tests" / "spark" / "test_connect.py").is_file()
