"""`spark-submit --packages` and PySpark's `spark.jars.packages` resolve the connector for the
installed Spark from the Maven repository the build publishes (`bash .ci/sbt publishBuildRepo`,
target/maven-repo), with a fresh Ivy cache (its dependencies come from Maven Central), and read a queue."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import zipfile

import pyspark
import pytest

import osqueue
from osqueue import _jar
from osqueue._jar import installed_scala_version

from .support import produce_entries

ROOT = pathlib.Path(__file__).resolve().parents[2]
REPO = ROOT / "target" / "maven-repo"
LINE, SCALA, _ = _jar.connector_for(pyspark.__version__, installed_scala_version())
COORDINATES = f"io.github.osqueue:osqueue-spark-{LINE}_{SCALA}:{osqueue.__version__}"
LOOPBACK = ["spark.driver.bindAddress=127.0.0.1", "spark.driver.host=127.0.0.1", "spark.ui.enabled=false"]

READ = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master("local[1]")
    for kv in sys.argv[2:]:
        builder = builder.config(*kv.split("=", 1))
    spark = builder.getOrCreate()
    print("rows", spark.read.format("osqueue").load(sys.argv[1]).count(), flush=True)
""")


@pytest.fixture(scope="module")
def published() -> pathlib.Path:
    pom = REPO / "io" / "github" / "osqueue" / f"osqueue-spark-{LINE}_{SCALA}" / osqueue.__version__
    if not pom.is_dir():
        message = f"{pom} is not published: run `bash .ci/sbt publishBuildRepo`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return REPO


def _env() -> dict[str, str]:
    return dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)


def test_spark_submit_packages_resolves_the_connector_with_a_fresh_ivy_cache(published, tmp_path):
    queue = tmp_path / "q"
    produce_entries(str(queue), batches=3, per_batch=4)
    script = tmp_path / "read.py"
    script.write_text(READ)
    submit = pathlib.Path(pyspark.__file__).parent / "bin" / "spark-submit"
    confs = [x for kv in [f"spark.jars.ivy={tmp_path / 'ivy'}", *LOOPBACK] for x in ("--conf", kv)]
    p = subprocess.run(
        [
            str(submit),
            "--master",
            "local[1]",
            "--packages",
            COORDINATES,
            "--repositories",
            published.as_uri(),
            *confs,
            str(script),
            str(queue),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert p.returncode == 0 and "rows 12" in p.stdout, p.stdout + p.stderr[-5000:]
    assert f"osqueue-spark-{LINE}_{SCALA}" in p.stderr  # Ivy's resolution report names it
    fetched = {f.name for f in (tmp_path / "ivy" / "jars").iterdir()}
    assert f"io.github.osqueue_osqueue-core_{SCALA}-{osqueue.__version__}.jar" in fetched, fetched
    assert not any("zstd-jni" in name for name in fetched), "zstd-jni is Spark's: provided"


def test_spark_jars_packages_from_pyspark_resolves_the_connector(published, tmp_path):
    queue = tmp_path / "q"
    produce_entries(str(queue), batches=2, per_batch=5)
    confs = [
        f"spark.jars.packages={COORDINATES}",
        f"spark.jars.repositories={published.as_uri()}",
        f"spark.jars.ivy={tmp_path / 'ivy'}",
        *LOOPBACK,
    ]
    p = subprocess.run(
        [sys.executable, "-c", READ, str(queue), *confs], capture_output=True, text=True, timeout=600, env=_env()
    )
    assert p.returncode == 0 and "rows 10" in p.stdout, p.stdout + p.stderr[-5000:]


WRITE_BACK = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master("local[1]")
    for kv in sys.argv[3:]:
        builder = builder.config(*kv.split("=", 1))
    spark = builder.getOrCreate()
    rows = spark.read.format("osqueue").load(sys.argv[1]).selectExpr("cast(value as string) as value")
    rows.write.parquet(sys.argv[2])
    print("rows", spark.read.parquet(sys.argv[2]).count(), flush=True)
""")


def test_the_cluster_library_jar_works_next_to_hadoop_aws_and_its_sdk_bundle(published, tmp_path):
    """As on Databricks: the fat `assembly` jar on the classpath of a Spark that has hadoop-aws and
    the AWS SDK bundle (unrelocated, another version): osqueue reads the queue with its relocated
    SDK, Spark writes and reads Parquet through s3a, in one JVM, on the moto S3 server."""
    from fixtures import new_bucket, run_s3_server

    from osqueue._jar import installed_hadoop_version

    assembly = (
        published
        / "io"
        / "github"
        / "osqueue"
        / f"osqueue-spark-{LINE}_{SCALA}"
        / osqueue.__version__
        / f"osqueue-spark-{LINE}_{SCALA}-{osqueue.__version__}-assembly.jar"
    )
    with run_s3_server("moto") as moto:
        bucket = new_bucket(moto)
        options = {
            "fs.s3a.endpoint": moto.endpoint,
            "fs.s3a.access.key": moto.access_key,
            "fs.s3a.secret.key": moto.secret_key,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.endpoint.region": moto.region,
        }
        queue = f"s3a://{bucket}/queue"
        produce_entries(queue, batches=3, per_batch=5, store_options=options)
        confs = [
            f"spark.jars={assembly}",
            f"spark.jars.packages=org.apache.hadoop:hadoop-aws:{installed_hadoop_version()}",
            *LOOPBACK,
            *[f"spark.hadoop.{k}={v}" for k, v in options.items()],
        ]
        p = subprocess.run(
            [sys.executable, "-c", WRITE_BACK, queue, f"s3a://{bucket}/out", *confs],
            capture_output=True,
            text=True,
            timeout=900,
            env=_env(),
        )
        assert p.returncode == 0 and "rows 15" in p.stdout, p.stdout + p.stderr[-5000:]
        keys = [o["Key"] for o in moto.client().list_objects_v2(Bucket=bucket, Prefix="out/")["Contents"]]
        assert any(k.endswith(".parquet") for k in keys), keys


@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_each_store_artifact_is_one_relocated_jar_with_a_pom_without_dependencies(published, store):
    """osqueue-gcs and osqueue-azure are packaged alike: the published jar is the fat jar, its SDK
    relocated under osqueue.shaded.<store>, and the POM names no dependency for --packages to fetch."""
    name = f"osqueue-{store}_{SCALA}"
    directory = published / "io" / "github" / "osqueue" / name / osqueue.__version__
    assert directory.is_dir(), f"{directory} is not published: run `bash .ci/sbt publishBuildRepo`"
    pom = (directory / f"{name}-{osqueue.__version__}.pom").read_text()
    assert "<dependency>" not in pom, pom
    main = directory / f"{name}-{osqueue.__version__}.jar"  # no classifier: spark.jars.packages takes none
    with zipfile.ZipFile(main) as jar:
        names = jar.namelist()
    store_package = {"gcs": "osqueue/store/gcs/", "azure": "osqueue/store/azure/"}[store]
    sdk = {"gcs": "com/google/cloud/storage/", "azure": "com/azure/storage/blob/"}[store]
    assert any(n.startswith(store_package) for n in names), "the store's own classes are missing"
    assert any(n.startswith(f"osqueue/shaded/{store}/{sdk}") for n in names), "the SDK is not inside, relocated"
    assert not any(n.startswith(sdk) for n in names), "an unrelocated SDK class is inside"
    assert not any(n.startswith(("osqueue/queue/", "scala/")) for n in names), "the core or Scala is inside"
