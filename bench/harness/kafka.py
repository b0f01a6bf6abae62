"""``kafka``: the osqueue source vs Spark's Kafka source over the same records, on a single-node
KRaft broker started here; the broker's and Spark's Kafka connector jars are fetched with Maven."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from bench.harness.environment import Env, Settings
from bench.harness.spark_benchmarks import compare_sources, spark_dataset, stream_to_noop

KAFKA_VERSION = "3.9.1"  # Spark 4.1.3's kafka-clients version (its parent pom's kafka.version)
SPARK_KAFKA_VERSION = "4.1.3"
# spark-token-provider-kafka 4.1.x could not be resolved from the Maven repository this was
# developed against; the newest one that was, 4.0.0, is the fallback (a small, stable API).
TOKEN_PROVIDER_VERSIONS = ("4.1.3", "4.0.0")
CACHE = pathlib.Path(os.environ.get("OSQUEUE_BENCH_CACHE", pathlib.Path.home() / ".cache" / "osqueue-bench"))


def _maven_fetch(
    name: str, deps: Sequence[tuple[str, str, str]], transitive: bool, log: Callable[[str], None]
) -> list[str]:
    """Copies `deps` (+ their runtime dependencies if `transitive`) into the cache with Maven's own
    client (`mvn dependency:copy-dependencies`: the machine's mirror and proxy settings apply).
    Returns the jar paths."""
    from xml.sax.saxutils import escape

    base = CACHE / "maven" / name
    jars = base / "jars"
    stamp = base / ".complete"
    if not stamp.is_file():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("mvn not found (Maven fetches the Kafka jars)")
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        exclusions = (
            ""
            if transitive
            else "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
        )
        body = "".join(
            f"<dependency><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId><version>{escape(v)}</version>"
            f"{exclusions}</dependency>"
            for g, a, v in deps
        )
        (base / "pom.xml").write_text(
            '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>osqueue.bench</groupId><artifactId>{escape(name)}</artifactId><version>1</version>"
            f"<packaging>pom</packaging><dependencies>{body}</dependencies></project>\n"
        )
        log(f"fetching {name} with Maven (mvn dependency:copy-dependencies) into {jars} ...")
        p = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={jars}", "-DincludeScope=runtime"],
            cwd=base,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if p.returncode != 0:
            errors = [line for line in (p.stdout + p.stderr).splitlines() if "ERROR" in line][:3]
            raise RuntimeError(f"mvn failed for {name}: " + " | ".join(errors)[:1500])
        stamp.write_text(json.dumps(deps) + "\n")
    return sorted(str(j) for j in jars.glob("*.jar"))


def kafka_jars(log: Callable[[str], None]) -> tuple[list[str], list[str], dict[str, str]]:
    """(broker class path jars, Spark's Kafka connector jars, versions used)."""
    broker = _maven_fetch(
        f"kafka-broker-{KAFKA_VERSION}",
        [("org.apache.kafka", "kafka_2.13", KAFKA_VERSION), ("org.slf4j", "slf4j-reload4j", "1.7.36")],
        True,
        log,
    )
    errors = []
    # A version already in the cache wins (a failed lookup costs Maven ~15 s and is not cached).
    cached = [
        tp
        for tp in TOKEN_PROVIDER_VERSIONS
        if (CACHE / "maven" / f"spark-sql-kafka-{SPARK_KAFKA_VERSION}-tp{tp}" / ".complete").is_file()
    ]
    for tp in cached[:1] or TOKEN_PROVIDER_VERSIONS:
        try:
            connector = _maven_fetch(
                f"spark-sql-kafka-{SPARK_KAFKA_VERSION}-tp{tp}",
                [
                    ("org.apache.spark", "spark-sql-kafka-0-10_2.13", SPARK_KAFKA_VERSION),
                    ("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", tp),
                    ("org.apache.kafka", "kafka-clients", KAFKA_VERSION),
                    ("org.apache.commons", "commons-pool2", "2.12.1"),
                ],
                False,
                log,
            )
            versions = {
                "kafka_broker": KAFKA_VERSION,
                "spark_sql_kafka": SPARK_KAFKA_VERSION,
                "spark_token_provider_kafka": tp,
                "kafka_clients": KAFKA_VERSION,
                "commons_pool2": "2.12.1",
            }
            return broker, connector, versions
        except RuntimeError as e:
            errors.append(str(e))
            log(f"kafka: spark-token-provider-kafka {tp} not available ({str(e)[:200]}); trying the next version")
    raise RuntimeError("; ".join(errors))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def kafka_broker(jars: Sequence[str], work: pathlib.Path, log: Callable[[str], None]) -> Iterator[str]:
    """A single-node KRaft Kafka (broker + controller) on 127.0.0.1, formatted and started here.
    Yields its bootstrap address; stops it on exit."""
    import base64

    port, cport = _free_port(), _free_port()
    logs = work / "kafka-logs"
    props = work / "server.properties"
    props.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{cport}",
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
                f"log.dirs={logs}",
                "num.partitions=2",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
            ]
        )
        + "\n"
    )
    log4j = work / "log4j.properties"
    log4j.write_text(
        "log4j.rootLogger=WARN, f\nlog4j.appender.f=org.apache.log4j.FileAppender\n"
        f"log4j.appender.f.File={work / 'broker.log'}\nlog4j.appender.f.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.f.layout.ConversionPattern=%d %p %c - %m%n\n"
    )
    java = shutil.which("java") or "java"
    cp = os.pathsep.join(jars)
    jvm = [java, "-Xmx1g", f"-Dlog4j.configuration=file:{log4j}", "-cp", cp]
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    fmt = subprocess.run(
        [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if fmt.returncode != 0:
        raise RuntimeError(f"kafka-storage format failed: {(fmt.stdout + fmt.stderr).strip()[-1000:]}")
    out = open(work / "broker.out", "w")
    proc = subprocess.Popen([*jvm, "kafka.Kafka", str(props)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited {proc.returncode}: see {work / 'broker.out'}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the Kafka broker did not listen within 90 s")
            time.sleep(0.5)
        log(f"kafka {KAFKA_VERSION} (KRaft, single node) on 127.0.0.1:{port}")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()


def bench_kafka(env: Env, s: Settings) -> dict[str, Any]:
    holder = s.spark
    if s.kafka_error or s.kafka is None:
        s.log(f"kafka: skipped ({s.kafka_error})")
        return {"skipped": s.kafka_error or "the Kafka jars were not fetched"}
    broker_jars, _, versions = s.kafka
    ds = spark_dataset(holder, s)
    spark = holder.spark
    work = holder.tmp / "kafka"
    work.mkdir(parents=True, exist_ok=True)
    with kafka_broker(broker_jars, work, s.log) as bootstrap:
        topic = "bench"
        t0 = time.monotonic()
        (
            spark.read.text(str(ds.text_dir))
            .select("value")
            .write.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .save()
        )
        load_s = time.monotonic() - t0
        s.log(f"kafka: loaded {ds.records} records into topic '{topic}' (2 partitions) in {load_s:.1f} s")

        def kafka() -> dict[str, Any]:
            df = (
                spark.readStream.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .load()
                .select("value")
            )
            return stream_to_noop(spark, df, holder.checkpoint("kafka"))

        out = compare_sources(holder, s, ds, "kafka", kafka)
    ratio = out["ratio_osqueue_to_kafka"]
    return {
        "description": f"the same {ds.records} records of {ds.record_bytes} B: an osqueue queue of {ds.batches} batch files on "
        f"the local filesystem vs a topic of 2 partitions on a local single-node KRaft Kafka {KAFKA_VERSION} (broker "
        "started by the benchmark on 127.0.0.1, its log on the local disk, loaded by Spark's Kafka batch writer); "
        "each read by select(value) -> noop with trigger(availableNow=True), fresh checkpoint per run; local[2]",
        "versions": versions,
        "kafka_load_s": load_s,
        **out,
        "goal": "osqueue rows/s / Kafka source rows/s >= 1.0",
        "goal_met": bool(ratio["median"] >= 1.0),
    }
