"""Where the benchmarks run: the S3 server (moto, or ``--endpoint``) with a fresh bucket, the
latency proxy in front of it, the machine's facts, and the settings of a run."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import platform
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from osqueue._version import __version__
from osqueue.store import S3Store

MANIFEST = "ingest/manifest"
PREFIX = "ingest"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def subprocess_json(cmd: list[str], what: str, env: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            proc.wait(30)
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"{what} exited {proc.returncode}: {err.strip()[-2000:]}")
        yield json.loads(line)
    finally:
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


@dataclass
class Env:
    """Where the benchmarks run: an S3 endpoint (maybe through the proxy) and a bucket."""

    endpoint: str
    server_endpoint: str
    region: str
    access_key: str
    secret_key: str
    latency_ms: float
    server_kind: str
    bucket: str = ""

    def options(self) -> dict[str, str]:
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.access.key": self.access_key,
            "fs.s3a.secret.key": self.secret_key,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.endpoint.region": self.region,
        }

    def store(self, prefix: str) -> S3Store:
        return S3Store(self.bucket, prefix, self.options())

    def uri(self, prefix: str) -> str:
        return f"s3a://{self.bucket}/{prefix}"


@contextlib.contextmanager
def environment(latency_ms: float, endpoint: str | None, log: Callable[[str], None]) -> Iterator[Env]:
    with contextlib.ExitStack() as stack:
        if endpoint:
            info: dict[str, Any] = {
                "endpoint": endpoint,
                "region": "us-east-1",
                "access_key": "test",
                "secret_key": "test",
                "kind": "external",
            }
        else:
            script = REPO_ROOT / "tests" / "s3" / "s3server.py"
            if not script.is_file():
                raise RuntimeError(f"no {script}: the harness runs from a source checkout; or pass --endpoint")
            log("starting moto (tests/s3/s3server.py --kind moto) ...")
            info = stack.enter_context(
                subprocess_json([sys.executable, str(script), "--kind", "moto"], "s3server.py --kind moto")
            )
        client_endpoint = info["endpoint"]
        if latency_ms > 0:
            env = dict(os.environ)
            env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
            proxy = stack.enter_context(
                subprocess_json(
                    [sys.executable, "-m", "bench.harness.proxy", info["endpoint"], str(latency_ms)],
                    "latency proxy",
                    env,
                )
            )
            client_endpoint = proxy["endpoint"]
            log(f"latency proxy: {client_endpoint} -> {info['endpoint']} (+{latency_ms:g} ms per request)")
        e = Env(
            client_endpoint,
            info["endpoint"],
            info.get("region", "us-east-1"),
            info.get("access_key", "test"),
            info.get("secret_key", "test"),
            latency_ms,
            info.get("kind", "moto"),
        )
        e.bucket = f"osq-bench-{uuid.uuid4().hex[:12]}"
        setup = S3Store(e.bucket, "", {**e.options(), "fs.s3a.endpoint": e.server_endpoint})
        setup.client.create_bucket(Bucket=e.bucket)
        setup.close()
        yield e


def _run_quiet(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (p.stdout + p.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable ({e})"


def machine_facts() -> dict[str, Any]:
    """Cores, memory, load, OS and versions of what was measured."""
    mem_total = None
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1]) * 1024
    versions: dict[str, str | None] = {"python": platform.python_version(), "osqueue": __version__}
    for mod in ("boto3", "botocore", "moto", "zstandard"):
        try:
            from importlib.metadata import version

            versions[mod] = version(mod)
        except Exception:
            versions[mod] = None
    java = shutil.which("java")
    versions["java"] = _run_quiet([java, "-version"]).splitlines()[0] if java else None
    load: list[float] | None = None
    with contextlib.suppress(OSError):
        load = [round(x, 2) for x in os.getloadavg()]
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_bytes": mem_total,
        "memory_gib": None if mem_total is None else round(mem_total / 2**30, 1),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "loadavg_at_start": load,
        "versions": versions,
    }


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or None


@dataclass
class Settings:
    """What a run measures and how often, and what its benchmarks share (the SparkSession, the Kafka jars)."""

    quick: bool
    latency_ms: float
    log: Callable[[str], None]
    repeats: int = 3
    ratio_repeats: int = 5
    """Repeats of the short paired runs whose ratio is the figure (raw_put, spark_file, kafka)."""
    spark_mb: int = 0
    """Payload of the Spark source comparisons (MiB); 0: 8 with --quick, 1024 otherwise."""
    record_bytes: int = 1024
    eager_flush: bool = False
    """The latency row's producer flushes a batch at once when none of its batches is in flight."""
    latency_modes: tuple[str, ...] = ()
    """The latency row's modes (empty: every mode the Spark line has)."""
    latency_runs: int = 0
    """Runs per latency mode (0: 1 with --quick, else `repeats`)."""
    spark: Any = None  # a SparkHolder while Spark benchmarks run
    kafka: Any = None  # (broker jars, connector jars, versions) when the Kafka benchmark runs
    kafka_error: str | None = None
    delta: Any = None  # the delta-spark jars when the delta benchmark runs
    delta_error: str | None = None

    def __post_init__(self) -> None:
        self.repeats = 2 if self.quick else 3
        self.ratio_repeats = 2 if self.quick else 5
        if not self.spark_mb:
            self.spark_mb = 8 if self.quick else 1024


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
