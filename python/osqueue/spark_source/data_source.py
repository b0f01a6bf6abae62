"""``osqueue`` as a PySpark Python data source (pyspark.sql.datasource), built on the native Python client:
it runs where no jar can go (Spark Connect thin clients, Databricks serverless). Register it with
:func:`register`; it takes the JVM connector's options and raises its ``[OSQUEUE_...]`` conditions.

Name: it registers as ``osqueue_python``, so that it never competes with the JVM connector, which is
``format("osqueue")`` wherever its jar is on the classpath. ``register(spark, as_osqueue=True)`` also
registers it as ``osqueue``, for sessions without the jar (serverless, thin Connect clients); with the
jar present Spark refuses that with ``[DATA_SOURCE_ALREADY_EXISTS]`` and ``format("osqueue")`` stays
the JVM connector (``osqueue_python`` still picks this one).
"""

from __future__ import annotations

import random
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from osqueue.clock import SystemClock
from osqueue.format.batch_names import encode_ulid
from osqueue.spark_source.options import BatchReadOptions, SinkOptions, StreamOptions
from osqueue.spark_source.reader import OsqueueBatchReader, stream_reader
from osqueue.spark_source.writer import OsqueueStreamWriter, OsqueueWriter

PYTHON_SOURCE_NAME = "osqueue_python"
SOURCE_SCHEMA = "value binary, sequence bigint, index int, location string, ingestionTime timestamp, metadata binary"


class OsqueueDataSource(DataSource):
    """``spark.read`` / ``readStream`` / ``write`` / ``writeStream`` of ``format("osqueue_python")``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # This run's id (a ULID: ordered by time). Spark makes this instance once per query run and
        # commits each micro-batch of the run through it: the sink's fencing of older drivers (writer.py).
        self.run = encode_ulid(SystemClock().now_ms(), random.Random().getrandbits(80))

    @classmethod
    def name(cls) -> str:
        return PYTHON_SOURCE_NAME

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return OsqueueBatchReader(BatchReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return stream_reader(StreamOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> OsqueueWriter:
        return OsqueueWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> OsqueueStreamWriter:
        checkpoint = {k.lower(): v for k, v in self.options.items()}.get("checkpointlocation")
        owner = "python" if checkpoint is None else f"python:{checkpoint}"
        return OsqueueStreamWriter(SinkOptions.parse(self.options), schema, owner, getattr(self, "run", None))


class OsqueueNamedDataSource(OsqueueDataSource):
    """The same source under the JVM connector's name, ``osqueue`` (for sessions without the jar)."""

    @classmethod
    def name(cls) -> str:
        return "osqueue"


def register(spark: Any, *, as_osqueue: bool = False) -> str:
    """Registers the Python data source on ``spark`` (classic or Connect) and returns the format name to use.

    :param as_osqueue: Also register it as ``osqueue``, for sessions without the JVM connector's jar.
    :raises pyspark.errors.AnalysisException: ``[DATA_SOURCE_ALREADY_EXISTS]`` with ``as_osqueue=True`` when
        the JVM connector is on the session's classpath (it keeps ``osqueue``; ``osqueue_python`` is registered).
    """
    spark.dataSource.register(OsqueueDataSource)
    if as_osqueue:
        spark.dataSource.register(OsqueueNamedDataSource)
    return PYTHON_SOURCE_NAME
