"""The Python data source (osqueue.spark_source) takes the JVM connector's option keys per mode, with
the same defaults, and raises only conditions the connector names (vocabulary.json). No Spark session."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

pytest.importorskip("pyarrow", reason="osqueue.spark_source needs pyarrow (osqueue[spark])")

from osqueue.spark_source import options as o  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
VOCABULARY = json.loads((REPO / "tests" / "golden" / "vocabulary.json").read_text())
SPARK_OPTIONS = {mode: keys for mode, keys in VOCABULARY["spark_options"].items() if mode != "about"}


@pytest.mark.parametrize("mode", sorted(SPARK_OPTIONS))
def test_each_mode_takes_the_connectors_keys(mode: str) -> None:
    assert o.MODE_KEYS[mode] | {"path"} == {k.lower() for k in SPARK_OPTIONS[mode]}


def test_defaults_are_the_connectors() -> None:
    sink = SPARK_OPTIONS["sink"]
    parsed = o.SinkOptions.parse({"path": "/q"})
    assert parsed.location.manifest_path == sink["manifestPath"]
    assert parsed.location.data_path_prefix == sink["dataPathPrefix"]
    assert parsed.flush_size_bytes == sink["flushSizeBytes"]
    assert parsed.manifest_segment_entries == sink["manifestSegmentEntries"]
    assert parsed.compression.name.lower() == sink["compression"]
    assert o.BatchReadOptions.parse({"path": "/q"}).fail_on_data_loss is SPARK_OPTIONS["batch read"]["failOnDataLoss"]


def test_every_condition_raised_is_one_the_connector_names() -> None:
    known = set(VOCABULARY["spark_errors"]["conditions"])
    source = "\n".join(p.read_text() for p in (REPO / "python" / "osqueue" / "spark_source").glob("*.py"))
    raised = set(re.findall(r'"(OSQUEUE_[A-Z_]+)"', source))
    assert raised and raised <= known, raised - known


@pytest.mark.parametrize(
    ("mode", "options", "condition", "names"),
    [
        ("batch read", {}, "OSQUEUE_MISSING_PATH", "path"),
        ("batch read", {"path": "/q", "gc": "true"}, "OSQUEUE_UNKNOWN_OPTION", "'gc'"),
        ("batch read", {"path": "/q", "startingSequence": "-1"}, "OSQUEUE_INVALID_OPTION_VALUE", "startingsequence"),
        (
            "batch read",
            {"path": "/q", "startingSequence": "5", "ENDINGSEQUENCE": "2"},
            "OSQUEUE_OPTIONS_OUT_OF_ORDER",
            "5",
        ),
        ("source", {"path": "/q", "gcInterval": "soon"}, "OSQUEUE_INVALID_OPTION_VALUE", "gcinterval"),
        ("source", {"path": "/q", "minBatchesPerTrigger": "2"}, "OSQUEUE_INVALID_OPTION_VALUE", "admission control"),
        ("source", {"path": "/q", "maxBatchesPerTrigger": "2"}, "OSQUEUE_INVALID_OPTION_VALUE", "maxbatchespertrigger"),
        ("source", {"path": "/q", "maxTriggerDelay": "1s"}, "OSQUEUE_OPTION_NEEDS_OPTION", "minBatchesPerTrigger"),
        (
            "source",
            {"path": "/q", "minBatchesPerTrigger": "3", "maxBatchesPerTrigger": "2"},
            "OSQUEUE_OPTIONS_OUT_OF_ORDER",
            "minBatchesPerTrigger",
        ),
        ("source", {"path": "/q", "subscription": "a b"}, "OSQUEUE_INVALID_OPTION_VALUE", "'subscription'"),
        ("batch read", {"path": "/q", "Subscription": "x" * 129}, "OSQUEUE_INVALID_OPTION_VALUE", "subscription"),
        ("sink", {"path": "/q", "writerBatchId": "3"}, "OSQUEUE_OPTION_NEEDS_OPTION", "writerId"),
        ("sink", {"path": "/q", "compression": "lz4"}, "OSQUEUE_INVALID_OPTION_VALUE", "compression"),
        ("sink", {"path": "hdfs://x/q"}, "OSQUEUE_INVALID_OPTION_VALUE", "path"),
    ],
)
def test_bad_options_raise_the_connectors_conditions(mode: str, options: dict, condition: str, names: str) -> None:
    parse = {
        "batch read": o.BatchReadOptions.parse,
        "source": lambda raw: o.StreamOptions.parse(raw, admission_control=False),  # pyspark < 4.2
        "sink": o.SinkOptions.parse,
    }
    with pytest.raises(o.OsqueueSparkError) as err:
        parse[mode](options)
    assert err.value.condition == condition
    assert str(err.value).startswith(f"[{condition}] ") and names in str(err.value)


def test_micro_batch_limits_and_subscriptions_parse_where_pyspark_has_admission_control() -> None:
    """pyspark 4.2+: the limits are taken (the same keys and defaults as the JVM source); a subscription
    is taken on every line, and createSubscription only counts with one (as on the JVM)."""
    parsed = o.StreamOptions.parse(
        {"path": "/q", "MaxBatchesPerTrigger": "5", "minBatchesPerTrigger": "2", "subscription": " audit "},
        admission_control=True,
    )
    assert (parsed.max_batches_per_trigger, parsed.min_batches_per_trigger) == (5, 2)
    assert parsed.max_trigger_delay_s == 15 * 60  # vocabulary.json: "15m"
    assert parsed.subscription == "audit" and parsed.create_subscription is False
    alone = o.StreamOptions.parse({"path": "/q", "createSubscription": "true"}, admission_control=False)
    assert alone.subscription is None and alone.create_subscription is False
    assert o.BatchReadOptions.parse({"path": "/q", "subscription": "audit"}).subscription == "audit"
    with pytest.raises(o.OsqueueSparkError, match=r"pyspark 4\.2"):
        o.StreamOptions.parse({"path": "/q", "maxBatchesPerTrigger": "5"}, admission_control=False)


def test_admission_control_is_detected_from_the_pyspark_that_runs_the_source() -> None:
    """4.2 added latestOffset(start, limit) and the read limits; 4.0 and 4.1 refuse the limit options."""
    pyspark = pytest.importorskip("pyspark")
    major_minor = tuple(int(p) for p in pyspark.__version__.split(".")[:2])
    assert o.admission_control_supported() is (major_minor >= (4, 2))
    if major_minor < (4, 2):
        with pytest.raises(o.OsqueueSparkError, match=r"OSQUEUE_INVALID_OPTION_VALUE.*pyspark 4\.2"):
            o.StreamOptions.parse({"path": "/q", "maxBatchesPerTrigger": "2"})
