"""Spark's own ceiling for a Python data source (supplementary; not part of `python -m bench.harness run`).

    PYTHONPATH=python .venv/bin/python bench/tools/python_source_ceiling.py [QUEUE_DIR] [FILES, default 489]

A Python data source whose tasks do no osqueue work: each yields one prebuilt Arrow record batch of the
osqueue source's schema (1,024 rows of 1 KiB, its location string and null metadata columns) again and
again, FILES batches over 16 partitions (the osqueue source's 32 MiB runs of 489 files until session 14;
it now cuts 128 MiB, 4 partitions: `python_source_levers.py --base partitions=4` measures that shape),
batch-read into the noop sink on a local[2] session. With a
local queue directory (e.g. one the `python_source` row builds, 1 MiB batch files), the osqueue Python
source and the JVM connector batch-read it beside it. 3 rounds; rows/s per read. What is left between
the ceiling and the JVM connector is Spark's Python data source path (the worker's Arrow stream, the
JVM's Arrow -> row conversion), not osqueue's reading.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

if importlib.util.find_spec("osqueue") is None:
    sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[2] / "python")]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import pyarrow as pa  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

from osqueue import jar_path  # noqa: E402
from osqueue.spark_source import register  # noqa: E402

ROWS = 1024
PARTITIONS = 16


class Share(InputPartition):
    def __init__(self, batches: int) -> None:
        self.batches = batches


class PrebuiltReader(DataSourceReader):
    def __init__(self, files: int) -> None:
        self.files = files

    def partitions(self) -> list[InputPartition]:
        per, extra = divmod(self.files, PARTITIONS)
        return [Share(per + (1 if i < extra else 0)) for i in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import numpy as np

        from osqueue.spark_source.partition_reader import ARROW_SCHEMA

        assert isinstance(partition, Share)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([b"%010d" % i + b"x" * 1014 for i in range(ROWS)], pa.binary()),
                pa.repeat(pa.scalar(1, pa.int64()), ROWS),
                pa.array(np.arange(ROWS, dtype=np.int32)),
                pa.repeat(pa.scalar("ingest/data/01ARZ3NDEKTSV4RRFFQ69G5FAV", pa.string()), ROWS),
                pa.nulls(ROWS, ARROW_SCHEMA.field("ingestionTime").type),
                pa.nulls(ROWS, pa.binary()),
            ],
            schema=ARROW_SCHEMA,
        )
        for _ in range(partition.batches):
            yield batch


class Prebuilt(DataSource):
    @classmethod
    def name(cls) -> str:
        return "osqueue_ceiling"

    def schema(self) -> str:
        return "value binary, sequence long, index int, location string, ingestionTime timestamp, metadata binary"

    def reader(self, schema: Any) -> DataSourceReader:
        return PrebuiltReader(int(self.options.get("files", "489")))


def main() -> None:
    queue = sys.argv[1] if len(sys.argv) > 1 else None
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 489
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars", jar_path())
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(Prebuilt)
    fmt = register(spark)

    def timed(name: str, df: Any, rows: int) -> None:
        t0 = time.monotonic()
        df.write.format("noop").mode("overwrite").save()
        wall = time.monotonic() - t0
        print(f"{name}: {rows:,} rows in {wall:.2f} s, {rows / wall:,.0f} rows/s", flush=True)

    queued = 0
    if queue is not None:
        queued = spark.read.format("osqueue").load(queue).count()
    for _ in range(3):
        timed(
            "ceiling: prebuilt Arrow batches, no osqueue work",
            spark.read.format("osqueue_ceiling").option("files", str(files)).load(),
            files * ROWS,
        )
        if queue is not None:
            timed("osqueue_python batch read", spark.read.format(fmt).load(queue), queued)
            timed("osqueue (JVM) batch read", spark.read.format("osqueue").load(queue), queued)
    spark.stop()


if __name__ == "__main__":
    main()
