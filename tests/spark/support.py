"""Helpers shared by the Spark tests and the stream job they run as a separate process."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys

import osqueue
from osqueue.queue import ManifestStore
from osqueue.store import LocalFileSystemStore

# Spark otherwise binds to the first non-loopback interface; tests stay on loopback.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def spark_builder(app: str, master: str = "local[2]"):
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.appName(app)
        .master(master)
        .config("spark.jars", osqueue.jar_path())
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
        # A Python worker (a Python data source's planner or stream reader) must connect back within this;
        # Spark's 15 s default fails queries with "Python worker failed to connect back" on a loaded machine.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )


def produce_entries(
    path: str, batches: int, per_batch: int, store_options=None, tag: str = "e", gc_grace_period: float = 600.0
) -> list[str]:
    """Writes `batches` batches of `per_batch` entries; returns the entries in queue order. The first
    producer of a queue records its grace period, which no GC can shorten (docs/format.md §6)."""
    values = []
    with osqueue.Producer(path, flush_interval=3600, store_options=store_options, gc_grace_period=gc_grace_period) as p:
        for b in range(batches):
            entries = [f"{tag}{b}-{i}".encode() for i in range(per_batch)]
            p.produce(entries, metadata=f"meta-{tag}{b}".encode())
            p.flush()
            values += [e.decode() for e in entries]
    return values


def native_values(queue, store_options=None):
    c = osqueue.Consumer(str(queue), store_options=store_options)
    values = []
    while (b := c.next_batch()) is not None:
        values += [v.decode() for v in b.entries]
        c.ack(b.sequence)
    c.close()
    return values


def manifest(queue: pathlib.Path):
    """The queue's manifest at the RFC's default layout."""
    store = LocalFileSystemStore(str(queue))
    try:  # a segmented head with its segments
        return ManifestStore(store, "ingest/manifest").decode((queue / "ingest" / "manifest").read_bytes())
    finally:
        store.close()


def inspect_json(queue, store_options=None) -> dict:
    """`osqueue inspect QUEUE --json`, run as a user runs it (its own process): the manifest as JSON."""
    args = [sys.executable, "-m", "osqueue", "inspect", str(queue), "--json"]
    for k, v in (store_options or {}).items():
        args += ["--store-option", f"{k}={v}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def queued_sequences(queue, store_options=None) -> list[int]:
    """The sequences `osqueue inspect --json` shows queued."""
    return [e["sequence"] for e in inspect_json(queue, store_options)["entries"]]


def make_input(d: pathlib.Path, files: int, lines: int, tag: str = "f") -> list[str]:
    d.mkdir(parents=True, exist_ok=True)
    expected = []
    for f in range(files):
        rows = [f"{tag}{f}-line{i}" for i in range(lines)]
        path = d / f"{tag}{f}.txt"
        path.write_text("\n".join(rows) + "\n")
        os.utime(path, (1_700_000_000 + f * 10, 1_700_000_000 + f * 10))  # the file source reads oldest first
        expected += rows
    return expected


@contextlib.contextmanager
def standalone_cluster(work_dir: pathlib.Path):
    """A Spark standalone master and one worker (2 cores) on loopback, from pyspark's own scripts.

    Yields the master URL; executors run in the worker's JVMs, so tasks cross a process boundary.
    """
    import pyspark

    spark_home = pathlib.Path(pyspark.__file__).parent
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=str(work_dir))
    spark_class = str(spark_home / "bin" / "spark-class")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    master = subprocess.Popen(
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            "0",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    worker = subprocess.Popen(
        [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            f"spark://127.0.0.1:{port}",
            "--host",
            "127.0.0.1",
            "--cores",
            "2",
            "--memory",
            "2g",
            "--webui-port",
            "0",
            "--work-dir",
            str(work_dir / "work"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in (worker, master):
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(30)
