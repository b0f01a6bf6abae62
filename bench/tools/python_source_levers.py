"""What a Python data source controls, measured on Spark's ceiling source (supplementary; issue 27).

    PYTHONPATH=python .venv/bin/python bench/tools/python_source_levers.py [ROWS, default 262144] [ROUNDS, default 3]

The ceiling source of ``bench/tools/python_source_ceiling.py`` (tasks yield prebuilt Arrow batches of the
osqueue source's schema, 1 KiB values, no osqueue work), batch-read into the noop sink on a local[2]
session, with one lever changed at a time against the baseline (1,024 rows per yielded batch, 16
partitions, ``binary`` values, RecordBatches, Spark's default confs). Each round runs the baseline and
the lever back to back, alternating which goes first; the figure is the lever's rows/s over the
baseline's in the same round (the machine's load moves between rounds, not within a pair). Session-wide
confs that Spark reads at start (``spark.buffer.size``) get a session of their own, paired the same way.
Also ``--only NAME[,NAME]`` to run some levers, ``--base partitions=4`` to change the baseline's source
options (the levers change it one at a time), ``--jfr FILE`` to record the JVM with Flight Recorder.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import statistics
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

SCHEMA = "value binary, sequence long, index int, location string, ingestionTime timestamp, metadata binary"
VALUE_ONLY = "value binary"


class Share(InputPartition):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class LeverReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options["rows"])
        self.per_batch = int(options.get("perbatch", "1024"))
        self.partitions_n = int(options.get("partitions", "16"))
        self.large = options.get("large", "false") == "true"
        self.tuples = options.get("tuples", "false") == "true"
        self.value_only = options.get("valueonly", "false") == "true"

    def partitions(self) -> list[InputPartition]:
        per, extra = divmod(self.rows, self.partitions_n)
        return [Share(per + (1 if i < extra else 0)) for i in range(self.partitions_n)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import numpy as np

        assert isinstance(partition, Share)
        n = min(self.per_batch, max(partition.rows, 1))
        values = pa.array(
            [b"%010d" % i + b"x" * 1014 for i in range(n)], pa.large_binary() if self.large else pa.binary()
        )
        if self.value_only:
            batch = pa.RecordBatch.from_arrays([values], names=["value"])
        else:
            batch = pa.RecordBatch.from_arrays(
                [
                    values,
                    pa.repeat(pa.scalar(1, pa.int64()), n),
                    pa.array(np.arange(n, dtype=np.int32)),
                    pa.repeat(pa.scalar("ingest/data/01ARZ3NDEKTSV4RRFFQ69G5FAV", pa.string()), n),
                    pa.nulls(n, pa.timestamp("us", tz="UTC")),
                    pa.nulls(n, pa.binary()),
                ],
                names=["value", "sequence", "index", "location", "ingestionTime", "metadata"],
            )
        left = partition.rows
        if self.tuples:
            rows = [tuple(r.values()) for r in batch.to_pylist()]
            while left > 0:
                take = min(left, n)
                yield from rows[:take]
                left -= take
            return
        while left > 0:
            take = min(left, n)
            yield batch if take == n else batch.slice(0, take)
            left -= take


class Levers(DataSource):
    @classmethod
    def name(cls) -> str:
        return "osqueue_levers"

    def schema(self) -> str:
        return VALUE_ONLY if self.options.get("valueonly", "false") == "true" else SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return LeverReader(dict(self.options))


# name -> (source options, runtime SQL confs)
LEVERS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "base": ({}, {}),
    "batch_256_rows": ({"perbatch": "256"}, {}),
    "batch_8192_rows": ({"perbatch": "8192"}, {}),
    "batch_65536_rows": ({"perbatch": "65536"}, {}),
    "partitions_2": ({"partitions": "2"}, {}),
    "partitions_4": ({"partitions": "4"}, {}),
    "partitions_64": ({"partitions": "64"}, {}),
    "large_binary": ({"large": "true"}, {}),
    "large_binary_and_large_var_types": ({"large": "true"}, {"spark.sql.execution.arrow.useLargeVarTypes": "true"}),
    "value_column_only": ({"valueonly": "true"}, {}),
    "tuples": ({"tuples": "true"}, {}),
    "maxRecordsPerBatch_100000": ({}, {"spark.sql.execution.arrow.maxRecordsPerBatch": "100000"}),
    "maxRecordsPerOutputBatch_100000": ({}, {"spark.sql.execution.arrow.maxRecordsPerOutputBatch": "100000"}),
    "udf_buffer_1MiB": ({}, {"spark.sql.execution.python.udf.buffer.size": str(1 << 20)}),
    "pandas_udf_buffer_1MiB": ({}, {"spark.sql.execution.pandas.udf.buffer.size": str(1 << 20)}),
    "arrow_compression_lz4": ({}, {"spark.sql.execution.arrow.compression.codec": "lz4"}),
    "binaryAsBytes_false": ({}, {"spark.sql.execution.pyspark.binaryAsBytes": "false"}),
}
# levers read when the session starts: each gets a session of its own
SESSION_LEVERS: dict[str, dict[str, str]] = {
    "spark_buffer_size_1MiB": {"spark.buffer.size": str(1 << 20)},
    "python_worker_reuse_false": {"spark.python.worker.reuse": "false"},
}


def session(confs: dict[str, str], jfr: str | None = None) -> SparkSession:
    b = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.python.authenticate.socketTimeout", "120s")
    )
    if jfr:
        b = b.config("spark.driver.extraJavaOptions", f"-XX:StartFlightRecording=filename={jfr},settings=profile")
    for k, v in confs.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(Levers)
    return spark


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process, from /proc (Linux)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cpu_split(spark: SparkSession) -> tuple[float, float]:
    """CPU seconds so far of the Spark JVM and of its Python workers (processes that have exited are
    not counted: Spark's worker reuse keeps them)."""
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[attr-defined]
    return _cpu_s(jvm), sum(_cpu_s(p) for p in _descendants(jvm))


LAST_CPU: dict[str, float] = {}


def timed(spark: SparkSession, rows: int, options: dict[str, str], confs: dict[str, str]) -> float:
    """rows/s of one batch read of the lever source into noop; the read's CPU per row, JVM and Python
    workers, in LAST_CPU."""
    saved = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        df = spark.read.format("osqueue_levers").options(rows=str(rows), **options).load()
        j0, p0 = cpu_split(spark)
        t0 = time.monotonic()
        df.write.format("noop").mode("overwrite").save()
        wall = time.monotonic() - t0
        j1, p1 = cpu_split(spark)
        LAST_CPU.update(jvm_us=(j1 - j0) / rows * 1e6, python_us=(p1 - p0) / rows * 1e6, wall_us=wall / rows * 1e6)
        return rows / wall
    finally:
        for k, old in saved.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", nargs="?", type=int, default=262144)
    ap.add_argument("rounds", nargs="?", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--jfr", default=None)
    ap.add_argument("--base", default="", help="source options of the baseline, e.g. partitions=4")
    a = ap.parse_args()
    base = dict(kv.split("=", 1) for kv in a.base.split(",") if kv)
    only = [x for x in a.only.split(",") if x]
    levers = {k: v for k, v in LEVERS.items() if not only or k in only}
    session_levers = {k: v for k, v in SESSION_LEVERS.items() if not only or k in only}
    print(f"load average {os.getloadavg()[0]:.1f}; {a.rows:,} rows of 1 KiB per read", flush=True)
    spark = session({}, a.jfr)
    timed(spark, a.rows // 4, base, {})  # the Python workers start; the JIT warms
    ratios: dict[str, list[float]] = {}
    for r in range(a.rounds):
        for name, (options, confs) in levers.items():
            if name == "base" and len(levers) > 1:
                continue
            rows = a.rows // 8 if name == "tuples" else a.rows
            pair = [("base", base, {}), (name, {**base, **options}, confs)]
            got, cpu = {}, {}
            for side, o, c in pair if r % 2 == 0 else reversed(pair):
                got[side] = timed(spark, rows, o, c)
                cpu[side] = dict(LAST_CPU)
            ratios.setdefault(name, []).append(got[name] / got["base"])
            print(
                f"round {r + 1} {name}: base {got['base']:,.0f} rows/s, lever {got[name]:,.0f} rows/s, "
                f"{got[name] / got['base']:.2f}x (load {os.getloadavg()[0]:.1f}); CPU us/row JVM / Python workers: "
                f"base {cpu['base']['jvm_us']:.1f} / {cpu['base']['python_us']:.1f}, "
                f"lever {cpu[name]['jvm_us']:.1f} / {cpu[name]['python_us']:.1f}",
                flush=True,
            )
    spark.stop()
    for name, confs in session_levers.items():
        for r in range(a.rounds):
            got = {}
            for side, c in [("base", {}), (name, confs)] if r % 2 == 0 else [(name, confs), ("base", {})]:
                s = session(c)
                timed(s, a.rows // 4, base, {})
                got[side] = timed(s, a.rows, base, {})
                s.stop()
            ratios.setdefault(name, []).append(got[name] / got["base"])
            print(
                f"round {r + 1} {name}: base {got['base']:,.0f}, lever {got[name]:,.0f}, {got[name] / got['base']:.2f}x",
                flush=True,
            )
    print("\nlever | lever ÷ baseline, median (min-max) over rounds")
    for name, rs in ratios.items():
        print(f"{name} | {statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})")
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)


if __name__ == "__main__":
    main()
