"""PySpark helpers for the osqueue connector (``format("osqueue")``).

* :func:`configure_spark_with_osqueue` puts the connector jar for the installed PySpark (one per
  Spark line, bundled in this package) on a ``SparkSession.Builder``, like delta's
  ``configure_spark_with_delta_pip``.
* :func:`read_stream`, :func:`read` and :func:`write_stream` are typed spellings of the
  connector's options. They emit ordinary DataFrame API calls only
  (``spark.readStream.format("osqueue").option(...).load(path)``), so they need no py4j access
  of their own.

Source rows have the schema ``value binary, sequence long, index int, location string,
ingestionTime timestamp, metadata binary``.
"""

from __future__ import annotations

import datetime
import importlib
import os
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from osqueue._jar import (
    connector_for,
    installed_connect_server,
    installed_hadoop_version,
    installed_scala_version,
    installed_spark_version,
    jar_path,
)
from osqueue._spark_lines import SPARK_LINES
from osqueue._version import __version__

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter
    from typing_extensions import Unpack

__all__ = [
    "jar_path",
    "register",
    "configure_spark_with_osqueue",
    "read_stream",
    "read",
    "write_stream",
    "trigger_real_time",
    "connect_url",
    "source_options",
    "batch_read_options",
    "sink_options",
    "SourceOptions",
    "BatchReadOptions",
    "StreamSinkOptions",
    "SinkOptions",
    "SUPPORTED_SPARK_LINES",
    "SOURCE_SCHEMA",
]

SUPPORTED_SPARK_LINES = SPARK_LINES
"""Every ``(Spark line, Scala binary version)`` a connector jar is bundled for; a Spark newer than
the newest line runs that line's jar with a warning."""

SOURCE_SCHEMA = "value binary, sequence bigint, index int, location string, ingestionTime timestamp, metadata binary"
"""The fixed schema of rows read from a queue (DDL)."""

FORMAT = "osqueue"

Duration = int | float | str | datetime.timedelta
"""Seconds as a number, a ``timedelta``, or a string Spark understands (``"500ms"``, ``"30s"``,
``"5m"``, ``"1h"``)."""


# ---------------------------------------------------------------------------------------------
# What is installed


STORE_ARTIFACTS: Mapping[str, str] = {"azure": "osqueue-azure", "gcs": "osqueue-gcs"}
"""Stores whose JVM side lives in an artifact of its own (its cloud SDK relocated inside, no
dependencies), added by ``configure_spark_with_osqueue(stores=[...])``: store -> artifact (the Scala
binary version is appended)."""
MAVEN_GROUP = "io.github.osqueue"


def _store_packages(stores: Sequence[str]) -> list[str]:
    """Maven coordinates of the store artifacts for the installed PySpark's Scala."""
    if isinstance(stores, str):
        raise TypeError("stores must be a list of store names such as ['gcs'] or ['azure'], not a single string")

    unknown = [s for s in stores if s not in STORE_ARTIFACTS]
    if unknown:
        raise ValueError(f"unknown store {unknown[0]!r} in stores; known: {', '.join(sorted(STORE_ARTIFACTS))}")
    _, scala, _ = connector_for(installed_spark_version(), installed_scala_version())
    return [f"{MAVEN_GROUP}:{STORE_ARTIFACTS[s]}_{scala}:{__version__}" for s in stores]


def _connector_jar() -> str:
    """The bundled connector jar for the installed PySpark (raises RuntimeError when none fits)."""
    spark = installed_spark_version()
    scala = installed_scala_version()
    connector_for(spark, scala)  # no build: fails before any jar is touched
    return jar_path(spark, scala)


# ---------------------------------------------------------------------------------------------
# Session configuration


def _append_csv(existing: str | None, additions: Sequence[str]) -> str:
    items = [item.strip() for item in (existing or "").split(",") if item.strip()]
    for addition in additions:
        if addition not in items:
            items.append(addition)
    return ",".join(items)


