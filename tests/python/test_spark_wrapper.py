"""osqueue.spark: session configuration, version checks, option helpers, and one real Spark read."""

from __future__ import annotations

import datetime
import pathlib
import shutil
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install osqueue[spark])")

from pyspark.sql import SparkSession  # noqa: E402

import osqueue  # noqa: E402
import osqueue.spark as osp  # noqa: E402
from osqueue import _jar  # noqa: E402
from osqueue.producer import Producer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYSPARK_JARS = pathlib.Path(pyspark.__file__).resolve().parent / "jars"


def _builder_options(builder: Any) -> dict[str, str]:
    # The builder keeps its settings in a dict until getOrCreate(); reading it starts no JVM.
    return dict(builder._options)


JAR_REQUESTS: list[tuple[str | None, str | None]] = []


@pytest.fixture
def fake_jar(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    jar = tmp_path / "osqueue-spark-test.jar"
    jar.write_bytes(b"")
    JAR_REQUESTS.clear()

    def fake(spark_version: str | None = None, scala_version: str | None = None) -> str:
        JAR_REQUESTS.append((spark_version, scala_version))
        return str(jar)

    monkeypatch.setattr(osp, "jar_path", fake)
    return str(jar)


# -- configure_spark_with_osqueue -----------------------------------------------------------------


def test_jar_path_is_exported() -> None:
    assert osp.jar_path is osqueue.jar_path
    assert "jar_path" in osqueue.__all__


def test_configure_appends_the_jar_and_keeps_existing_jars(fake_jar: str) -> None:
    builder = SparkSession.builder.appName("t").config("spark.jars", "/opt/a.jar, /opt/b.jar")
    assert osp.configure_spark_with_osqueue(builder) is builder
    options = _builder_options(builder)
    assert options["spark.jars"] == f"/opt/a.jar,/opt/b.jar,{fake_jar}"
    assert "spark.jars.packages" not in options
    osp.configure_spark_with_osqueue(builder)  # twice: no duplicate
    assert _builder_options(builder)["spark.jars"] == f"/opt/a.jar,/opt/b.jar,{fake_jar}"


def test_configure_with_s3_adds_hadoop_aws_of_the_installed_hadoop(fake_jar: str) -> None:
    (api,) = PYSPARK_JARS.glob("hadoop-client-api-*.jar")
    hadoop = api.name[len("hadoop-client-api-") : -len(".jar")]
    builder = SparkSession.builder.config("spark.jars.packages", "org.example:lib:1.0")
    osp.configure_spark_with_osqueue(builder, s3=True, extra_packages=["io.delta:delta-spark_2.13:4.0.0"])
    options = _builder_options(builder)
    assert options["spark.jars"] == fake_jar
    assert options["spark.jars.packages"] == (
        f"org.example:lib:1.0,io.delta:delta-spark_2.13:4.0.0,org.apache.hadoop:hadoop-aws:{hadoop}"
    )
    assert osp.installed_hadoop_version() == hadoop


def test_configure_with_extra_packages_only(fake_jar: str) -> None:
    builder = SparkSession.builder
    osp.configure_spark_with_osqueue(builder, extra_packages=["a:b:1", "c:d:2"])
    assert _builder_options(builder)["spark.jars.packages"] == "a:b:1,c:d:2"
    with pytest.raises(TypeError, match="list of Maven coordinates"):
        osp.configure_spark_with_osqueue(SparkSession.builder, extra_packages="a:b:1")  # type: ignore[arg-type]


def test_configure_with_stores_adds_each_store_artifact_for_the_installed_scala(fake_jar: str) -> None:
    builder = SparkSession.builder.config("spark.jars.packages", "org.example:lib:1.0")
    osp.configure_spark_with_osqueue(builder, stores=["gcs", "azure"])
    scala = ".".join(osp.installed_scala_version().split(".")[:2])
    assert _builder_options(builder)["spark.jars.packages"] == (
        f"org.example:lib:1.0,io.github.osqueue:osqueue-gcs_{scala}:{osqueue.__version__},"
        f"io.github.osqueue:osqueue-azure_{scala}:{osqueue.__version__}"
    )
    assert fake_jar not in _builder_options(builder)["spark.jars.packages"]  # the wheel's jar stays in spark.jars
    with pytest.raises(ValueError, match="unknown store 'hdfs'.*known: azure, gcs"):
        osp.configure_spark_with_osqueue(SparkSession.builder, stores=["hdfs"])
    with pytest.raises(TypeError, match="list of store names"):
        osp.configure_spark_with_osqueue(SparkSession.builder, stores="gcs")  # type: ignore[arg-type]


@pytest.mark.parametrize("not_a_builder", [None, "builder", {"spark.jars": "x"}, SparkSession])
def test_configure_rejects_anything_but_a_builder(not_a_builder: Any, fake_jar: str) -> None:
    with pytest.raises(TypeError, match="must be called with a SparkSession builder") as e:
        osp.configure_spark_with_osqueue(not_a_builder)
    assert type(not_a_builder).__qualname__ in str(e.value)


@pytest.mark.parametrize(
    ("spark", "scala", "line", "error"),
    [
        ("4.1.3", "2.13.17", ("4.1", "2.13"), None),
        ("4.1.0", "2.13.16", ("4.1", "2.13"), None),
        ("4.1.3", None, ("4.1", "2.13"), None),  # no jars dir to tell: Spark 4 has only Scala 2.13
        ("3.5.7", "2.12.18", ("3.5", "2.12"), None),
        ("3.5.1", "2.13.8", ("3.5", "2.13"), None),
        ("3.5.7", None, ("3.5", "2.12"), None),  # Spark 3.5's default Scala
        ("4.0.1", "2.13.16", ("4.0", "2.13"), None),
        ("4.2.1", "2.13.18", ("4.2", "2.13"), None),
        ("4.3.0", "2.13.18", ("4.2", "2.13"), None),  # newer than the newest line: its jar
        ("4.10.0", "2.13.18", ("4.2", "2.13"), None),
        ("3.4.1", "2.12.17", None, "no Spark connector for Spark 3.4.1 with Scala 2.12"),
        ("4.1.3", "2.12.18", None, "no Spark connector for Spark 4.1.3 with Scala 2.12"),
        ("4.3.0", "3.3.4", None, "no Spark connector for Spark 4.3.0 with Scala 3.3"),
    ],
)
def test_the_jar_is_chosen_by_the_installed_pyspark(
    spark: str,
    scala: str | None,
    line: tuple[str, str] | None,
    error: str | None,
    fake_jar: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(osp, "installed_spark_version", lambda: spark)
    monkeypatch.setattr(osp, "installed_scala_version", lambda: scala)
    builder = SparkSession.builder
    if error is None:
        osp.configure_spark_with_osqueue(builder)
        assert _builder_options(builder)["spark.jars"] == fake_jar
        assert JAR_REQUESTS == [(spark, scala)]
        assert _jar.connector_for(spark, scala)[:2] == line
        assert _jar.connector_for(spark, scala)[2] == (line[0] != spark.rsplit(".", 1)[0])
        return
    with pytest.raises(RuntimeError) as e:
        osp.configure_spark_with_osqueue(builder)
    assert error in str(e.value)
    assert "it is built for Spark 3.5 with Scala 2.12, Spark 3.5 with Scala 2.13, Spark 4.0 with Scala 2.13" in str(
        e.value
    )
    assert "spark.jars" not in _builder_options(builder)
    assert JAR_REQUESTS == []


@pytest.mark.jvm  # the bundled jars exist once sbt has built them
def test_jar_path_joins_the_bundled_core_and_the_line_connector_once(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OSQUEUE_CACHE_DIR", str(tmp_path / "cache"))
    try:
        _jar.bundled_jars("3.5", "2.12")
    except FileNotFoundError:
        pytest.skip("osqueue is not installed with its jars (pip install .)")
    path = pathlib.Path(osqueue.jar_path("3.5.7"))
    assert path.parent == tmp_path / "cache" and path.name.startswith("osqueue-spark-3.5-assembly_2.12-")
    with zipfile.ZipFile(path) as jar:
        names = set(jar.namelist())
        services = jar.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode()
        built_for = jar.read("osqueue/spark/BuiltFor$.class")
    assert {"osqueue/spark/OsqueueSourceProvider.class", "osqueue/format/ManifestCodec$.class"} <= names
    assert any(n.startswith("osqueue/shaded/awssdk/") for n in names)
    assert not any(n.startswith(("software/amazon/awssdk/", "scala/collection/")) for n in names)
    assert services.split() == ["osqueue.spark.OsqueueSourceProvider"]
    assert b"osqueue-spark-3.5_2.12" in built_for
    mtime = path.stat().st_mtime_ns
    assert osqueue.jar_path("3.5") == str(path) and path.stat().st_mtime_ns == mtime  # cached
    assert pathlib.Path(osqueue.jar_path("3.5", "2.13")).name.startswith("osqueue-spark-3.5-assembly_2.13-")
    with pytest.warns(UserWarning, match="Spark 4.3.0 is newer than the newest Spark line"):
        newest = osqueue.jar_path("4.3.0")
    assert pathlib.Path(newest).name.startswith("osqueue-spark-4.2-assembly_2.13-")


def test_installed_versions_are_read_from_pyspark() -> None:
    assert osp.installed_spark_version() == pyspark.__version__
    (scala_jar,) = PYSPARK_JARS.glob("scala-library-*.jar")
    assert osp.installed_scala_version() == scala_jar.name[len("scala-library-") : -len(".jar")]


def test_s3_needs_a_known_hadoop_version(fake_jar: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(osp, "installed_hadoop_version", lambda: None)
    with pytest.raises(RuntimeError, match="hadoop-aws"):
        osp.configure_spark_with_osqueue(SparkSession.builder, s3=True)


# -- Spark Connect builders (tests/spark/test_connect.py runs a real server on every line) ---------


def test_a_local_connect_builder_gets_the_jar_and_on_pyspark_4_nothing_else(
    fake_jar: str, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.setattr(osp, "installed_spark_version", lambda: "4.1.3")
    monkeypatch.setattr(osp, "installed_scala_version", lambda: "2.13.17")
    jars = {"spark-connect_2.13-4.1.3.jar"}  # PySpark 4 ships the server
    fake_jars = _fake_jars_dir(tmp_path / "jars", jars)
    monkeypatch.setattr(_jar, "_pyspark_jars_dir", lambda: fake_jars)
    for builder in (
        SparkSession.builder.remote("local[2]"),
        SparkSession.builder.master("local[2]").config("spark.api.mode", "connect"),
    ):
        assert osp.configure_spark_with_osqueue(builder) is builder
        assert _builder_options(builder)["spark.jars"] == fake_jar
        assert "spark.jars.packages" not in _builder_options(builder)


def test_a_local_connect_builder_on_pyspark_3_5_also_gets_the_spark_connect_package(
    fake_jar: str, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.setattr(osp, "installed_spark_version", lambda: "3.5.7")
    monkeypatch.setattr(osp, "installed_scala_version", lambda: "2.12.18")
    fake_jars = _fake_jars_dir(tmp_path / "jars", {"spark-sql_2.12-3.5.7.jar"})
    monkeypatch.setattr(_jar, "_pyspark_jars_dir", lambda: fake_jars)
    builder = SparkSession.builder.remote("local[2]").config("spark.jars.packages", "a:b:1")
    osp.configure_spark_with_osqueue(builder)
    assert _builder_options(builder)["spark.jars"] == fake_jar
    assert _builder_options(builder)["spark.jars.packages"] == "a:b:1,org.apache.spark:spark-connect_2.12:3.5.7"
    given = SparkSession.builder.remote("local").config(
        "spark.jars.packages", "org.apache.spark:spark-connect_2.12:3.5.6"
    )
    osp.configure_spark_with_osqueue(given)  # the user's own choice is kept, not doubled
    assert _builder_options(given)["spark.jars.packages"] == "org.apache.spark:spark-connect_2.12:3.5.6"
    classic = SparkSession.builder.master("local[2]")
    osp.configure_spark_with_osqueue(classic)
    assert "spark.jars.packages" not in _builder_options(classic)


def test_a_builder_for_a_connect_server_elsewhere_is_refused_naming_what_to_do(
    fake_jar: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    builder = SparkSession.builder.remote("sc://spark.example:15002")
    with pytest.raises(ValueError, match="Connect server at sc://spark.example:15002.*--jars.*--packages"):
        osp.configure_spark_with_osqueue(builder)
    assert "spark.jars" not in _builder_options(builder)
    monkeypatch.setenv("SPARK_REMOTE", "sc://other:15002")
    assert osp.connect_url({}) == "sc://other:15002"
    with pytest.raises(ValueError, match="sc://other:15002"):
        osp.configure_spark_with_osqueue(SparkSession.builder)


def _fake_jars_dir(d: pathlib.Path, names: set[str]) -> pathlib.Path:
    d.mkdir()
    for name in names:
        (d / name).write_bytes(b"")
    return d


class _ConnectLikeWriter:
    """A DataStreamWriter as Spark Connect's on PySpark 4.1: no realTime, no JVM writer."""

    def trigger(self, *, processingTime: str | None = None, availableNow: bool | None = None) -> Any:
        raise AssertionError("not called")


class _WriterWithRealTime:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def trigger(self, *, processingTime: str | None = None, realTime: str | None = None) -> Any:
        self.calls.append({"processingTime": processingTime, "realTime": realTime})
        return self


def test_trigger_real_time_uses_pyspark_s_argument_where_it_exists_and_names_what_is_missing() -> None:
    w = _WriterWithRealTime()
    assert osp.trigger_real_time(w, "10 seconds") is w  # type: ignore[arg-type]
    assert w.calls == [{"processingTime": None, "realTime": "10 seconds"}]
    with pytest.raises(
        RuntimeError, match=r"cannot be set with pyspark .*_ConnectLikeWriter: it needs classic PySpark 4.1"
    ):
        osp.trigger_real_time(_ConnectLikeWriter(), "10 seconds")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty string"):
        osp.trigger_real_time(w, " ")  # type: ignore[arg-type]


# -- option helpers (no JVM: a recorder stands in for Spark) -------------------------------------


class Recorder:
    """Records the DataFrame API calls made on it; every call returns the recorder."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        if name in ("readStream", "read", "writeStream"):
            self.calls.append((name, (), {}))
            return self

        def call(*args: Any, **kwargs: Any) -> Recorder:
            self.calls.append((name, args, kwargs))
            return self

        return call

    def options_set(self) -> dict[str, str]:
        return {args[0]: args[1] for name, args, _ in self.calls if name == "option"}


def test_read_stream_emits_format_options_and_load() -> None:
    spark = Recorder()
    osp.read_stream(
        spark,  # type: ignore[arg-type]
        "s3a://bucket/q",
        max_batches_per_trigger=10,
        min_batches_per_trigger=2,
        max_trigger_delay=30,
        fail_on_data_loss=False,
        gc=True,
        gc_interval=datetime.timedelta(minutes=5),
        gc_grace_period="10m",
        manifest_path="q/manifest",
        data_path_prefix="q/data",
        store_options={"fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.path.style.access": True},
    )
    assert spark.calls[:2] == [("readStream", (), {}), ("format", ("osqueue",), {})]
    assert spark.calls[-1] == ("load", ("s3a://bucket/q",), {})
    assert spark.options_set() == {
        "maxBatchesPerTrigger": "10",
        "minBatchesPerTrigger": "2",
        "maxTriggerDelay": "30000ms",
        "failOnDataLoss": "false",
        "gc": "true",
        "gcInterval": "300000ms",
        "gcGracePeriod": "10m",
        "manifestPath": "q/manifest",
        "dataPathPrefix": "q/data",
        "fs.s3a.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.path.style.access": "true",
    }


def test_read_stream_with_defaults_sets_no_option() -> None:
    spark = Recorder()
    osp.read_stream(spark, "/data/q")  # type: ignore[arg-type]
    assert spark.calls == [("readStream", (), {}), ("format", ("osqueue",), {}), ("load", ("/data/q",), {})]


def test_read_emits_a_batch_read_window() -> None:
    spark = Recorder()
    osp.read(spark, "/data/q", starting_sequence=5, ending_sequence=9, fail_on_data_loss=True)  # type: ignore[arg-type]
    assert spark.calls[:2] == [("read", (), {}), ("format", ("osqueue",), {})]
    assert spark.calls[-1] == ("load", ("/data/q",), {})
    assert spark.options_set() == {"startingSequence": "5", "endingSequence": "9", "failOnDataLoss": "true"}


def test_write_stream_returns_an_unstarted_writer() -> None:
    df = Recorder()
    writer = osp.write_stream(
        df,  # type: ignore[arg-type]
        "/data/q",
        checkpoint_location="/chk",
        compression="zstd",
        flush_size_bytes=1 << 20,
        writer_id="job-1",
        gc_grace_period=600,
        trigger={"processingTime": "10 seconds"},
    )
    assert writer is df
    assert df.calls[:2] == [("writeStream", (), {}), ("format", ("osqueue",), {})]
    assert df.options_set() == {
        "path": "/data/q",
        "checkpointLocation": "/chk",
        "compression": "zstd",
        "flushSizeBytes": "1048576",
        "writerId": "job-1",
        "gcGracePeriod": "600000ms",
    }
    assert df.calls[-1] == ("trigger", (), {"processingTime": "10 seconds"})
    assert not any(name == "start" for name, _, _ in df.calls)
    with pytest.raises(ValueError, match="checkpoint_location"):
        osp.write_stream(Recorder(), "/data/q", checkpoint_location="")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(30, "30000ms"), (0.25, "250ms"), (1.5, "1500ms"), (datetime.timedelta(seconds=2), "2000ms"), ("5m", "5m")],
)
def test_durations(value: Any, expected: str) -> None:
    assert osp.source_options(gc_interval=value) == {"gcInterval": expected}


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"gc_interval": True}, TypeError),
        ({"gc_interval": 0}, ValueError),
        ({"gc_interval": 0.0001}, ValueError),
        ({"gc_interval": [1]}, TypeError),
        ({"max_batches_per_trigger": 1.5}, TypeError),
        ({"max_batches_per_trigger": True}, TypeError),
        ({"gc": "yes"}, TypeError),
        ({"store_options": {"spark.executor.memory": "1g"}}, ValueError),
    ],
)
def test_bad_helper_arguments(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        osp.source_options(**kwargs)


# -- one real local Spark session reading a queue written by osqueue.Producer ---------------------


def _connector_jar() -> str | None:
    try:
        return osqueue.jar_path()
    except FileNotFoundError:
        built = sorted(
            (ROOT / "jvm" / "spark" / "target").glob("line-4.1-2.13/scala-2.13/osqueue-spark-4.1-assembly_2.13-*.jar")
        )
        return str(built[-1]) if built else None


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: a local Spark session needs a JDK 17")
    jar = _connector_jar()
    if jar is None:
        pytest.skip("the connector jar is not built: run `bash .ci/sbt spark/assembly` (or pip install .)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(osp, "jar_path", lambda *_: jar)
        builder = osp.configure_spark_with_osqueue(
            SparkSession.builder.master("local[1]")
            .appName("osqueue-wrapper-test")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .config("spark.sql.session.timeZone", "UTC")
        )
    session = builder.getOrCreate()
    try:
        yield session
    finally:
        session.stop()


class SparkRecorder:
    """A real session whose readers record the options set on them."""

    def __init__(self, session: SparkSession) -> None:
        self.session = session
        self.options: dict[str, str] = {}

    def _wrap(self, reader: Any) -> Any:
        outer = self

        class Reader:
            def format(self, name: str) -> Reader:
                outer.options["<format>"] = name
                reader.format(name)
                return self

            def option(self, key: str, value: str) -> Reader:
                outer.options[key] = value
                reader.option(key, value)
                return self

            def load(self, path: str) -> Any:
                outer.options["<path>"] = path
                return reader.load(path)

        return Reader()

    @property
    def read(self) -> Any:
        return self._wrap(self.session.read)

    @property
    def readStream(self) -> Any:  # Spark's name
        return self._wrap(self.session.readStream)


@pytest.mark.jvm
def test_real_spark_reads_a_local_queue(spark: SparkSession, tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    with Producer(str(root), flush_interval=3600) as producer:
        h0 = producer.produce([b"a", b"b"], b"m0")
        h1 = producer.produce([b"c"], b"m1")
        producer.flush(30)
        h2 = producer.produce([b"d"], b"m2")
        producer.flush(30)
        h3 = producer.produce([b"e"])
        producer.flush(30)
    durable = [h.wait_durable(1) for h in (h0, h1, h2, h3)]
    times = [h.ingestion_time_ms for h in (h0, h1, h2, h3)]
    assert [d.sequence for d in durable] == [0, 0, 1, 2]

    recorder = SparkRecorder(spark)
    window = osp.read(recorder, str(root), starting_sequence=1, ending_sequence=3, fail_on_data_loss=True)  # type: ignore[arg-type]
    assert recorder.options == {
        "<format>": "osqueue",
        "startingSequence": "1",
        "endingSequence": "3",
        "failOnDataLoss": "true",
        "<path>": str(root),
    }
    assert window.schema.simpleString() == (
        "struct<value:binary,sequence:bigint,index:int,location:string,ingestionTime:timestamp,metadata:binary>"
    )
    rows = sorted(window.collect(), key=lambda r: (r.sequence, r["index"]))
    assert [(bytes(r.value), r.sequence, r["index"]) for r in rows] == [(b"d", 1, 0), (b"e", 2, 0)]
    assert bytes(rows[0].metadata) == b"m2" and bytes(rows[1].metadata) == b""
    assert [r.location for r in rows] == [durable[2].location, durable[3].location]

    everything = sorted(osp.read(spark, f"file:{root}").collect(), key=lambda r: (r.sequence, r["index"]))
    assert [(bytes(r.value), r.sequence, r["index"], bytes(r.metadata)) for r in everything] == [
        (b"a", 0, 0, b"m0"),
        (b"b", 0, 1, b"m0"),
        (b"c", 0, 2, b"m1"),
        (b"d", 1, 0, b"m2"),
        (b"e", 2, 0, b""),
    ]
    expected_times = [times[0], times[0], times[1], times[2], times[3]]
    assert [round(r.ingestionTime.timestamp() * 1000) for r in everything] == expected_times

    # The streaming helper reaches the connector: a good option set loads, a bad one is refused at load().
    stream_recorder = SparkRecorder(spark)
    stream = osp.read_stream(stream_recorder, str(root), max_batches_per_trigger=1, gc=False)  # type: ignore[arg-type]
    assert stream.isStreaming
    assert stream_recorder.options == {
        "<format>": "osqueue",
        "maxBatchesPerTrigger": "1",
        "gc": "false",
        "<path>": str(root),
    }
    with pytest.raises(Exception, match="maxbatchespertrigger"):
        osp.read_stream(spark, str(root), max_batches_per_trigger=0)


def test_sink_options_carry_the_writer_batch_id_of_a_batch_write() -> None:
    assert osp.sink_options(writer_id="nightly", writer_batch_id=7) == {"writerId": "nightly", "writerBatchId": "7"}
    with pytest.raises(TypeError, match="writer_batch_id"):
        osp.sink_options(writer_id="nightly", writer_batch_id="7")  # type: ignore[arg-type]
