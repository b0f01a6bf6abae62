"""Options and error conditions of the Python data source: the JVM connector's keys (case-insensitive),
defaults and ``[OSQUEUE_...]`` conditions (JVM: ``OsqueueOptions``, ``OsqueueExceptions``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from osqueue.durations import parse_duration
from osqueue.errors import InvalidConfigError, InvalidObjectKeyError
from osqueue.format.batch_codec import Compression
from osqueue.store.object_store import validate_key

DEFAULT_MANIFEST_PATH = "ingest/manifest"
DEFAULT_DATA_PATH_PREFIX = "ingest"
DEFAULT_FLUSH_SIZE_BYTES = 64 << 20
DEFAULT_SEGMENT_ENTRIES = 2048
DEFAULT_GC_GRACE_PERIOD_S = 600.0

STORE_OPTION_PREFIXES = ("fs.s3a.", "fs.azure.", "fs.gs.")
# Keys Spark itself passes along with the user's options; checkpointLocation is also the source's
# way to find the query's commit log (see StreamOptions).
SPARK_KEYS = frozenset({"path", "paths", "checkpointlocation", "queryname"})
SOURCE_KEYS = frozenset(
    {
        "manifestpath",
        "datapathprefix",
        "maxbatchespertrigger",
        "minbatchespertrigger",
        "maxtriggerdelay",
        "failondataloss",
        "gc",
        "gcinterval",
        "gcgraceperiod",
        "pollinterval",
        "maxpollinterval",
        "subscription",
        "createsubscription",
    }
)
BATCH_READ_KEYS = frozenset(
    {"manifestpath", "datapathprefix", "startingsequence", "endingsequence", "failondataloss", "subscription"}
)
SINK_KEYS = frozenset(
    {
        "manifestpath",
        "datapathprefix",
        "compression",
        "flushsizebytes",
        "writerid",
        "writerbatchid",
        "gcgraceperiod",
        "manifestsegmententries",
    }
)
MODE_KEYS: Mapping[str, frozenset[str]] = {"source": SOURCE_KEYS, "batch read": BATCH_READ_KEYS, "sink": SINK_KEYS}
KNOWN_SCHEMES = frozenset({"file", "s3", "s3a", "memory", "gs", "abfss", "wasbs"})


class OsqueueSparkError(Exception):
    """An ``[OSQUEUE_...]`` condition of the connector, raised by the Python data source. Spark shows
    its message (``[CONDITION] text``) in the query's exception, as it shows the JVM connector's.

    Attributes:
        condition: The condition name (vocabulary.json ``spark_errors``).
    """

    def __init__(self, condition: str, message: str) -> None:
        super().__init__(f"[{condition}] {message}")
        self.condition = condition


def invalid_option_value(key: str, value: object, hint: str) -> OsqueueSparkError:
    return OsqueueSparkError("OSQUEUE_INVALID_OPTION_VALUE", f"Invalid value '{value}' for option '{key}': {hint}.")


def refuse_subscriptions(options: Mapping[str, str]) -> None:
    """Named subscriptions (docs/adr/0005) are read by the JVM connector and the native client; this
    source reads as the RFC's one consumer, so a subscription it was asked for is refused, not ignored."""
    for key in ("subscription", "createsubscription"):
        if key in options:
            raise invalid_option_value(
                key,
                options[key],
                "the Python data source does not read named subscriptions yet; leave it unset, or use the JVM "
                "connector (format('osqueue')) or osqueue.Consumer(path, subscription=...)",
            )


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


@dataclass(frozen=True)
class QueueLocation:
    """Where a queue lives: its root URI, manifest key, data prefix and store settings (JVM: ``QueueLocation``)."""

    uri: str
    manifest_path: str
    data_path_prefix: str
    store_options: Mapping[str, str] = field(default_factory=dict)

    @property
    def identity(self) -> str:
        """Names the queue in offsets and messages: the store URI and the manifest key."""
        return f"{self.uri.rstrip('/')}/{self.manifest_path}"


def _key(name: str, value: str) -> str:
    try:
        return validate_key(value)
    except InvalidObjectKeyError as e:
        raise invalid_option_value(name, value, str(e)) from None


def check_known(options: Mapping[str, str], mode: str) -> None:
    """Raises OSQUEUE_UNKNOWN_OPTION for a key of no mode (``any``) or not of ``mode``."""
    known = (SOURCE_KEYS | BATCH_READ_KEYS | SINK_KEYS) if mode == "any" else MODE_KEYS[mode]
    for key in sorted(options):
        if key in known or key in SPARK_KEYS or key.startswith(STORE_OPTION_PREFIXES):
            continue
        if key.startswith("spark.hadoop.") and key[len("spark.hadoop.") :].startswith(STORE_OPTION_PREFIXES):
            continue
        raise OsqueueSparkError(
            "OSQUEUE_UNKNOWN_OPTION",
            f"Unknown option '{key}' for the osqueue {mode}. Known options: {', '.join(sorted(known | {'path'}))}.",
        )


def location(options: Mapping[str, str]) -> QueueLocation:
    """The queue location of lower-cased ``options`` (OSQUEUE_MISSING_PATH without a path)."""
    uri = options.get("path", "").strip()
    if not uri:
        raise OsqueueSparkError(
            "OSQUEUE_MISSING_PATH", "No queue path: pass it to load()/save() or as the option 'path'."
        )
    scheme = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*):", uri)
    if scheme and scheme.group(1).lower() not in KNOWN_SCHEMES:
        raise invalid_option_value(
            "path", uri, "expected an absolute local path, file:/..., s3://bucket/prefix, s3a://bucket/prefix"
        )
    manifest = _key("manifestpath", options.get("manifestpath", DEFAULT_MANIFEST_PATH).strip())
    prefix = options.get("datapathprefix", DEFAULT_DATA_PATH_PREFIX).strip().rstrip("/")
    if prefix:
        _key("datapathprefix", prefix)
    store = {
        k.removeprefix("spark.hadoop."): v
        for k, v in options.items()
        if k.startswith(STORE_OPTION_PREFIXES) or k.removeprefix("spark.hadoop.").startswith(STORE_OPTION_PREFIXES)
    }
    return QueueLocation(uri, manifest, prefix, store)


