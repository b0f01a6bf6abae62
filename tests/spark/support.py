"""Helpers shared by the Spark tests and the stream job they run as a separate process."""
from __future__ import annotations

import os

import osqueue

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
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )


def produce_entries(path: str, batches: int, per_batch: int, store_options=None, tag: str = "e") -> list[str]:
    """Writes `batches` batches of `per_batch` entries; returns the entries in queue order."""
    values = []
    with osqueue.Producer(path, flush_interval=3600, store_options=store_options) as p:
        for b in range(batches):
            entries = [f"{tag}{b}-{i}".encode() for i in range(per_batch)]
            p.produce(entries, metadata=f"meta-{tag}{b}".encode())
            p.flush()
            values += [e.decode() for e in entries]
    return values