STORE_OPTION_PREFIXES = ("fs.s3a.", "fs.azure.", "fs.gs.")
"""Store settings a read or write takes (the Hadoop keys of S3A, hadoop-azure, the GCS connector)."""


def connect_url(options: Mapping[str, Any]) -> str | None:
    """The Spark Connect URL a builder with these settings connects to (``local[2]``: a server this
    process starts; ``sc://host:port``: a server elsewhere), or None for a classic session. As
    ``SparkSession.Builder.getOrCreate`` decides: ``spark.remote``, else ``$SPARK_REMOTE``, else
    (PySpark 4+) ``spark.api.mode=connect`` with the master (``local`` when unset)."""
    remote = options.get("spark.remote") or os.environ.get("SPARK_REMOTE")
    if remote:
        return str(remote)
    if str(options.get("spark.api.mode", os.environ.get("SPARK_API_MODE", ""))).strip().lower() == "connect":
        return str(options.get("spark.master") or os.environ.get("MASTER") or "local")
    return None


def _connect_server_packages(options: Mapping[str, Any]) -> list[str]:
    """What a local Connect server needs on top of the installed pyspark: nothing from PySpark 4.0
    (its jars hold the server), ``spark-connect_<scala>:<version>`` on 3.x, unless given already."""
    if installed_connect_server():
        return []
    given = f"{options.get('spark.jars', '')},{options.get('spark.jars.packages', '')}"
    if "spark-connect" in given:
        return []
    spark = installed_spark_version()
    _, scala, _ = connector_for(spark, installed_scala_version())
    return [f"org.apache.spark:spark-connect_{scala}:{spark}"]


