"""The Python data source's per-row CPU in a task, without Spark (supplementary; not part of
`python -m bench.harness run`).

    PYTHONPATH=python .venv/bin/python bench/tools/python_source_profile.py [RECORDS, default 200000] [--profile]

On the local store in a temporary directory: a queue of RECORDS records of 1 KiB in 1 MiB batch files
(the `python_source` row's layout) read by the source's task code (`partitions_of` + `read_partition`,
what a Spark task runs for a batch or streaming read, partition after partition in this process), and
the same records written by the sink's task code (`write_arrow_task` of 2 Arrow batches of 4,096 rows at
a time, as Spark hands them to a task) to a fresh queue. Prints the CPU and wall time per side and the
CPU per 1,000 rows. `--profile`: cProfile of each side, the 15 costliest functions (cumulative).
Spark's own part (its Arrow -> row transfer on the JVM, the worker round trips) is not in these figures.
"""

from __future__ import annotations

import cProfile
import importlib.util
import os
import pathlib
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

if importlib.util.find_spec("osqueue") is None:  # PYTHONPATH may name another checkout's (a before/after)
    sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[2] / "python")]

import pyarrow as pa  # noqa: E402 (after the sys.path setup)

from osqueue.producer import Producer  # noqa: E402
from osqueue.queue.manifest_store import ManifestStore  # noqa: E402
from osqueue.spark_source.options import BatchReadOptions, SinkOptions  # noqa: E402
from osqueue.spark_source.partition_reader import partitions_of, read_partition  # noqa: E402
from osqueue.spark_source.writer import write_arrow_task  # noqa: E402
from osqueue.store.local_file_system_store import LocalFileSystemStore  # noqa: E402

RECORD_BYTES = 1024
PER_FILE = (1 << 20) // RECORD_BYTES
ARROW_BATCH_ROWS = 4096  # spark.sql.execution.arrow.maxRecordsPerBatch's skeleton (10,000 by default)


def _timed(name: str, rows: int, work: Callable[[], int], profile: bool) -> None:
    prof = cProfile.Profile() if profile else None
    c0, t0 = time.process_time(), time.perf_counter()
    if prof is not None:
        prof.enable()
    got = work()
    if prof is not None:
        prof.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    assert got == rows, f"{name}: {got} rows, expected {rows}"
    print(f"{name}: {rows:,} rows, {cpu:.3f} s CPU ({cpu / rows * 1e6:.2f} us/row), {wall:.3f} s wall")
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(15)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    records = int(args[0]) if args else 200_000
    profile = "--profile" in sys.argv
    filler = b"x" * RECORD_BYTES
    with tempfile.TemporaryDirectory(prefix="osq-pysource-profile-") as d:
        uri = os.path.join(d, "queue")
        with Producer(uri, flush_interval=3600, flush_size_bytes=1 << 40) as p:
            for start in range(0, records, PER_FILE):
                p.produce(
                    [(b"%010d" % i + filler)[:RECORD_BYTES] for i in range(start, min(start + PER_FILE, records))]
                )
                p.flush()
        read_location = BatchReadOptions.parse({"path": uri}).location
        manifests = ManifestStore(LocalFileSystemStore(uri), read_location.manifest_path)
        raw, _ = manifests.read_raw()
        assert raw is not None
        entries = manifests.decode(raw).entries
        options = SinkOptions.parse({"path": os.path.join(d, "sink")})

        def read() -> int:
            rows = 0
            for partition in partitions_of(read_location, entries, True):
                for batch in read_partition(partition):
                    rows += batch.num_rows
            return rows

        column = pa.array([(b"%010d" % i + filler)[:RECORD_BYTES] for i in range(records)], pa.binary())

        def batches() -> Iterator[pa.RecordBatch]:
            for start in range(0, records, ARROW_BATCH_ROWS):
                yield pa.RecordBatch.from_arrays([column.slice(start, ARROW_BATCH_ROWS)], names=["value"])

        def write() -> int:
            return sum(b.records for b in write_arrow_task(options, batches(), 0, None).batches)

        _timed("source task (read_partition)", records, read, profile)
        _timed("sink task (write_arrow_task)", records, write, profile)


if __name__ == "__main__":
    main()
