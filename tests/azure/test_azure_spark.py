"""Spark on azurite: a stream from an abfss:// queue into another (source and sink), killed with
kill -9 mid-stream and restarted, delivers each entry exactly once. The Azure store reaches Spark
as a Python user adds it: configure_spark_with_osqueue(stores=["azure"]), resolved from the
build's Maven repository (bash .ci/sbt publishBuildRepo) with a fresh Ivy cache."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

pytest.importorskip("pyspark")

import osqueue  # noqa: E402
from osqueue._jar import installed_scala_version  # noqa: E402

from .support import Azurite  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1] / "target" / "maven-repo"


@pytest.fixture(scope="module")
def published() -> pathlib.Path:
    artifact = (
        REPO / "io" / "github" / "osqueue" / f"osqueue-azure_{installed_scala_version()[:4]}" / osqueue.__version__
    )
    if not artifact.is_dir():
        message = f"{artifact} is not published: run `bash .ci/sbt publishBuildRepo`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return REPO


def _produce(uri: str, options: dict[str, str], batches: int, per_batch: int) -> list[str]:
    values = []
    with osqueue.Producer(uri, flush_interval=3600, store_options=options) as p:
        for b in range(batches):
            entries = [f"e{b}-{i}".encode() for i in range(per_batch)]
            p.produce(entries, metadata=f"m{b}".encode())
            p.flush()
            values += [e.decode() for e in entries]
    return values


def _drain(uri: str, options: dict[str, str]) -> list[str]:
    values = []
    with osqueue.Consumer(uri, store_options=options) as c:
        while (b := c.next_batch()) is not None:
            values += [v.decode() for v in b.entries]
            c.ack(b.sequence)
    return values


def test_stream_source_and_sink_on_azurite_survive_kill_dash_nine_with_exact_counts(
    published: pathlib.Path, azurite: Azurite, container: str, tmp_path: pathlib.Path
) -> None:
    source, sink = azurite.uri(container, "in"), azurite.uri(container, "out")
    expected = _produce(source, azurite.options, batches=20, per_batch=3)
    confs = [
        f"spark.jars.repositories=file://{published}",
        f"spark.jars.ivy={tmp_path / 'ivy'}",
        *(f"spark.hadoop.{k}={v}" for k, v in azurite.options.items()),
    ]
    args = [
        sys.executable,
        str(HERE / "azure_stream_job.py"),
        source,
        sink,
        str(tmp_path / "ckpt"),
        *(x for c in confs for x in ("--conf", c)),
    ]
    log = tmp_path / "job.log"

    def manifest(uri: str) -> Any:
        from osqueue.queue import ManifestStore
        from osqueue.store import open_store

        store = open_store(uri, azurite.options)
        try:
            obj = store.get("ingest/manifest")
            return None if obj is None else ManifestStore(store, "ingest/manifest").decode(obj.data)
        finally:
            store.close()

    def sink_sequence() -> int:
        m = manifest(sink)
        return 0 if m is None else m.next_sequence

    with open(log, "w") as out:
        job = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 240
        while sink_sequence() < 3 and time.time() < deadline:  # a few micro-batches in: mid-stream
            if job.poll() is not None:
                pytest.fail("stream job exited early:\n" + log.read_text()[-5000:])
            time.sleep(0.2)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    left = len(manifest(source).entries)
    assert 0 < left < 20, f"the kill came with {left} of 20 source batches unacked: not mid-stream"
    with open(log, "a") as out:
        again = subprocess.run([*args, "--available-now"], stdout=out, stderr=subprocess.STDOUT, timeout=300)
    assert again.returncode == 0, log.read_text()[-5000:]
    # Exactly once through both the source's acks and the sink's idempotent commits.
    delivered = _drain(sink, azurite.options)
    assert len(delivered) == len(expected) == 60
    assert sorted(delivered) == sorted(expected)
    assert _drain(source, azurite.options) == [], "the source queue still holds what Spark committed"


def test_configure_with_stores_adds_the_azure_artifact_and_nothing_to_the_wheel_jar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark.sql import SparkSession

    from osqueue import spark as osp

    monkeypatch.setattr(osp, "jar_path", lambda *a: "/opt/osqueue.jar")
    builder = SparkSession.builder.config("spark.jars.packages", "org.example:lib:1.0")
    osp.configure_spark_with_osqueue(builder, stores=["azure"])
    options = dict(builder._options)
    assert options["spark.jars"] == "/opt/osqueue.jar"
    scala = installed_scala_version()[:4]
    assert (
        options["spark.jars.packages"]
        == f"org.example:lib:1.0,io.github.osqueue:osqueue-azure_{scala}:{osqueue.__version__}"
    )
    with pytest.raises(TypeError, match="list of store names"):
        osp.configure_spark_with_osqueue(SparkSession.builder, stores="azure")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown store 'azrue'"):
        osp.configure_spark_with_osqueue(SparkSession.builder, stores=["azrue"])
    # The read/write helpers take hadoop-azure's keys as store options.
    assert osp.source_options(store_options={"fs.azure.account.key.a.dfs.core.windows.net": "k"}) == {
        "fs.azure.account.key.a.dfs.core.windows.net": "k"
    }