def configure_spark_with_osqueue(
    builder: Any,
    *,
    extra_packages: Sequence[str] | None = None,
    s3: bool = False,
    stores: Sequence[str] = (),
) -> Any:
    """Adds the osqueue connector jar to a ``SparkSession.Builder`` and returns the builder.

    The jar for the installed PySpark's Spark line and Scala (see :data:`SUPPORTED_SPARK_LINES`;
    a newer Spark than the newest line gets that line's jar, with a warning) is appended to
    ``spark.jars`` (values already set on the builder are kept). ``extra_packages`` (Maven coordinates) are appended to
    ``spark.jars.packages``; with ``s3=True`` so is ``org.apache.hadoop:hadoop-aws`` at the
    Hadoop version of the installed PySpark, which Spark needs for ``s3a://`` checkpoint
    locations and other S3 I/O of its own (osqueue reaches S3 with its bundled SDK).
    ``stores=["gcs"]`` adds the artifact of the ``gs://`` store (``io.github.osqueue:osqueue-gcs_<scala>``,
    Google's SDK relocated inside) to ``spark.jars.packages``: the wheel does not carry cloud SDK
    jars. Spark resolves it from Maven Central, or from ``spark.jars.repositories``.

    Example::

        from pyspark.sql import SparkSession
        from osqueue.spark import configure_spark_with_osqueue

        spark = configure_spark_with_osqueue(SparkSession.builder.master("local[2]")).getOrCreate()

    Spark Connect: a ``.remote("local[2]")`` builder (or ``spark.api.mode=connect`` with a local
    master) starts its Connect server in this Python process's JVM with the builder's settings, so
    the jar goes in as above; on Spark 3.5, whose pyspark does not ship the Connect server, the
    ``org.apache.spark:spark-connect_<scala>:<pyspark version>`` package is added to
    ``spark.jars.packages`` too. A builder for a server elsewhere (``.remote("sc://host:15002")``)
    cannot take jars: that server loads the connector from its own classpath (start it with
    ``--jars`` and :func:`jar_path`, or ``--packages``) or from the session's artifacts
    (``spark.addArtifacts(jar_path(spark_version=spark.version))`` once the session exists); such
    a builder is refused with ValueError.

    :param builder: A ``pyspark.sql.SparkSession.Builder``.
    :param extra_packages: More Maven coordinates for ``spark.jars.packages``.
    :param s3: Also add ``hadoop-aws`` matching the installed PySpark's Hadoop.
    :param stores: Object stores beyond S3 and local files, each in an artifact of its own that the
        wheel does not bundle: ``"azure"`` (``abfss://``, ``wasbs://``) adds
        ``io.github.osqueue:osqueue-azure_<scala>:<version>`` and ``"gcs"`` (``gs://``)
        ``io.github.osqueue:osqueue-gcs_<scala>:<version>`` (each one jar, its SDK relocated) to
        ``spark.jars.packages``, resolved from Maven Central or the ``spark.jars.repositories`` set.
    :return: The same builder.
    :raises TypeError: ``builder`` is not a ``SparkSession.Builder``.
    :raises ValueError: ``builder`` is a Spark Connect builder for a server elsewhere (``sc://``).
    :raises RuntimeError: No connector is built for the installed PySpark's Spark and Scala, or its
        Hadoop version cannot be found for ``s3=True``.
    :raises FileNotFoundError: The package was installed without its jar.
    """
    from pyspark.sql import SparkSession

    if not isinstance(builder, SparkSession.Builder):
        raise TypeError(
            "configure_spark_with_osqueue() must be called with a SparkSession builder, e.g. "
            "configure_spark_with_osqueue(SparkSession.builder.appName('app')), and returns it; "
            f"got an object of type {type(builder).__module__}.{type(builder).__qualname__}"
        )
    if isinstance(extra_packages, str):
        raise TypeError("extra_packages must be a list of Maven coordinates, not a single string")
    options: Mapping[str, Any] = getattr(builder, "_options", {})
    remote = connect_url(options)
    if remote is not None and not remote.startswith("local"):
        raise ValueError(
            f"configure_spark_with_osqueue() cannot put the connector on the Spark Connect server at {remote}: "
            "a Connect server loads data sources from its own classpath. Start that server with "
            "--jars <osqueue.jar_path(spark_version=<the server's Spark>)> or --packages "
            f"{MAVEN_GROUP}:osqueue-spark-<line>_<scala>:{__version__}, or add the jar to your Connect session "
            "with spark.addArtifacts(osqueue.jar_path(spark_version=spark.version)) where the server accepts "
            "jars (README: Where it runs); build the client session without this call"
        )
    jar = _connector_jar()
    store_packages = _store_packages(stores)  # checked before the builder is touched
    builder.config("spark.jars", _append_csv(options.get("spark.jars"), [jar]))
    packages = list(extra_packages or []) + store_packages
    if remote is not None:
        packages += _connect_server_packages(options)
    if s3:
        hadoop = installed_hadoop_version()
        if hadoop is None:
            raise RuntimeError(
                "cannot tell the Hadoop version of the installed pyspark (no hadoop-client-api-*.jar in its "
                "jars directory); leave s3=False and pass "
                "extra_packages=['org.apache.hadoop:hadoop-aws:<your Hadoop version>']"
            )
        packages.append(f"org.apache.hadoop:hadoop-aws:{hadoop}")
    if packages:
        builder.config("spark.jars.packages", _append_csv(options.get("spark.jars.packages"), packages))
    return builder


def register(spark: SparkSession, *, as_osqueue: bool = False) -> str:
    """Registers osqueue's PySpark Python data source (:mod:`osqueue.spark_source`) on ``spark``, classic or
    Connect, and returns its format name, ``"osqueue_python"``. It needs no jar: only osqueue (with
    ``pyarrow``, the ``spark`` extra) installed in the Python of the driver and of the executors.

    ``format("osqueue")`` stays the JVM connector where its jar is on the classpath; ``as_osqueue=True``
    also registers the Python source as ``osqueue`` for sessions without the jar (Spark refuses it with
    ``[DATA_SOURCE_ALREADY_EXISTS]`` when the jar is there).
    """
    # Imported here, not at the top: osqueue.spark_source needs pyspark and pyarrow, which this module does not.
    spark_source = importlib.import_module("osqueue.spark_source")
    name: str = spark_source.register(spark, as_osqueue=as_osqueue)
    return name


