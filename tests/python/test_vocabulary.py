"""The shared vocabulary (tests/golden/vocabulary.json): option defaults, error conditions, metric
names and the duration grammar, written once for both languages. The JVM reads the same file
(VocabularySuite, OsqueueOptionsVocabularySuite)."""

from __future__ import annotations

import inspect
import json
import pathlib
import re
import typing
from collections.abc import Mapping
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
        "WriterFenced": ("w", 1, 2),
        "ConflictRetriesExhausted": ("k", 3, 4),
        "ConditionalWritesNotHonoured": ("http://x", "d"),
        "CorruptSpool": ("p", 1, "d"),
        "DataLoss": ("s", 1, 2),
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
    words = ("manifestPath", "dataPathPrefix", "compression", "durability", "spoolFullPolicy", "commitMode")
    if isinstance(default, str) and option["name"] not in words:
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


SPARK_MODES = [mode for mode in VOCABULARY["spark_options"] if mode != "about"]
_SAMPLES: dict[Any, Any] = {bool: True, int: 1, spark.Duration: "1s", str: "x", Mapping[str, Any]: {}}


def _every_option(table: Any) -> dict[str, Any]:
    """A value for every option of a wrapper table (its type's sample)."""
    return {name: _SAMPLES[hint] for name, hint in typing.get_type_hints(table).items()}


def _connector_keys(mode: str) -> set[str]:
    return set(VOCABULARY["spark_options"][mode]) - {"path"}


def test_every_mode_of_the_connector_has_a_wrapper_table() -> None:
    assert set(spark.OPTION_TABLES) == set(SPARK_MODES)


@pytest.mark.parametrize("mode", SPARK_MODES)
def test_the_wrapper_table_of_a_mode_has_exactly_the_connector_keys(mode: str) -> None:
    table = spark.OPTION_TABLES[mode]
    names = set(typing.get_type_hints(table)) - {"store_options"}
    assert {spark.connector_key(n) for n in names} == _connector_keys(mode)
    tables = [t for t in vars(spark).values() if isinstance(t, type) and typing.is_typeddict(t)]
    docs = "".join(inspect.getdoc(t) or "" for t in tables)
    for name in names:  # each option is documented with the tables
        assert f"``{name}``" in docs, name


class _Recorder:
    """Stands for a SparkSession / DataFrame: records the options set on it."""

    def __init__(self) -> None:
        self.options: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:
        if name in ("readStream", "read", "writeStream"):
            return self
        if name == "option":
            return lambda key, value: self.options.__setitem__(key, value) or self
        return lambda *args, **kwargs: self


@pytest.mark.parametrize(
    "mode,builder",
    [("source", spark.source_options), ("batch read", spark.batch_read_options), ("sink", spark.sink_options)],
)
def test_the_option_builders_set_every_connector_key_of_their_mode(mode: str, builder: Any) -> None:
    assert set(builder(**_every_option(spark.OPTION_TABLES[mode]))) == _connector_keys(mode)


def test_the_dataframe_helpers_take_every_connector_key_of_their_mode() -> None:
    session = _Recorder()
    spark.read_stream(session, "/q", **_every_option(spark.SourceOptions))  # type: ignore[arg-type]
    assert set(session.options) == _connector_keys("source")
    session = _Recorder()
    spark.read(session, "/q", **_every_option(spark.BatchReadOptions))  # type: ignore[arg-type]
    assert set(session.options) == _connector_keys("batch read")
    df = _Recorder()
    spark.write_stream(df, "/q", checkpoint_location="/c", **_every_option(spark.StreamSinkOptions))  # type: ignore[arg-type]
    # writerBatchId belongs to df.write with a writer id; on a stream the connector refuses it.
    assert set(df.options) == _connector_keys("sink") - {"writerBatchId"} | {"path", "checkpointLocation"}


def test_a_helper_refuses_an_option_of_another_mode_naming_it() -> None:
    with pytest.raises(TypeError, match="'starting_sequence'"):
        spark.read_stream(_Recorder(), "/q", starting_sequence=1)  # type: ignore[arg-type, call-arg]
    with pytest.raises(TypeError, match="'writer_batch_id'"):
        spark.write_stream(_Recorder(), "/q", checkpoint_location="/c", writer_batch_id=1)  # type: ignore[arg-type, call-arg]
