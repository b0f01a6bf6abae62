"""The JVM connector through Spark Connect: every entry point from one Connect session per module.

The server is the one PySpark starts for `SparkSession.builder.remote("local[2]")`, configured
by `configure_spark_with_osqueue` (tests/spark/connect_server.py, its own process: a classic and a
Connect session cannot share one Python process, and the other Spark tests share a classic one);
this module talks to it as a Connect client over 127.0.0.1. Runs on every pyspark line of the
matrix (3.5 resolves the spark-connect package, Scala 2.12, through Spark's Ivy); what a line
lacks is skipped with the reason. Needs `pyspark[connect]` (grpcio, pandas, pyarrow). One test, the
Python source's kill -9, starts and kills servers of its own (and drains on the module's).
"""

from __future__ import annotations

import inspect
import json
import os
import pathlib
import select
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

pyspark = pytest.importorskip("pyspark")
for _module in ("grpc", "google.protobuf", "pandas", "pyarrow"):
    pytest.importorskip(_module, reason="Spark Connect needs pip install 'pyspark[connect]' (grpcio, pandas, pyarrow)")

import osqueue.spark as osq  # noqa: E402

from .support import manifest, native_values, produce_entries  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
SPARK = tuple(int(p) for p in pyspark.__version__.split(".")[:2])
STARTUP_S = 300.0  # 3.5's first run resolves spark-connect from Maven into Ivy's cache
WAIT_S = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn_server(work: pathlib.Path):
    """Starts a Connect server (connect_server.py) in a process group of its own, on a free port, and
    returns at once: (process, client URL, log file) for _await_server."""
    port = _free_port()
    token = uuid.uuid4().hex if SPARK >= (4, 0) else None  # 3.5's server has no authentication
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_PYTHON"] = sys.executable  # the server's Python workers import osqueue (the Python data source)
    if token:
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    log = work / f"server-{port}.log"
    with open(log, "w") as err:
        server = subprocess.Popen(
            [sys.executable, str(HERE / "connect_server.py"), str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=work,
            env=env,
            start_new_session=True,
        )
    return server, f"sc://localhost:{port}" + (f"/;token={token}" if token else ""), log


def _await_server(spawned):
    """The process and client URL of a server _spawn_server started, once it serves (pytest.fail with
    its output if it does not)."""
    server, url, log = spawned
    deadline = time.monotonic() + STARTUP_S
    said = []  # the server's stdout: Spark's Ivy prints there on 3.5, then `ready`
    while time.monotonic() < deadline and server.poll() is None and "ready" not in said:
        if select.select([server.stdout], [], [], 0.5)[0]:
            said.append(server.stdout.readline().strip())
    if "ready" not in said:
        _kill_server(server)
        out = "\n".join(said)[-2000:]
        pytest.fail(f"the Connect server did not start (exit {server.poll()}):\n{out}\n{log.read_text()[-4000:]}")
    return server, url


def _start_server(work: pathlib.Path):
    return _await_server(_spawn_server(work))


def _kill_server(server) -> None:
    """kill -9 of the server's process group: its JVM, and the Python workers it started."""
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is gone already (a server that failed to start)
        pass
    server.wait(30)


def _client(url: str, new: bool = False):
    """A Connect client session on `url` (`new`: a session of its own, not the process's default one,
    on a server the test kills: its calls retry for about a second, not Connect's 10 minutes, since
    the client's release threads are shared and the session's end waits for them)."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    builder = RemoteSparkSession.builder.remote(url)
    spark = builder.create() if new else builder.getOrCreate()
    if new:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        spark.client.set_retry_policies([DefaultPolicy(max_retries=4)])
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    spark.conf.set("spark.sql.streaming.stopTimeout", "30s")
    if SPARK >= (4, 1):
        spark.conf.set("spark.sql.streaming.realTimeMode.minBatchDuration", "500")
    return spark


@pytest.fixture(scope="module")
def connect(tmp_path_factory):
    """A Connect client session on a local server that has the connector (one per module)."""
    server, url = _start_server(tmp_path_factory.mktemp("connect-server"))
    try:
        spark = _client(url)
        yield spark
        spark.stop()
    finally:  # the server keeps nothing: its state is in this module's temporary directories
        _kill_server(server)


def _values(rows) -> list[str]:
    """The rows' values in queue order (sequence, index)."""
    return [bytes(r["value"]).decode() for r in sorted(rows, key=lambda r: (r["sequence"], r["index"]))]


def _queued(queue) -> list[int]:
    return [e.sequence for e in manifest(queue).entries]


def _committed_through(ckpt: pathlib.Path) -> int:
    """The queue's next sequence at the end of the last batch in Spark's commit log (-1: none yet):
    read from the checkpoint's files, so that waiting for it runs no Spark job."""
    commits = [int(p.name) for p in (ckpt / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return -1
    return int(json.loads((ckpt / "offsets" / str(max(commits))).read_text().splitlines()[-1])["nextSequence"])


def _parquet_values(spark, out: pathlib.Path) -> list[str]:
    if not (out / "_spark_metadata").is_dir():
        return []
    rows = spark.read.schema("value binary").parquet(str(out)).selectExpr("cast(value as string) v").collect()
    return [r["v"] for r in rows]


def test_batch_read_with_a_window(connect, queue_dir):
    expected = produce_entries(str(queue_dir), batches=3, per_batch=4)
    assert _values(connect.read.format("osqueue").load(str(queue_dir)).collect()) == expected
    second = manifest(queue_dir).entries[1].sequence
    window = connect.read.format("osqueue").option("startingSequence", second).option("endingSequence", second + 1)
    assert _values(window.load(str(queue_dir)).collect()) == expected[4:8]
    assert len(_queued(queue_dir)) == 3, "a batch read acknowledges nothing"


def test_read_stream_micro_batches_deliver_each_entry_once_and_dequeue_what_spark_committed(
    connect, queue_dir, tmp_path
):
    first = produce_entries(str(queue_dir), batches=2, per_batch=3, tag="a")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    query = (
        connect.readStream.format("osqueue")
        .option("maxBatchesPerTrigger", "2")
        .load(str(queue_dir))
        .select("value", "sequence")
        .writeStream.format("parquet")
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="200 milliseconds")
        .start(str(out))
    )
    try:
        later = produce_entries(str(queue_dir), batches=2, per_batch=3, tag="b")
        end = manifest(queue_dir).next_sequence
        deadline = time.monotonic() + WAIT_S
        while _committed_through(ckpt) < end and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.1)
    finally:
        query.stop()
    assert _committed_through(ckpt) == end
    assert sorted(_parquet_values(connect, out)) == sorted(first + later)
    assert _queued(queue_dir) == [], "the end of the run dequeues every batch Spark committed"


def test_available_now_reads_everything_and_leaves_nothing_it_delivered_queued(connect, queue_dir, tmp_path):
    expected = produce_entries(str(queue_dir), batches=3, per_batch=2)
    out = tmp_path / "out"
    query = (
        connect.readStream.format("osqueue")
        .load(str(queue_dir))
        .select("value")
        .writeStream.format("parquet")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start(str(out))
    )
    assert query.awaitTermination(WAIT_S), "the AvailableNow run did not finish"
    assert query.exception() is None
    assert sorted(_parquet_values(connect, out)) == sorted(expected)
    assert _queued(queue_dir) == []


def test_write_appends_once_per_writer_batch_id(connect, queue_dir):
    values = [f"w{i}" for i in range(5)]
    df = connect.createDataFrame([(v.encode(),) for v in values], "value binary")
    for _ in range(2):  # the retry of the same (writerId, writerBatchId) adds nothing
        df.write.format("osqueue").mode("append").option("writerId", "connect-test").option("writerBatchId", "7").save(
            str(queue_dir)
        )
    assert sorted(native_values(queue_dir)) == values


def test_write_stream_from_one_queue_into_another(connect, tmp_path):
    source, target = tmp_path / "source", tmp_path / "target"
    expected = produce_entries(str(source), batches=3, per_batch=2, tag="s")
    query = (
        connect.readStream.format("osqueue")
        .load(str(source))
        .select("value", "metadata")
        .writeStream.format("osqueue")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start(str(target))
    )
    assert query.awaitTermination(WAIT_S), "the AvailableNow run did not finish"
    assert query.exception() is None
    assert sorted(native_values(target)) == sorted(expected)
    assert _queued(source) == []


def test_real_time_trigger(connect, queue_dir, tmp_path):
    from pyspark.sql.connect.streaming.readwriter import DataStreamWriter

    if "realTime" not in inspect.signature(DataStreamWriter.trigger).parameters:
        pytest.skip(f"pyspark {pyspark.__version__} has no trigger(realTime=...) under Spark Connect (4.2+)")
    expected = produce_entries(str(queue_dir), batches=3, per_batch=2, tag="r")
    out = tmp_path / "out"
    out.mkdir()

    class Rows:  # defined here, so that the server's Python worker gets it by value
        def __init__(self, out):
            self.out, self.f = out, None

        def open(self, partition_id, epoch_id):
            self.f = open(f"{self.out}/epoch-{epoch_id}-p{partition_id}.jsonl", "w")
            return True

        def process(self, r):
            self.f.write(json.dumps({"s": r.sequence, "i": r["index"], "v": bytes(r.value).decode()}) + "\n")
            self.f.flush()

        def close(self, error):
            if self.f is not None:
                self.f.close()

    def delivered():
        rows = [json.loads(x) for f in out.glob("epoch-*.jsonl") for x in f.read_text().splitlines() if x.endswith("}")]
        return [r["v"] for r in sorted(rows, key=lambda r: (r["s"], r["i"]))]

    writer = (
        connect.readStream.format("osqueue")
        .option("gc", "false")
        .load(str(queue_dir))
        .writeStream.outputMode("update")
        .foreach(Rows(str(out)))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    query = osq.trigger_real_time(writer, "1 second").start()
    try:
        deadline = time.monotonic() + WAIT_S
        while delivered() != expected and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
    finally:
        query.stop()
    assert delivered() == expected


def test_an_osqueue_error_condition_reaches_the_connect_exception(connect, queue_dir):
    from pyspark.errors import IllegalArgumentException, PySparkException

    produce_entries(str(queue_dir), batches=1, per_batch=1)
    with pytest.raises(PySparkException) as e:
        connect.read.format("osqueue").option("startingSequence", "-1").load(str(queue_dir)).collect()
    err = e.value
    assert str(err).startswith("[OSQUEUE_INVALID_OPTION_VALUE] "), str(err)
    assert "'startingsequence': '-1'" in str(err).lower()
    if SPARK < (4, 0):
        # PySpark 3.5's Connect client builds its exceptions from the class names and the message
        # alone (pyspark/errors/exceptions/connect.py): no condition, no parameters.
        assert isinstance(err, IllegalArgumentException) and err.getErrorClass() is None
        return
    assert err.getCondition() == "OSQUEUE_INVALID_OPTION_VALUE", (err.getCondition(), str(err))
    assert err.getMessageParameters().get("option", "").lower() == "startingsequence", err.getMessageParameters()


def test_python_data_source_in_a_connect_session(connect, tmp_path):
    """The Python data source (osqueue_python) registered from a Connect client, run by the server's
    Python workers: batch read, df.write replayed, AvailableNow through the Python sink
    (tests/spark/python_source_scenario.py; the classic case is in test_python_source.py)."""
    if SPARK < (4, 0):
        pytest.skip(f"pyspark {pyspark.__version__} has no Python data source API (4.0+)")
    pytest.importorskip("pyspark.sql.datasource")
    from . import python_source_scenario

    python_source_scenario.run(connect, tmp_path)


def _batch_files(out: str):
    """A foreachBatch function writing each micro-batch's rows to OUT/batch-<id>.json (temp + rename):
    a replayed batch id rewrites its own file, so the output is exactly once by batch id. Made here, so
    that the server's Python worker gets it by value."""

    def write_batch(batch_df, batch_id):
        rows = [
            {"sequence": r["sequence"], "index": r["index"], "value": bytes(r["value"]).decode()}
            for r in batch_df.select("sequence", "index", "value").collect()
        ]
        tmp = os.path.join(out, f".batch-{batch_id}.tmp")
        with open(tmp, "w") as f:
            json.dump(rows, f)
        os.replace(tmp, os.path.join(out, f"batch-{batch_id}.json"))

    return write_batch


def _batch_file_values(out: pathlib.Path) -> list[str]:
    rows = [r for f in out.glob("batch-*.json") for r in json.loads(f.read_text())]
    return [r["value"] for r in sorted(rows, key=lambda r: (r["sequence"], r["index"]))]


@pytest.mark.line_ends
def test_python_source_kill_dash_nine_of_the_server_twice_then_available_now_gives_exact_counts(
    connect, queue_dir, tmp_path
):
    """The Python data source (osqueue_python) in a stream hosted by a Connect server, with entries
    produced while it runs: the server's process group (its JVM and the Python workers running the
    source and the foreachBatch sink) killed with -9 twice mid-stream, each time a new server on a new
    port restarting the query from the same checkpoint; then AvailableNow runs drain the queue: every
    entry delivered exactly once (by batch id) and nothing delivered left queued. (The classic case is
    test_python_source.py's test_kill_dash_nine_mid_stream_twice_then_restart_gives_exact_counts.)"""
    if SPARK < (4, 0):
        pytest.skip(f"pyspark {pyspark.__version__} has no Python data source API (4.0+)")
    pytest.importorskip("pyspark.sql.datasource")
    from osqueue.spark_source import register

    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    out.mkdir()

    def start(spark, available_now: bool):
        writer = (
            spark.readStream.format(register(spark))
            .option("checkpointLocation", str(ckpt))
            .load(str(queue_dir))
            .writeStream.foreachBatch(_batch_files(str(out)))
            .option("checkpointLocation", str(ckpt))
        )
        return (
            writer.trigger(availableNow=True).start()
            if available_now
            else writer.trigger(processingTime="200 milliseconds").start()
        )

    expected: list[str] = []
    spawned = [_spawn_server(tmp_path)]
    try:
        for run in range(2):
            server, url = _await_server(spawned[run])
            query = start(_client(url, new=True), available_now=False)
            if run == 0:  # the next server starts while this one runs (it restarts the query once this dies)
                spawned.append(_spawn_server(tmp_path))
            # Delivered while it runs (on the second server: after what the first server's kill left).
            expected += produce_entries(str(queue_dir), batches=2, per_batch=2, tag=f"r{run}-")
            deadline = time.monotonic() + WAIT_S
            while expected[-1] not in _batch_file_values(out):
                assert time.monotonic() < deadline, f"run {run}: {expected[-1]} was not delivered"
                assert query.exception() is None, query.exception()
                time.sleep(0.1)
            # Entries the query has not read yet as the server dies: a micro-batch may be mid-flight.
            expected += produce_entries(str(queue_dir), batches=1, per_batch=2, tag=f"r{run}-kill-")
            _kill_server(server)  # the client session goes with it: it is never used again
    finally:
        for server, _, _ in spawned:  # (a server killed already is skipped)
            _kill_server(server)
    expected += produce_entries(str(queue_dir), batches=2, per_batch=2, tag="last-")
    # pyspark 4.0 and 4.1 run AvailableNow on a Python source as ONE micro-batch: a run after a kill may
    # first replay the batch the kill left uncommitted, and the next one reads the rest (4.2+ drains in
    # the first). On the module's server: a fresh one would cost another start.
    for _ in range(2):
        query = start(connect, available_now=True)
        assert query.awaitTermination(WAIT_S), "the AvailableNow run did not finish"
        assert query.exception() is None, query.exception()
        if _batch_file_values(out) == expected:
            break
    assert _batch_file_values(out) == expected
    # On 4.0 and 4.1 the reader's stop() dequeues the last committed micro-batch just after the query ends.
    deadline = time.monotonic() + 30
    while _queued(queue_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _queued(queue_dir) == [], "entries delivered are still queued"