# ---------------------------------------------------------------------------------------------
# Options


def _duration(name: str, value: Duration) -> str:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be seconds (int/float), a timedelta or a string like '30s', not a bool")
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, (int, float)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
        ms = round(value * 1000)
        if ms < 1:
            raise ValueError(f"{name} must be at least 1 ms, got {value} s")
        return f"{ms}ms"
    if isinstance(value, str):
        return value
    raise TypeError(
        f"{name} must be seconds (int/float), a timedelta or a string like '30s', not {type(value).__name__}"
    )


def _integer(name: str, value: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return str(value)


def _string(name: str, value: str) -> str:
    return str(value)


def _boolean(name: str, value: bool) -> str:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {type(value).__name__}")
    return "true" if value else "false"


class _Location(TypedDict, total=False):
    manifest_path: str
    data_path_prefix: str
    store_options: Mapping[str, Any]


class SourceOptions(_Location, total=False):
    """The streaming source's options (:func:`read_stream`, :func:`source_options`).

    ``max_batches_per_trigger``: at most this many queue batches per micro-batch.
    ``min_batches_per_trigger``: wait for this many batches, but ``max_trigger_delay`` at most.
    ``fail_on_data_loss``: fail (default) or warn when entries the checkpoint expects are gone.
    ``gc``: run the garbage collector in the driver (default true); ``gc_interval`` between cycles;
    ``gc_grace_period``: the minimum age of a file GC deletes.
    ``poll_interval`` / ``max_poll_interval``: how often the source looks at the manifest while the
    queue is idle (the real-time reader; in micro-batch mode the driver's ``latestOffset``), and the
    longest wait it backs off to while nothing changes.
    ``subscription``: read as this named subscription (its own position; fences only its other readers);
    ``create_subscription``: create it at the queue's first entry if the first read finds none.
    ``manifest_path`` (default ``ingest/manifest``), ``data_path_prefix`` (default ``ingest``),
    ``store_options``: ``fs.s3a.*`` (``fs.azure.*``, ``fs.gs.*``) store settings for this query.
    """

    max_batches_per_trigger: int
    min_batches_per_trigger: int
    max_trigger_delay: Duration
    fail_on_data_loss: bool
    gc: bool
    gc_interval: Duration
    gc_grace_period: Duration
    poll_interval: Duration
    max_poll_interval: Duration
    subscription: str
    create_subscription: bool


class BatchReadOptions(_Location, total=False):
    """A batch read's options (:func:`read`, :func:`batch_read_options`).

    ``starting_sequence``: the first sequence to read; ``ending_sequence``: the sequence to stop before.
    ``fail_on_data_loss``: fail when entries of the window are gone.
    ``subscription``: start at this subscription's position (nothing is acknowledged, nobody fenced).
    ``manifest_path``, ``data_path_prefix``, ``store_options``: as :class:`SourceOptions`.
    """

    starting_sequence: int
    ending_sequence: int
    fail_on_data_loss: bool
    subscription: str


class StreamSinkOptions(_Location, total=False):
    """The streaming sink's options (:func:`write_stream`).

    ``compression``: ``"none"`` or ``"zstd"``. ``flush_size_bytes``: a task flushes a batch at this size.
    ``writer_id``: the identity under which the sink records its committed micro-batches for
    exactly-once appends (default: the query's id). It belongs to the first query that commits with it:
    a query on another checkpoint using it fails with ``OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY`` rather
    than skip its batches as replays.
    ``gc_grace_period``: the consumer's GC grace period (batches older than half of it are re-uploaded
    before being enqueued).
    ``manifest_segment_entries``: K, the entries a queue holds before its oldest move into segments
    (default 2048); 2147483647 keeps the queue RFC v1.
    ``manifest_path``, ``data_path_prefix``, ``store_options``: as :class:`SourceOptions`.
    """

    compression: str
    flush_size_bytes: int
    writer_id: str
    gc_grace_period: Duration
    manifest_segment_entries: int


class SinkOptions(StreamSinkOptions, total=False):
    """The sink's options (:func:`sink_options`): :class:`StreamSinkOptions` and, for ``df.write`` with a
    ``writer_id`` only, ``writer_batch_id``: the id of this write within the writer; a write at or below
    the last committed id is skipped.
    """

    writer_batch_id: int


OPTION_TABLES: Mapping[str, type[Any]] = {
    "source": SourceOptions,
    "batch read": BatchReadOptions,
    "sink": SinkOptions,
}
"""The options of each mode of the connector (the modes of vocabulary.json's ``spark_options``), one
table each: a field ``snake_name: T`` is the connector's key ``snakeName``, and ``T`` says how its value
is written (``bool``: ``true``/``false``; ``int``: decimal; :data:`Duration`: milliseconds, a string
as is; ``str``: as is). ``store_options`` is not a key: its items are passed as they are."""

_WRITERS: Mapping[Any, Callable[[str, Any], str]] = {bool: _boolean, int: _integer, Duration: _duration, str: _string}


def connector_key(name: str) -> str:
    """The connector's key of a Python option name (``max_batches_per_trigger`` -> ``maxBatchesPerTrigger``)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _store_settings(store_options: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in store_options.items():
        if not str(key).lower().startswith(STORE_OPTION_PREFIXES):
            raise ValueError(
                f"store option '{key}' is not a store setting ({', '.join(p + '*' for p in STORE_OPTION_PREFIXES)})"
            )
        out[str(key)] = _boolean(str(key), value) if isinstance(value, bool) else str(value)
    return out


def _connector_options(table: type[Any], caller: str, options: Mapping[str, Any]) -> dict[str, str]:
    """The connector's options for ``options`` (names of ``table``; None values are omitted)."""
    hints = typing.get_type_hints(table)
    unknown = sorted(set(options) - set(hints))
    if unknown:
        raise TypeError(f"{caller}() got an unexpected option {unknown[0]!r}; it takes {', '.join(sorted(hints))}")
    out: dict[str, str] = {}
    for name, value in options.items():
        if value is None:
            continue
        if name == "store_options":
            out.update(_store_settings(value))
        else:
            out[connector_key(name)] = _WRITERS[hints[name]](name, value)
    return out


def source_options(**options: Unpack[SourceOptions]) -> dict[str, str]:
    """The streaming source's options for the given arguments (:class:`SourceOptions`; None values are omitted)."""
    return _connector_options(SourceOptions, "source_options", options)


def batch_read_options(**options: Unpack[BatchReadOptions]) -> dict[str, str]:
    """The batch read's options for the given arguments (:class:`BatchReadOptions`; None values are omitted)."""
    return _connector_options(BatchReadOptions, "batch_read_options", options)


def sink_options(**options: Unpack[SinkOptions]) -> dict[str, str]:
    """The sink's options for the given arguments (:class:`SinkOptions`; None values are omitted)."""
    return _connector_options(SinkOptions, "sink_options", options)


# ---------------------------------------------------------------------------------------------
# DataFrame helpers


def read_stream(spark: SparkSession, path: str, **options: Unpack[SourceOptions]) -> DataFrame:
    """A streaming DataFrame of a queue: ``spark.readStream.format("osqueue")...load(path)``.

    The query becomes the queue's single consumer: starting it fences any other consumer.

    :param spark: The session (its ``spark.jars`` must hold the connector, see
        :func:`configure_spark_with_osqueue`).
    :param path: The queue's store root (``/dir``, ``file:/dir``, ``s3a://bucket/prefix``).
    :param options: :class:`SourceOptions`, e.g. ``max_batches_per_trigger=100``, ``gc=False``,
        ``poll_interval="20ms"``.
    """
    reader = spark.readStream.format(FORMAT)
    for key, value in _connector_options(SourceOptions, "read_stream", options).items():
        reader = reader.option(key, value)
    return reader.load(path)


def read(spark: SparkSession, path: str, **options: Unpack[BatchReadOptions]) -> DataFrame:
    """A batch DataFrame of a queue's entries in ``[starting_sequence, ending_sequence)``
    (default: all of them); reads only, acknowledges nothing.

    :param options: :class:`BatchReadOptions`, e.g. ``starting_sequence=10``.
    """
    reader = spark.read.format(FORMAT)
    for key, value in _connector_options(BatchReadOptions, "read", options).items():
        reader = reader.option(key, value)
    return reader.load(path)


def write_stream(
    df: DataFrame,
    path: str,
    *,
    checkpoint_location: str,
    trigger: Mapping[str, Any] | None = None,
    **options: Unpack[StreamSinkOptions],
) -> DataStreamWriter:
    """A ``DataStreamWriter`` that appends ``df`` to a queue; call ``.start()`` on it.

    ``df`` must have the columns the connector's sink takes (a binary ``value``; see the
    connector's documentation).

    :param checkpoint_location: The query's checkpoint directory (required).
    :param trigger: Keyword arguments of ``DataStreamWriter.trigger``, e.g.
        ``{"processingTime": "10 seconds"}`` or ``{"availableNow": True}``.
    :param options: :class:`StreamSinkOptions`, e.g. ``compression="zstd"``, ``writer_id="ingest"``.
    """
    if not checkpoint_location:
        raise ValueError("checkpoint_location is required: the query's progress lives there")
    connector_options = _connector_options(StreamSinkOptions, "write_stream", options)
    writer = df.writeStream.format(FORMAT).option("path", path).option("checkpointLocation", checkpoint_location)
    for key, value in connector_options.items():
        writer = writer.option(key, value)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer


def trigger_real_time(writer: DataStreamWriter, duration: str) -> DataStreamWriter:
    """Sets Spark's real-time trigger (``Trigger.RealTime(duration)``, Spark 4.1+) on ``writer`` and
    returns it, with no private API where PySpark has one.

    PySpark 4.2 and later, classic and Spark Connect: ``writer.trigger(realTime=duration)``. Classic
    PySpark 4.1, whose ``trigger()`` has no ``realTime`` yet: the trigger is set on the JVM writer
    behind ``writer``. Spark Connect on PySpark 4.1 cannot express the trigger at all.

    :param writer: A ``DataStreamWriter`` (``df.writeStream...``; real-time mode needs
        ``outputMode("update")`` and a sink Spark allows in it, e.g. ``foreach``).
    :param duration: How long each real-time batch runs, as Spark reads it (``"10 seconds"``).
    :raises ValueError: ``duration`` is empty.
    :raises RuntimeError: The installed PySpark cannot set the trigger (before 4.1, or Spark
        Connect on 4.1), naming what is needed.
    """
    import inspect

    import pyspark

    if not isinstance(duration, str) or not duration.strip():
        raise ValueError(f"duration must be a non-empty string such as '10 seconds', got {duration!r}")
    if "realTime" in inspect.signature(writer.trigger).parameters:
        dynamic: Any = writer  # pyspark < 4.2's stubs do not know the argument
        return typing.cast("DataStreamWriter", dynamic.trigger(realTime=duration))
    version = str(pyspark.__version__)
    jwrite, spark = getattr(writer, "_jwrite", None), getattr(writer, "_spark", None)
    if tuple(int(p) for p in version.split(".")[:2]) < (4, 1) or jwrite is None or spark is None:
        where = "classic PySpark 4.1, or PySpark 4.2+ (classic or Spark Connect)"
        raise RuntimeError(
            f"real-time mode (Trigger.RealTime) cannot be set with pyspark {version} on a "
            f"{type(writer).__module__}.{type(writer).__qualname__}: it needs {where}"
        )
    jvm = spark.sparkContext._jvm
    writer._jwrite = jwrite.trigger(jvm.org.apache.spark.sql.streaming.Trigger.RealTime(duration.strip()))
    return writer
