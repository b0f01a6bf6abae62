"""Options and error conditions of the Python data source: the JVM connector's keys (case-insensitive),
defaults and ``[OSQUEUE_...]`` conditions (JVM: ``OsqueueOptions``, ``OsqueueExceptions``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from osqueue.durations import parse_duration
from osqueue.errors import InvalidConfigError, InvalidObjectKeyError
from osqueue.format.batch_codec import Compression
from osqueue.format.head_sections import valid_subscription_name
from osqueue.store.object_store import validate_key

try:  # pyspark >= 4.2: the Python data source API's admission control
    from pyspark.sql.streaming.datasource import ReadMaxFiles
except ImportError:  # older pyspark (or none: the options parse without Spark too)
    ReadMaxFiles = None

DEFAULT_MANIFEST_PATH = "ingest/manifest"
DEFAULT_DATA_PATH_PREFIX = "ingest"
DEFAULT_FLUSH_SIZE_BYTES = 64 << 20
DEFAULT_SEGMENT_ENTRIES = 2048
DEFAULT_GC_GRACE_PERIOD_S = 600.0
DEFAULT_MAX_TRIGGER_DELAY_S = 900.0
DEFAULT_GC_INTERVAL_S = 300.0

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


def admission_control_supported() -> bool:
    """Whether this process's pyspark offers the Python data source API's admission control (4.2 on):
    ``latestOffset(start, limit)``, ``getDefaultReadLimit`` and ``SupportsTriggerAvailableNow``. Checked
    where the source runs (the driver's Python worker; under Spark Connect, the server's)."""
    return ReadMaxFiles is not None


def subscription_name(options: Mapping[str, str]) -> str | None:
    """The ``subscription`` option: 1 to 128 characters of [A-Za-z0-9._-] (JVM: ``OsqueueOptions.subscription``)."""
    value = options.get("subscription")
    if value is None:
        return None
    name = value.strip()
    if not valid_subscription_name(name):
        raise invalid_option_value("subscription", name, "expected 1 to 128 characters of [A-Za-z0-9._-]")
    return name


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
    subscription: str | None = None  # start at its position (read only: nothing acked, nobody fenced)

    @staticmethod
    def parse(raw: Mapping[str, str]) -> BatchReadOptions:
        options = _lower(raw)
        check_known(options, "batch read")
        start = non_negative(options, "startingsequence")
        end = non_negative(options, "endingsequence")
        if start is not None and end is not None and end < start:
            raise OsqueueSparkError(
                "OSQUEUE_OPTIONS_OUT_OF_ORDER",
                f"endingSequence {end} is below startingSequence {start}: the window is [startingSequence, "
                "endingSequence).",
            )
        return BatchReadOptions(
            location(options), start, end, boolean(options, "failondataloss", True), subscription_name(options)
        )


@dataclass(frozen=True)
class StreamOptions:
    """A streaming read. ``checkpoint_location``: the query's checkpoint directory (a local path or
    ``file:`` URI), given as the source option ``checkpointLocation``: the Python data source API does
    not tell a source where its query's checkpoint is, and the source reads the commit log there when the
    query stops, to dequeue the last committed micro-batch (as the JVM source does). Without it that
    batch stays queued until the query's next run dequeues it.

    The micro-batch limits (``maxBatchesPerTrigger``, ``minBatchesPerTrigger``, ``maxTriggerDelay``) need
    the API's admission control (pyspark 4.2 on, :func:`admission_control_supported`); on older pyspark
    they are refused, never ignored."""

    location: QueueLocation
    fail_on_data_loss: bool
    checkpoint_location: str | None
    max_batches_per_trigger: int | None = None
    min_batches_per_trigger: int | None = None
    max_trigger_delay_s: float = DEFAULT_MAX_TRIGGER_DELAY_S
    subscription: str | None = None
    create_subscription: bool = False
    gc_enabled: bool = True  # the source's GC schedule (gc, gcInterval, gcGracePeriod), as the JVM source's
    gc_interval_s: float = DEFAULT_GC_INTERVAL_S
    gc_grace_period_s: float = DEFAULT_GC_GRACE_PERIOD_S

    @staticmethod
    def parse(raw: Mapping[str, str], admission_control: bool | None = None) -> StreamOptions:
        """``admission_control``: whether the pyspark running the source has it (None: this process's)."""
        options = _lower(raw)
        check_known(options, "source")
        max_batches = positive_int(options, "maxbatchespertrigger")
        min_batches = positive_int(options, "minbatchespertrigger")
        if min_batches is not None and max_batches is not None and min_batches > max_batches:
            raise OsqueueSparkError(
                "OSQUEUE_OPTIONS_OUT_OF_ORDER",
                f"option 'minBatchesPerTrigger' ({min_batches}) must not exceed 'maxBatchesPerTrigger' ({max_batches})",
            )
        if "maxtriggerdelay" in options and min_batches is None:
            raise OsqueueSparkError(
                "OSQUEUE_OPTION_NEEDS_OPTION",
                "option 'maxTriggerDelay' needs option 'minBatchesPerTrigger': it bounds how long a trigger waits "
                "for that many batches",
            )
        limits = sorted(k for k in ("maxbatchespertrigger", "minbatchespertrigger", "maxtriggerdelay") if k in options)
        supported = admission_control_supported() if admission_control is None else admission_control
        if limits and not supported:
            raise OsqueueSparkError(
                "OSQUEUE_INVALID_OPTION_VALUE",
                f"Invalid value '{options[limits[0]]}' for option '{limits[0]}': micro-batch limits need Spark's "
                "admission control, which the Python data source API offers from pyspark 4.2 on (this pyspark is "
                f"{_pyspark_version()}); leave it unset, upgrade pyspark, or use the JVM connector (format('osqueue')).",
            )
        delay = duration_s(options, "maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY_S)
        for key in ("pollinterval", "maxpollinterval"):  # the JVM source's polling: accepted, unused here
            duration_s(options, key, 1.0)
        subscription = subscription_name(options)
        create = boolean(options, "createsubscription", False) and subscription is not None  # as the JVM: else unused
        return StreamOptions(
            location(options),
            boolean(options, "failondataloss", True),
            options.get("checkpointlocation"),
            max_batches,
            min_batches,
            delay,
            subscription,
            create,
            boolean(options, "gc", True),
            duration_s(options, "gcinterval", DEFAULT_GC_INTERVAL_S),
            duration_s(options, "gcgraceperiod", DEFAULT_GC_GRACE_PERIOD_S),
        )


def _pyspark_version() -> str:
    try:
        from pyspark import __version__
    except ImportError:
        return "not installed"
    return str(__version__)


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
