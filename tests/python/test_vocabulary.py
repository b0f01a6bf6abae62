"""The shared vocabulary (tests/golden/vocabulary.json): option defaults, error conditions, metric
names and the duration grammar, written once for both languages. The JVM reads the same file
(VocabularySuite, OsqueueOptionsVocabularySuite)."""

from __future__ import annotations

import inspect
import json
import pathlib
import re
from typing import Any

import pytest

from osqueue import consumer as consumer_module
from osqueue import errors, metrics, spark
from osqueue.consumer import Consumer
from osqueue.producer import Producer
from osqueue.queue import RetryPolicy
from osqueue.store import parse_duration

VOCABULARY = json.loads(
    (pathlib.Path(__file__).resolve().parents[1] / "golden" / "vocabulary.json").read_text(encoding="utf-8")
)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _seconds(duration: str) -> float:
    return parse_duration("vocabulary", duration)


@pytest.mark.parametrize("text,ms", VOCABULARY["durations"]["valid"])
def test_the_duration_grammar_accepts(text: str, ms: float) -> None:
    assert parse_duration("opt", text) == pytest.approx(ms / 1000)


@pytest.mark.parametrize("text", VOCABULARY["durations"]["invalid"])
def test_the_duration_grammar_refuses_with_the_option_named(text: str) -> None:
    with pytest.raises(errors.InvalidConfigError, match="'some.option'"):
        parse_duration("some.option", text)


def test_every_unit_of_the_grammar_is_accepted() -> None:
    for unit, ms in VOCABULARY["durations"]["units_ms"].items():
        assert parse_duration("opt", f"3{unit}") == pytest.approx(3 * ms / 1000), unit


def test_metric_names_are_the_shared_ones() -> None:
    python_names = {
        v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str) and v.startswith("buffer.")
    }
    assert python_names == set(VOCABULARY["metrics"])


def test_error_conditions_and_their_kinds_are_the_shared_ones() -> None:
    python_errors = {
        name.removesuffix("Error"): cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, errors.OsqueueError) and cls is not errors.OsqueueError
    }
    shared = {e["condition"]: e for e in VOCABULARY["errors"] if "jvm_only" not in e}
    assert set(python_errors) == set(shared)
    samples: dict[str, tuple[Any, ...]] = {
        "InvalidConfig": ("opt", "v", "hint"),
        "InvalidObjectKey": ("k", "why"),
        "CorruptManifest": ("k", "d"),
        "CorruptBatch": ("k", "d"),
        "UnsupportedFormatVersion": ("k", "manifest", 9),
        "BatchNotFound": ("k", 1),
        "Fenced": (1, 2),
        "ConflictRetriesExhausted": ("k", 3, 4),
        "ConditionalWritesNotHonoured": ("http://x", "d"),
    }
    for condition, cls in python_errors.items():
        error = cls(*samples.get(condition, ("message",)))
        assert error.kind.value == shared[condition]["kind"], condition


def _python_default(option: dict[str, Any], owner: Any) -> Any:
    if "python_constant" in option:
        return getattr(consumer_module, option["python_constant"])
    if owner is RetryPolicy:
        return getattr(RetryPolicy(), _snake(option["name"]))
    return inspect.signature(owner.__init__).parameters[_snake(option["name"])].default


def _expected(option: dict[str, Any]) -> Any:
    default = option.get("python_default", option["default"])
    if isinstance(default, str) and option["name"] not in ("manifestPath", "dataPathPrefix", "compression"):
        return pytest.approx(_seconds(default))  # durations: seconds in Python
    if option["name"] == "compression" and default == "none":
        return None  # Python's "no compression" is None
    return default


@pytest.mark.parametrize("option", VOCABULARY["options"], ids=lambda o: o["name"])
def test_option_defaults_are_the_shared_ones(option: dict[str, Any]) -> None:
    if "jvm_only" in option:
        pytest.skip(option["jvm_only"])
    owners = {"producer": Producer, "consumer": Consumer, "retry": RetryPolicy}
    for of in option["of"]:
        assert _python_default(option, owners[of]) == _expected(option), (option["name"], of)


@pytest.mark.parametrize(
    "mode,builder",
    [("source", spark.source_options), ("batch read", spark.batch_read_options), ("sink", spark.sink_options)],
)
def test_the_spark_wrapper_sets_exactly_the_connector_keys(mode: str, builder: Any) -> None:
    values: dict[str, Any] = {}
    for name, p in inspect.signature(builder).parameters.items():
        if name == "store_options":
            continue
        hint = str(p.annotation)
        values[name] = (
            True
            if "bool" in hint
            else 1
            if "int" in hint and "str" not in hint
            else "1s"
            if "Duration" in hint
            else "x"
        )
    keys = set(builder(**values))
    assert keys == set(VOCABULARY["spark_options"][mode]) - {"path"}