def _int(options: Mapping[str, str], key: str, minimum: int, expected: str) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    try:
        parsed = int(value.strip())
    except ValueError:
        parsed = minimum - 1
    if parsed < minimum:
        raise invalid_option_value(key, value, expected)
    return parsed


def positive_int(options: Mapping[str, str], key: str) -> int | None:
    return _int(options, key, 1, "expected a positive integer")


def non_negative(options: Mapping[str, str], key: str) -> int | None:
    return _int(options, key, 0, "expected an integer >= 0")


def boolean(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise invalid_option_value(key, value, "expected true or false")


def duration_s(options: Mapping[str, str], key: str, default: float) -> float:
    value = options.get(key)
    if value is None:
        return default
    try:
        seconds = parse_duration(key, value.strip())
    except InvalidConfigError as e:
        raise invalid_option_value(key, value, str(e)) from None
    if seconds <= 0:
        raise invalid_option_value(key, value, "must be > 0")
    return seconds


@dataclass(frozen=True)
class BatchReadOptions:
    """A batch read: ``[startingSequence, endingSequence)`` of the queue, acknowledging nothing."""

    location: QueueLocation
    starting_sequence: int | None
    ending_sequence: int | None
    fail_on_data_loss: bool

    @staticmethod
    def parse(raw: Mapping[str, str]) -> BatchReadOptions:
        options = _lower(raw)
        check_known(options, "batch read")
        refuse_subscriptions(options)
        start = non_negative(options, "startingsequence")
        end = non_negative(options, "endingsequence")
        if start is not None and end is not None and end < start:
            raise OsqueueSparkError(
                "OSQUEUE_OPTIONS_OUT_OF_ORDER",
                f"endingSequence {end} is below startingSequence {start}: the window is [startingSequence, "
                "endingSequence).",
            )
        return BatchReadOptions(location(options), start, end, boolean(options, "failondataloss", True))


@dataclass(frozen=True)
class StreamOptions:
    """A streaming read. ``checkpoint_location``: the query's checkpoint directory (a local path or
    ``file:`` URI), given as the source option ``checkpointLocation``: the Python data source API does
    not tell a source where its query's checkpoint is, and the source reads the commit log there when the
    query stops, to dequeue the last committed micro-batch (as the JVM source does). Without it that
    batch stays queued until the query's next run dequeues it."""

    location: QueueLocation
    fail_on_data_loss: bool
    checkpoint_location: str | None

    @staticmethod
    def parse(raw: Mapping[str, str]) -> StreamOptions:
        options = _lower(raw)
        check_known(options, "source")
        refuse_subscriptions(options)
        positive_int(options, "maxbatchespertrigger")
        positive_int(options, "minbatchespertrigger")
        limits = sorted(k for k in ("maxbatchespertrigger", "minbatchespertrigger", "maxtriggerdelay") if k in options)
        if limits:
            raise OsqueueSparkError(
                "OSQUEUE_INVALID_OPTION_VALUE",
                f"Invalid value '{options[limits[0]]}' for option '{limits[0]}': micro-batch limits need Spark's "
                "admission control, which the Python data source API offers from pyspark 4.2 on and this source "
                "does not use yet; leave it unset, or use the JVM connector (format('osqueue')).",
            )
        for key in ("gcinterval", "gcgraceperiod", "pollinterval", "maxpollinterval"):
            duration_s(options, key, 1.0)
        boolean(options, "gc", True)
        return StreamOptions(
            location(options),
            boolean(options, "failondataloss", True),
            options.get("checkpointlocation"),
        )


@dataclass(frozen=True)
class SinkOptions:
    """A write. ``writer_id`` identifies the writer whose committed batch ids make appends
    idempotent (the Python data source API gives a sink no query id): required for streaming writes."""

    location: QueueLocation
    compression: Compression
    flush_size_bytes: int
    writer_id: str | None
    writer_batch_id: int | None
    gc_grace_period_s: float
    manifest_segment_entries: int

    @staticmethod
    def parse(raw: Mapping[str, str]) -> SinkOptions:
        options = _lower(raw)
        check_known(options, "sink")
        writer_id = options.get("writerid")
        if writer_id is not None and not writer_id.strip():
            raise invalid_option_value("writerId", "", "expected a non-empty id")
        writer_batch_id = non_negative(options, "writerbatchid")
        if writer_batch_id is not None and writer_id is None:
            raise OsqueueSparkError(
                "OSQUEUE_OPTION_NEEDS_OPTION", "Option 'writerBatchId' needs the option 'writerId' as well."
            )
        name = options.get("compression", "none").strip().lower()
        compressions = {"none": Compression.NONE, "zstd": Compression.ZSTD}
        if name not in compressions:
            raise invalid_option_value("compression", options["compression"], "expected none or zstd")
        return SinkOptions(
            location(options),
            compressions[name],
            _int(options, "flushsizebytes", 1, "expected a positive integer") or DEFAULT_FLUSH_SIZE_BYTES,
            None if writer_id is None else writer_id.strip(),
            writer_batch_id,
            duration_s(options, "gcgraceperiod", DEFAULT_GC_GRACE_PERIOD_S),
            positive_int(options, "manifestsegmententries") or DEFAULT_SEGMENT_ENTRIES,
        )
