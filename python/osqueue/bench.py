"""``osqueue bench``: benchmarks of the native client against a local S3 server (issue 7).

Each benchmark runs against a moto server started with ``tests/s3/s3server.py --kind moto``
(or an endpoint given with ``--endpoint``), optionally through a loopback proxy that sleeps a
fixed time before forwarding each request (``--latency-ms``; the proxy runs in its own process
so it does not compete with the measured code for the GIL). Every figure is the median over
repeated runs together with its spread (min, max, and the quartiles).

Benchmarks (names for ``--only``):

* ``contention``: 1, 2, 4, 8 producer threads, each its own :class:`osqueue.Producer`
  (flush_interval 0.1 s, small entries), enqueueing into one manifest: batches enqueued/s,
  CAS attempts per committed manifest write, p50/p99 produce→durable latency, duplicates.
  Mode ``shared``: the producers share one store object, hence one group committer (what
  ``Producer(path)`` does inside one process); mode ``separate``: each producer has its own
  store object and committer, so they race on the manifest's CAS like separate processes.
* ``depth``: manifest append latency and bytes rewritten per append with 100, 10k, 100k
  queued entries (manifest built with :mod:`osqueue.format`, then appended to through a
  :class:`osqueue.queue.QueueProducer`).
* ``py_vs_jvm``: Python producer vs the JVM core's producer (``QueueTool produce``) MB/s with
  identical entries and settings.
* ``requests``: object-store requests (PUT/GET/LIST/DELETE) per 1,000 entries produced and
  consumed, counted by a wrapping store.

Results go to ``<out>/bench-<UTC time>[-quick].json`` and ``.md``.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import http.server
import json
import os
import pathlib
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from osqueue import metrics as m
from osqueue._version import __version__
from osqueue.format import MetadataItem, append_entries, decode_manifest, empty_manifest, encode_entry
from osqueue.store import ObjectInfo, ObjectStore, ObjectVersion, S3Store, VersionedObject

__all__ = ["BENCHMARKS", "CountingStore", "run_benchmarks", "summarize"]

BENCHMARKS = ("contention", "depth", "py_vs_jvm", "requests", "raw_put", "spark_file", "kafka", "latency")
SPARK_BENCHMARKS = ("spark_file", "kafka", "latency")
QUICK_SKIPS = ("kafka",)
"""Not run by ``--quick`` unless named with ``--only`` (fetching jars and starting a broker is not fast)."""
MANIFEST = "ingest/manifest"
PREFIX = "ingest"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# statistics


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of sorted values."""
    if not sorted_values:
        return float("nan")
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median with its spread: min, max, p25, p75 (IQR) and the number of runs."""
    vs = sorted(float(v) for v in values)
    if not vs:
        return {"median": None, "min": None, "max": None, "p25": None, "p75": None, "n": 0}
    return {
        "median": statistics.median(vs),
        "min": vs[0],
        "max": vs[-1],
        "p25": _percentile(vs, 25),
        "p75": _percentile(vs, 75),
        "n": len(vs),
    }


def _fmt(stat: dict[str, Any], unit: str = "", digits: int = 1) -> str:
    if stat.get("median") is None:
        return "-"
    return f"{stat['median']:.{digits}f}{unit} ({stat['min']:.{digits}f}–{stat['max']:.{digits}f})"


# ---------------------------------------------------------------------------------------------
# a counting store


class CountingStore:
    """Wraps an :class:`ObjectStore` and counts its requests by kind (PUT, GET, LIST, DELETE).

    Conditional writes count as PUT. ``close()`` does not close the wrapped store.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.counts = {"PUT": 0, "GET": 0, "LIST": 0, "DELETE": 0}

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    @property
    def uri(self) -> str:
        return self.inner.uri

    def get(self, key: str) -> VersionedObject | None:
        self._count("GET")
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        self._count("PUT")
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> Any:
        self._count("PUT")
        return self.inner.put_if_absent(key, data)

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> Any:
        self._count("PUT")
        return self.inner.put_if_version_matches(key, data, expected_version)

    def list(self, prefix: str) -> list[ObjectInfo]:
        self._count("LIST")
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self._count("DELETE")
        self.inner.delete(key)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# the latency proxy (runs in its own process: `python -m osqueue.bench proxy ...`)

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "expect"}


def _make_proxy_handler(upstream_host: str, upstream_port: int, latency_s: float) -> type:
    local = threading.local()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def setup(self) -> None:
            super().setup()
            # No Nagle: a reply's small writes must not wait for the client's delayed ACK.
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _forward(self) -> None:
            body = self._body()
            if latency_s > 0:
                time.sleep(latency_s)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            for attempt in range(2):
                conn = getattr(local, "conn", None)
                if conn is None:
                    conn = local.conn = http.client.HTTPConnection(upstream_host, upstream_port, timeout=120)
                    conn.connect()
                    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    break
                except (OSError, http.client.HTTPException):
                    conn.close()
                    local.conn = None
                    if attempt == 1:
                        self.send_error(502)
                        return
            self.send_response_only(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            else:
                length = resp.getheader("Content-Length")
                if length is not None:
                    self.send_header("Content-Length", length)
            # Status, headers and body in one write (no Nagle/delayed-ACK stall between them).
            self._headers_buffer.append(b"\r\n")  # type: ignore[attr-defined]
            if self.command != "HEAD":
                self._headers_buffer.append(data)  # type: ignore[attr-defined]
            self.flush_headers()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    return Handler


def serve_proxy(upstream: str, latency_ms: float) -> None:
    """Runs the latency proxy on 127.0.0.1 (free port) until stdin closes; prints its endpoint
    as one JSON line on stdout."""
    parsed = http.client.urlsplit(upstream)
    handler = _make_proxy_handler(parsed.hostname or "127.0.0.1", parsed.port or 80, latency_ms / 1000.0)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"endpoint": f"http://127.0.0.1:{server.server_address[1]}"}), flush=True)
    with contextlib.suppress(Exception):
        sys.stdin.read()
    server.shutdown()


@contextlib.contextmanager
def _subprocess_json(cmd: list[str], what: str, env: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
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


# ---------------------------------------------------------------------------------------------
# environment


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
def _environment(latency_ms: float, endpoint: str | None, log: Callable[[str], None]) -> Iterator[Env]:
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
                raise RuntimeError(f"no {script}: run from a source checkout or pass --endpoint")
            log("starting moto (tests/s3/s3server.py --kind moto) ...")
            info = stack.enter_context(
                _subprocess_json([sys.executable, str(script), "--kind", "moto"], "s3server.py --kind moto")
            )
        client_endpoint = info["endpoint"]
        if latency_ms > 0:
            env = dict(os.environ)
            env["PYTHONPATH"] = str(pathlib.Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
            proxy = stack.enter_context(
                _subprocess_json(
                    [sys.executable, "-m", "osqueue.bench", "proxy", info["endpoint"], str(latency_ms)],
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


# ---------------------------------------------------------------------------------------------
# benchmark 2: manifest contention


@dataclass
class Settings:
    quick: bool
    latency_ms: float
    log: Callable[[str], None]
    repeats: int = 3
    ratio_repeats: int = 5
    """Repeats of the short paired runs whose ratio is the figure (raw_put, spark_file, kafka)."""
    spark_mb: int = 0
    """Payload of the Spark source comparisons (MiB); 0: 8 with --quick, 1024 otherwise."""
    record_bytes: int = 1024
    spark: Any = None  # a SparkHolder while Spark benchmarks run
    kafka: Any = None  # (broker jars, connector jars, versions) when the Kafka benchmark runs
    kafka_error: str | None = None

    def __post_init__(self) -> None:
        self.repeats = 2 if self.quick else 3
        self.ratio_repeats = 2 if self.quick else 5
        if not self.spark_mb:
            self.spark_mb = 8 if self.quick else 1024


def _contention_run(env: Env, threads: int, mode: str, duration: float) -> dict[str, Any]:
    from osqueue.producer import Producer

    prefix = f"contention-{mode}-{threads}-{uuid.uuid4().hex[:8]}"
    base = env.store(prefix)
    registry = m.MetricsRegistry()
    shared = CountingStore(base)
    stores = [shared if mode == "shared" else CountingStore(base) for _ in range(threads)]
    entry = b"x" * 100
    latencies: list[float] = []
    lat_lock = threading.Lock()
    produced_calls = [0] * threads
    errors: list[BaseException] = []
    stop = threading.Event()
    producers = [Producer(store=s, flush_interval=0.1, metrics=registry) for s in stores]

    def record(t0: float) -> Callable[[Any], None]:
        def done(f: Any) -> None:
            now = time.monotonic()
            if f.exception() is not None:
                errors.append(f.exception())
                return
            with lat_lock:
                latencies.append(now - t0)

        return done

    def work(i: int) -> None:
        p = producers[i]
        n = 0
        while not stop.is_set():
            t0 = time.monotonic()
            h = p.produce([entry] * 10, b"bench")
            h.add_done_callback(record(t0))
            n += 1
            time.sleep(0.01)
        produced_calls[i] = n

    workers = [threading.Thread(target=work, args=(i,), name=f"bench-producer-{i}") for i in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    time.sleep(duration)
    stop.set()
    for w in workers:
        w.join()
    for p in producers:
        p.close()
    elapsed = time.monotonic() - started
    batches = registry.counter(m.BATCHES_FLUSHED).value
    writes = registry.counter(m.MANIFEST_WRITES, role="producer").value
    conflicts = registry.counter(m.MANIFEST_CONFLICTS, role="producer").value
    raw = base.get(MANIFEST)
    manifest = decode_manifest(raw.data, MANIFEST) if raw is not None else None
    locations = [e.location for e in manifest.entries] if manifest else []
    base.close()
    lat = sorted(latencies)
    return {
        "elapsed_s": elapsed,
        "batches": batches,
        "batches_per_s": batches / elapsed,
        "manifest_writes": writes,
        "manifest_conflicts": conflicts,
        "cas_attempts_per_write": (writes + conflicts) / writes if writes else float("nan"),
        "batches_per_write": batches / writes if writes else float("nan"),
        "p50_ms": _percentile(lat, 50) * 1000,
        "p99_ms": _percentile(lat, 99) * 1000,
        "produce_calls": sum(produced_calls),
        "durable_calls": len(lat),
        "manifest_entries": len(locations),
        "duplicates": len(locations) - len(set(locations)),
        "missing": int(batches) - len(set(locations)),
        "errors": len(errors),
    }


def bench_contention(env: Env, s: Settings) -> dict[str, Any]:
    duration = 1.0 if s.quick else 5.0
    counts = [1, 2, 4, 8]
    modes: dict[str, Any] = {}
    for mode in ("shared", "separate"):
        rows = []
        for n in counts:
            runs = [_contention_run(env, n, mode, duration) for _ in range(s.repeats)]
            row = {"producers": n, "runs": len(runs)}
            for k in ("batches_per_s", "cas_attempts_per_write", "batches_per_write", "p50_ms", "p99_ms"):
                row[k] = summarize([r[k] for r in runs])
            row["duplicates"] = sum(r["duplicates"] for r in runs)
            row["missing"] = sum(r["missing"] for r in runs)
            row["errors"] = sum(r["errors"] for r in runs)
            row["raw_runs"] = [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in runs]
            rows.append(row)
            s.log(
                f"contention[{mode}] {n} producer(s): {_fmt(row['batches_per_s'], ' batches/s')}, "
                f"CAS attempts/write {_fmt(row['cas_attempts_per_write'], '', 2)}, "
                f"p50 {_fmt(row['p50_ms'], ' ms', 0)}, p99 {_fmt(row['p99_ms'], ' ms', 0)}, "
                f"duplicates {row['duplicates']}"
            )
        one = rows[0]["batches_per_s"]["median"]
        eight = rows[-1]["batches_per_s"]["median"]
        # The 8:1 ratio per repeat (run i of 8 producers vs run i of 1), then its median.
        ratios = [a["batches_per_s"] / b["batches_per_s"] for a, b in zip(rows[-1]["raw_runs"], rows[0]["raw_runs"])]
        modes[mode] = {
            "rows": rows,
            "speedup_8_vs_1": summarize(ratios),
            "speedup_8_vs_1_of_medians": eight / one if one else None,
        }
    shared_speedup = modes["shared"]["speedup_8_vs_1"]["median"]
    return {
        "description": "N producer threads (each its own Producer, flush_interval 0.1 s, calls of 10 x 100 B "
        "entries every ~10 ms per thread) for a fixed time into one manifest; shared = one store object "
        "(one group committer, as Producer(path) in one process); separate = one store object per producer "
        "(racing CAS writers, like separate processes)",
        "duration_s": duration,
        "modes": modes,
        "duplicates": sum(r["duplicates"] for md in modes.values() for r in md["rows"]),
        "goal": "8 producers >= 6x one (batches enqueued/s)",
        "goal_met": bool(shared_speedup is not None and shared_speedup >= 6.0),
    }


# ---------------------------------------------------------------------------------------------
# benchmark 6: cost vs queue depth


def _build_manifest(depth: int) -> bytes:
    """A manifest of ``depth`` entries (sequences 0..depth-1), encoded with osqueue.format."""
    import struct

    meta = [MetadataItem(0, 1_700_000_000_000, b"bench")]
    body = b"".join(encode_entry(i, f"{PREFIX}/01J5T4R3KX{i:016d}.batch", meta) for i in range(depth))
    footer = empty_manifest()  # entry_count 0, next_sequence 0, epoch 0, version 1
    return body + struct.pack("<IQ", depth, depth) + footer[12:]


def bench_depth(env: Env, s: Settings) -> dict[str, Any]:
    from osqueue.queue import QueueProducer

    depths = [100, 10_000, 100_000]
    appends = 4 if s.quick else 20
    rows = []
    for depth in depths:
        raw = _build_manifest(depth)
        decode_manifest(raw, MANIFEST)  # a valid manifest
        prefix = f"depth-{depth}-{uuid.uuid4().hex[:8]}"
        base = env.store(prefix)
        base.put(MANIFEST, raw)
        registry = m.MetricsRegistry()
        producer = QueueProducer(base, MANIFEST, metrics=registry)
        latencies = []
        sizes = []
        meta = [MetadataItem(0, int(time.time() * 1000), b"bench")]
        for i in range(appends):
            t0 = time.monotonic()
            producer.enqueue(f"{PREFIX}/01J5T4R3KZ{i:016d}.batch", meta)
            latencies.append((time.monotonic() - t0) * 1000)
        producer.close()
        final = base.get(MANIFEST)
        assert final is not None
        sizes.append(len(final.data))
        decode_manifest(final.data, MANIFEST)
        base.close()
        # CPU-only cost of one append (no I/O): footer strip + encode + concatenate.
        cpu = []
        for _ in range(appends):
            t0 = time.perf_counter()
            append_entries(raw, [(f"{PREFIX}/01J5T4R3KZ0000000000000000.batch", meta)], MANIFEST)
            cpu.append((time.perf_counter() - t0) * 1000)
        row = {
            "queued_entries": depth,
            "manifest_bytes": len(raw),
            "bytes_rewritten_per_append": len(raw) + len(encode_entry(depth, f"{PREFIX}/01J5T4R3KZ0000000000000000.batch", meta)),
            "append_latency_ms": summarize(latencies),
            "append_cpu_ms": summarize(cpu),
            "appends": appends,
            "conflicts": registry.counter(m.MANIFEST_CONFLICTS, role="producer").value,
        }
        rows.append(row)
        s.log(
            f"depth {depth:>7} entries: manifest {len(raw):>9} B, append {_fmt(row['append_latency_ms'], ' ms')}, "
            f"CPU {_fmt(row['append_cpu_ms'], ' ms', 3)}, rewrites {row['bytes_rewritten_per_append']} B"
        )
    return {
        "description": "one appender (QueueProducer.enqueue: GET manifest, append, conditional PUT) on a manifest "
        "pre-built with osqueue.format at each depth; spread is over the appends",
        "rows": rows,
    }


# ---------------------------------------------------------------------------------------------
# benchmark 7: Python producer vs JVM producer


def _jvm_classpath() -> str | None:
    java = shutil.which("java")
    if not java:
        return None
    try:
        import pyspark

        from osqueue import jar_path

        jars = pathlib.Path(pyspark.__file__).parent / "jars"
        jar = jar_path()
    except Exception:
        return None
    if not jars.is_dir() or not os.path.isfile(jar):
        return None
    return f"{jar}:{jars}/*"


def _python_produce(env: Env, prefix: str, tag: str, count: int, per_call: int, flush_s: float) -> float:
    from osqueue.producer import Producer

    t0 = time.monotonic()
    with Producer(env.uri(prefix), flush_interval=flush_s, store_options=env.options()) as p:
        for start in range(0, count, per_call):
            p.produce([f"{tag}-{i}".encode() for i in range(start, min(start + per_call, count))], tag.encode())
    return time.monotonic() - t0


def _jvm_produce(env: Env, cp: str, prefix: str, tag: str, count: int, per_call: int, flush_ms: int) -> float:
    opts = [x for k, v in env.options().items() for x in ("--opt", f"{k}={v}")]
    cmd = [shutil.which("java") or "java", "-cp", cp, "osqueue.tools.QueueTool", "produce", env.uri(prefix), tag,
           str(count), "--per-call", str(per_call), "--flush-ms", str(flush_ms), *opts]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"QueueTool produce failed ({p.returncode}): {p.stderr.strip()[-1000:]}")
    return elapsed


def _count_entries(env: Env, prefix: str) -> int:
    from osqueue.format import decode_batch

    store = env.store(prefix)
    try:
        raw = store.get(MANIFEST)
        if raw is None:
            return 0
        total = 0
        for e in decode_manifest(raw.data, MANIFEST).entries:
            obj = store.get(e.location)
            assert obj is not None
            total += len(decode_batch(obj.data, e.location))
        return total
    finally:
        store.close()


def bench_py_vs_jvm(env: Env, s: Settings) -> dict[str, Any]:
    count = 30_000 if s.quick else 200_000
    per_call, flush_ms = 1000, 100
    tag = "b" * 1000  # QueueTool's entries are "<tag>-<i>": a long tag makes them ~1 KB
    payload = sum(len(f"{tag}-{i}") for i in range(count))
    cp = _jvm_classpath()
    py_times, py_base, jvm_times, jvm_base, ratios, ratios_e2e = [], [], [], [], [], []
    verified = True
    for r in range(s.repeats):
        prefix = f"pyjvm-py-{r}-{uuid.uuid4().hex[:8]}"
        py_times.append(_python_produce(env, prefix, tag, count, per_call, flush_ms / 1000))
        if r == 0:
            verified &= _count_entries(env, prefix) == count
        # The fixed cost of a run (open the store, one flush interval, one upload and commit):
        # a 1-entry run, subtracted from both sides alike.
        py_base.append(_python_produce(env, f"pyjvm-pybase-{r}-{uuid.uuid4().hex[:8]}", tag, 1, 1, flush_ms / 1000))
        if cp is None:
            continue
        jprefix = f"pyjvm-jvm-{r}-{uuid.uuid4().hex[:8]}"
        jvm_times.append(_jvm_produce(env, cp, jprefix, tag, count, per_call, flush_ms))
        if r == 0:
            verified &= _count_entries(env, jprefix) == count
        # JVM start + S3 client + one flush of one entry.
        jvm_base.append(_jvm_produce(env, cp, f"pyjvm-base-{r}-{uuid.uuid4().hex[:8]}", tag, 1, 1, flush_ms))
        py_net = max(py_times[-1] - py_base[-1], 1e-3)
        jvm_net = max(jvm_times[-1] - jvm_base[-1], 1e-3)
        ratios.append(jvm_net / py_net)
        ratios_e2e.append(jvm_times[-1] / py_times[-1])
        s.log(
            f"py_vs_jvm run {r + 1}: python {py_times[-1]:.2f} s ({py_base[-1]:.2f} s fixed), jvm {jvm_times[-1]:.2f} s "
            f"end to end ({jvm_base[-1]:.2f} s fixed incl. JVM start), ratio python/jvm MB/s {ratios[-1]:.2f}"
        )
    mb = payload / 1e6
    result: dict[str, Any] = {
        "description": f"{count} entries '<tag>-<i>' of ~{payload // count} B ({payload} B in all) in calls of {per_call}, flush every "
        f"{flush_ms} ms, no compression, one producer each; JVM = QueueTool produce in a fresh JVM; "
        "each side's fixed cost (a 1-entry run: JVM start-up, store set-up, one flush interval and commit) is "
        "subtracted from its time",
        "entries": count,
        "payload_bytes": payload,
        "python_mb_per_s": summarize([mb / max(t - b, 1e-3) for t, b in zip(py_times, py_base)]),
        "python_mb_per_s_end_to_end": summarize([mb / t for t in py_times]),
        "python_fixed_s": summarize(py_base),
        "python_entries_per_s": summarize([count / max(t - b, 1e-3) for t, b in zip(py_times, py_base)]),
        "entries_verified": verified,
    }
    if cp is None:
        result["jvm"] = "skipped: java, pyspark's jars or the connector jar not found"
        s.log("py_vs_jvm: JVM side skipped (no java / pyspark jars / connector jar)")
        return result
    result.update(
        {
            "jvm_end_to_end_s": summarize(jvm_times),
            "jvm_startup_s": summarize(jvm_base),
            "jvm_mb_per_s": summarize([mb / max(t - b, 1e-3) for t, b in zip(jvm_times, jvm_base)]),
            "jvm_mb_per_s_end_to_end": summarize([mb / t for t in jvm_times]),
            "ratio_python_to_jvm": summarize(ratios),
            "ratio_python_to_jvm_end_to_end": summarize(ratios_e2e),
            "goal": "python/jvm MB/s >= 0.5",
            "goal_met": bool(summarize(ratios)["median"] >= 0.5),
        }
    )
    return result


# ---------------------------------------------------------------------------------------------
# object-store requests per 1,000 entries


def bench_requests(env: Env, s: Settings) -> dict[str, Any]:
    from osqueue.consumer import Consumer
    from osqueue.gc import GarbageCollector
    from osqueue.producer import Producer

    count = 2_000 if s.quick else 20_000
    per_call = 100
    runs = []
    for r in range(s.repeats):
        prefix = f"requests-{r}-{uuid.uuid4().hex[:8]}"
        base = env.store(prefix)
        produce_store = CountingStore(base)
        registry = m.MetricsRegistry()
        # The queue's grace period (recorded by its first producer) bounds GC from below: 1 s here.
        with Producer(store=produce_store, flush_interval=0.1, metrics=registry, gc_grace_period=1.0) as p:
            for start in range(0, count, per_call):
                p.produce([b"y" * 100] * per_call, b"bench")
                time.sleep(0.02)
        consume_store = CountingStore(base)
        consumed = 0
        with Consumer(store=consume_store, run_gc=False, metrics=m.MetricsRegistry()) as c:
            while (batch := c.next_batch()) is not None:
                consumed += len(batch.entries)
                c.ack(batch.sequence)
        gc_store = CountingStore(base)
        time.sleep(1.0)  # every batch past the queue's 1 s grace period
        GarbageCollector(gc_store, MANIFEST, PREFIX, grace_period=0).run_once()
        base.close()
        if consumed != count:
            raise RuntimeError(f"requests: consumed {consumed} of {count} entries")
        per_k = 1000 / count
        runs.append(
            {
                "batches": registry.counter(m.BATCHES_FLUSHED).value,
                "produce": {k: v * per_k for k, v in produce_store.snapshot().items()},
                "consume": {k: v * per_k for k, v in consume_store.snapshot().items()},
                "gc": {k: v * per_k for k, v in gc_store.snapshot().items()},
            }
        )
    out: dict[str, Any] = {
        "description": f"{count} entries of 100 B in calls of {per_call} every ~20 ms, flush_interval 0.1 s (about 5 calls per batch); then a "
        "native Consumer reads and acks all (one dequeue write at close) and one GC cycle (grace 0) deletes "
        "the batch files; requests counted by a wrapping store, per 1,000 entries",
        "entries": count,
    }
    for phase in ("produce", "consume", "gc"):
        out[phase] = {k: summarize([run[phase][k] for run in runs]) for k in ("PUT", "GET", "LIST", "DELETE")}
    total = {
        k: summarize([sum(run[ph][k] for ph in ("produce", "consume", "gc")) for run in runs])
        for k in ("PUT", "GET", "LIST", "DELETE")
    }
    out["total"] = total
    out["batches"] = summarize([run["batches"] for run in runs])
    out["entries_per_batch"] = summarize([count / run["batches"] for run in runs])
    s.log(
        "requests per 1,000 entries: "
        + ", ".join(f"{k} {total[k]['median']:.1f}" for k in ("PUT", "GET", "LIST", "DELETE"))
        + " (produce + consume + GC)"
    )
    return out


# ---------------------------------------------------------------------------------------------
# benchmark 1: JVM producer vs raw PUTs of the same objects through the same client

JVM_BENCH_SOURCE = REPO_ROOT / "bench" / "jvm" / "ProducerVsRawPut.java"


def bench_raw_put(env: Env, s: Settings) -> dict[str, Any]:
    cp = _jvm_classpath()
    if cp is None or not JVM_BENCH_SOURCE.is_file():
        s.log("raw_put: skipped (needs java, pyspark's jars, the connector jar and bench/jvm/ProducerVsRawPut.java)")
        return {"skipped": "java, pyspark's jars, the connector jar or bench/jvm/ProducerVsRawPut.java not found"}
    entry_bytes, per_call, flush_ms = 1024, 1000, 100
    total = (8 if s.quick else 256) << 20
    warmup = (4 if s.quick else 64) << 20
    opts = [f"{k}={v}" for k, v in env.options().items()]
    cmd = [shutil.which("java") or "java", "-Xmx6g", "-cp", cp, str(JVM_BENCH_SOURCE), env.uri(f"rawput-{uuid.uuid4().hex[:8]}"),
           str(entry_bytes), str(total), str(per_call), str(flush_ms), str(s.ratio_repeats), str(warmup), *opts]
    s.log(f"raw_put: one JVM, {s.ratio_repeats} repeats of {total >> 20} MiB (+ a {warmup >> 20} MiB warm-up) ...")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = []
    assert proc.stdout is not None and proc.stderr is not None
    for line in proc.stdout:
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r["repeat"] < 0:
            continue
        r["producer_mb_per_s"] = r["payload_bytes"] / r["producer_s"] / 1e6
        r["raw_mb_per_s"] = r["raw_bytes"] / r["raw_s"] / 1e6
        r["ratio"] = r["producer_mb_per_s"] / r["raw_mb_per_s"]
        runs.append(r)
        s.log(
            f"raw_put run {r['repeat'] + 1}: producer {r['producer_mb_per_s']:.1f} MB/s ({r['batches']} batches, "
            f"{r['producer_s']:.2f} s), raw PUT {r['raw_mb_per_s']:.1f} MB/s ({r['raw_s']:.2f} s), "
            f"encode alone {r['encode_s']:.2f} s, ratio {r['ratio']:.2f}"
        )
    err = proc.stderr.read()
    rc = proc.wait()
    if rc != 0 or not runs:
        raise RuntimeError(f"ProducerVsRawPut.java exited {rc}: {err.strip()[-2000:]}")
    verified = all(r["entries_decoded"] == r["entries"] and r["manifest_entries"] == r["batches"] for r in runs)
    ratio = summarize([r["ratio"] for r in runs])
    return {
        "description": f"one warm JVM (bench/jvm/ProducerVsRawPut.java, after a {warmup >> 20} MiB warm-up): a Producer "
        f"(flush {flush_ms} ms, flushSizeBytes 64 MiB default) gets {total >> 20} MiB of {entry_bytes}-byte entries in "
        f"calls of {per_call}, timed from the first produce() to every handle durable; then the batch files' exact "
        "sizes are PUT again as plain objects one after the other from one thread through the same S3Store "
        "(AWS SDK v2); order alternates per repeat",
        "entry_bytes": entry_bytes,
        "payload_bytes": runs[0]["payload_bytes"],
        "batches": summarize([r["batches"] for r in runs]),
        "producer_mb_per_s": summarize([r["producer_mb_per_s"] for r in runs]),
        "raw_put_mb_per_s": summarize([r["raw_mb_per_s"] for r in runs]),
        "producer_s": summarize([r["producer_s"] for r in runs]),
        "raw_put_s": summarize([r["raw_s"] for r in runs]),
        "encode_s": summarize([r["encode_s"] for r in runs]),
        "ratio_producer_to_raw_put": ratio,
        "entries_verified": verified,
        "raw_runs": runs,
        "goal": "producer MB/s / raw PUT MB/s >= 0.9",
        "goal_met": bool(ratio["median"] >= 0.9),
    }


# ---------------------------------------------------------------------------------------------
# Spark: one session for benchmarks 3, 4 and 5


class SparkHolder:
    """A local[2] SparkSession with the connector jar (and the Kafka connector's jars when the
    Kafka benchmark runs), created on first use, stopped at the end if this created it."""

    def __init__(self, s: Settings, extra_jars: Sequence[str] = ()) -> None:
        self.s = s
        self.extra_jars = list(extra_jars)
        self._spark: Any = None
        self._created = False
        self.dataset: SparkDataset | None = None  # built once, shared by spark_file and kafka
        self.tmp = pathlib.Path(__import__("tempfile").mkdtemp(prefix="osq-bench-spark-"))

    @property
    def spark(self) -> Any:
        if self._spark is None:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            from pyspark.sql import SparkSession

            from osqueue import jar_path

            existing = SparkSession.getActiveSession()
            if existing is not None:
                self._spark = existing
            else:
                self.s.log("starting a local[2] SparkSession ...")
                self._spark = (
                    SparkSession.builder.appName("osqueue-bench")
                    .master("local[2]")
                    .config("spark.jars", ",".join([jar_path(), *self.extra_jars]))
                    .config("spark.driver.memory", "4g")
                    .config("spark.ui.enabled", "false")
                    .config("spark.ui.showConsoleProgress", "false")
                    .config("spark.sql.shuffle.partitions", "2")
                    .config("spark.driver.bindAddress", "127.0.0.1")
                    .config("spark.driver.host", "127.0.0.1")
                    .config("spark.sql.streaming.stopTimeout", "30s")
                    .getOrCreate()
                )
                self._created = True
                self._spark.sparkContext.setLogLevel("ERROR")
        return self._spark

    def checkpoint(self, name: str) -> str:
        return str(self.tmp / "ckpt" / f"{name}-{uuid.uuid4().hex[:8]}")

    def close(self) -> None:
        if self._spark is not None and self._created:
            self._spark.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _stream_to_noop(spark: Any, df: Any, checkpoint: str) -> dict[str, Any]:
    """Runs df (a streaming DataFrame) into the noop sink with Trigger.AvailableNow; wall time
    from start() to the end of the query, the rows Spark counted and its own phase durations."""
    # Level the ground: collect the previous query's garbage before the clock starts (without
    # this, whichever side ran first in a pair paid for the last query's garbage).
    spark.sparkContext._jvm.java.lang.System.gc()
    t0 = time.monotonic()
    q = df.writeStream.format("noop").trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
    q.awaitTermination()
    wall = time.monotonic() - t0
    progress = [p for p in q.recentProgress if p]
    if q.exception() is not None:
        raise RuntimeError(f"streaming query failed: {q.exception()}")
    durations: dict[str, float] = {}
    for p in progress:
        for k, v in (p.get("durationMs") or {}).items():
            durations[k] = durations.get(k, 0) + v
    return {
        "wall_s": wall,
        "rows": sum(int(p.get("numInputRows", 0)) for p in progress),
        "micro_batches": sum(1 for p in progress if int(p.get("numInputRows", 0)) > 0),
        "duration_ms": durations,
    }


@dataclass
class SparkDataset:
    """The same records as an osqueue queue on the local filesystem (one batch file per
    `batch_bytes`) and as text files (one file per osqueue batch, the same records as lines)."""

    queue_dir: pathlib.Path
    text_dir: pathlib.Path
    manifest: bytes
    records: int
    record_bytes: int
    batches: int
    payload_bytes: int
    queue_bytes: int
    text_bytes: int
    write_s: float

    def restore_queue(self) -> None:
        """Puts the manifest back as written: every batch queued again (a consumer dequeues)."""
        (self.queue_dir / MANIFEST).write_bytes(self.manifest)


def _spark_dataset(holder: SparkHolder, s: Settings) -> SparkDataset:
    if holder.dataset is not None:
        return holder.dataset
    import random

    from osqueue.producer import Producer

    total = s.spark_mb << 20
    record_bytes = s.record_bytes
    batch_bytes = (1 if s.quick else 8) << 20
    per_batch = max(1, batch_bytes // record_bytes)
    records = max(per_batch, total // record_bytes)
    rng = random.Random(7)
    filler = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(record_bytes))
    qdir, tdir = holder.tmp / "queue", holder.tmp / "text"
    tdir.mkdir(parents=True)
    s.log(f"spark data: {records} records of {record_bytes} B ({records * record_bytes / 1e6:.0f} MB) in batches of "
          f"{per_batch} -> {qdir} and {tdir}")
    t0 = time.monotonic()
    batches = 0
    with Producer(str(qdir), flush_interval=3600, flush_size_bytes=1 << 40) as p:
        for start in range(0, records, per_batch):
            batch = [(b"%010d" % i + filler)[:record_bytes] for i in range(start, min(start + per_batch, records))]
            for c in range(0, len(batch), 1000):
                p.produce(batch[c:c + 1000], b"bench")
            p.flush()
            (tdir / f"part-{batches:05d}.txt").write_bytes(b"\n".join(batch) + b"\n")
            batches += 1
    write_s = time.monotonic() - t0
    queue_bytes = sum(f.stat().st_size for f in (qdir / PREFIX).glob("*.batch"))
    text_bytes = sum(f.stat().st_size for f in tdir.iterdir())
    ds = SparkDataset(qdir, tdir, (qdir / MANIFEST).read_bytes(), records, record_bytes, batches,
                      records * record_bytes, queue_bytes, text_bytes, write_s)
    holder.dataset = ds
    return ds


def _osqueue_read(holder: SparkHolder, ds: SparkDataset) -> dict[str, Any]:
    ds.restore_queue()
    spark = holder.spark
    df = spark.readStream.format("osqueue").option("gc", "false").load(str(ds.queue_dir)).select("value")
    return _stream_to_noop(spark, df, holder.checkpoint("osqueue"))


def _compare_sources(
    holder: SparkHolder, s: Settings, ds: SparkDataset, name: str, other: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """A warm-up of each side, then repeats alternating which goes first; rows/s per repeat."""
    if not s.quick:  # --quick: no warm-up (kept short; its figures are not goals)
        s.log(f"{name}: warm-up (one run of each, not counted) ...")
        _osqueue_read(holder, ds)
        other()
    runs = []
    for r in range(s.ratio_repeats):
        pair = {}
        order = ("osqueue", name) if r % 2 == 0 else (name, "osqueue")
        for side in order:
            pair[side] = _osqueue_read(holder, ds) if side == "osqueue" else other()
        for side in pair:
            if pair[side]["rows"] != ds.records:
                raise RuntimeError(f"{name}: {side} read {pair[side]['rows']} rows, expected {ds.records}")
        ratio = pair[name]["wall_s"] / pair["osqueue"]["wall_s"]  # = osqueue rows/s / other rows/s
        runs.append({"osqueue": pair["osqueue"], name: pair[name], "ratio": ratio, "order": list(order)})
        s.log(
            f"{name} run {r + 1}: osqueue {ds.records / pair['osqueue']['wall_s']:,.0f} rows/s "
            f"({pair['osqueue']['wall_s']:.2f} s), {name} {ds.records / pair[name]['wall_s']:,.0f} rows/s "
            f"({pair[name]['wall_s']:.2f} s), ratio {ratio:.2f}"
        )
    return {
        "records": ds.records,
        "record_bytes": ds.record_bytes,
        "payload_bytes": ds.payload_bytes,
        "osqueue_rows_per_s": summarize([ds.records / r["osqueue"]["wall_s"] for r in runs]),
        f"{name}_rows_per_s": summarize([ds.records / r[name]["wall_s"] for r in runs]),
        "osqueue_mb_per_s": summarize([ds.payload_bytes / r["osqueue"]["wall_s"] / 1e6 for r in runs]),
        f"{name}_mb_per_s": summarize([ds.payload_bytes / r[name]["wall_s"] / 1e6 for r in runs]),
        "ratio_osqueue_to_" + name: summarize([r["ratio"] for r in runs]),
        "raw_runs": runs,
    }


# ---------------------------------------------------------------------------------------------
# benchmark 3: Spark source vs Spark's file source


def bench_spark_file(env: Env, s: Settings) -> dict[str, Any]:
    holder = s.spark
    ds = _spark_dataset(holder, s)
    spark = holder.spark

    def text() -> dict[str, Any]:
        df = spark.readStream.format("text").load(str(ds.text_dir)).select("value")
        return _stream_to_noop(spark, df, holder.checkpoint("text"))

    out = _compare_sources(holder, s, ds, "text", text)
    ratio = out["ratio_osqueue_to_text"]
    return {
        "description": f"the same {ds.records} records of {ds.record_bytes} B ({ds.payload_bytes / 1e6:.0f} MB) on the local "
        f"filesystem: an osqueue queue of {ds.batches} batch files vs {ds.batches} text files (one per batch, one "
        "record per line); each read by a streaming query select(value) -> format('noop') with "
        "trigger(availableNow=True), fresh checkpoint per run (the queue's manifest is restored between runs); "
        "rows/s = records / wall time from start() to the end of the query; local[2]",
        "store": "local filesystem (no hadoop-aws in pyspark's jars, so no s3a for the file source)",
        "batches": ds.batches,
        "queue_bytes": ds.queue_bytes,
        "text_bytes": ds.text_bytes,
        "data_write_s": ds.write_s,
        **out,
        "goal": "osqueue rows/s / file source rows/s >= 1.0",
        "goal_met": bool(ratio["median"] >= 1.0),
    }


# ---------------------------------------------------------------------------------------------
# benchmark 4: Spark source vs Spark's Kafka source (a local KRaft broker)

KAFKA_VERSION = "3.9.1"  # Spark 4.1.3's kafka-clients version (its parent pom's kafka.version)
SPARK_KAFKA_VERSION = "4.1.3"
# spark-token-provider-kafka 4.1.x could not be resolved from the Maven repository this was
# developed against; the newest one that was, 4.0.0, is the fallback (a small, stable API).
TOKEN_PROVIDER_VERSIONS = ("4.1.3", "4.0.0")
CACHE = pathlib.Path(os.environ.get("OSQUEUE_BENCH_CACHE", pathlib.Path.home() / ".cache" / "osqueue-bench"))


def _maven_fetch(name: str, deps: Sequence[tuple[str, str, str]], transitive: bool, log: Callable[[str], None]) -> list[str]:
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
        exclusions = "" if transitive else "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
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
            cwd=base, capture_output=True, text=True, timeout=900,
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
    cached = [tp for tp in TOKEN_PROVIDER_VERSIONS if (CACHE / "maven" / f"spark-sql-kafka-{SPARK_KAFKA_VERSION}-tp{tp}" / ".complete").is_file()]
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
            versions = {"kafka_broker": KAFKA_VERSION, "spark_sql_kafka": SPARK_KAFKA_VERSION,
                        "spark_token_provider_kafka": tp, "kafka_clients": KAFKA_VERSION, "commons_pool2": "2.12.1"}
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
    log4j.write_text("log4j.rootLogger=WARN, f\nlog4j.appender.f=org.apache.log4j.FileAppender\n"
                     f"log4j.appender.f.File={work / 'broker.log'}\nlog4j.appender.f.layout=org.apache.log4j.PatternLayout\n"
                     "log4j.appender.f.layout.ConversionPattern=%d %p %c - %m%n\n")
    java = shutil.which("java") or "java"
    cp = os.pathsep.join(jars)
    jvm = [java, "-Xmx1g", f"-Dlog4j.configuration=file:{log4j}", "-cp", cp]
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    fmt = subprocess.run([*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
                         capture_output=True, text=True, timeout=120)
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
    ds = _spark_dataset(holder, s)
    spark = holder.spark
    work = holder.tmp / "kafka"
    work.mkdir(parents=True, exist_ok=True)
    with kafka_broker(broker_jars, work, s.log) as bootstrap:
        topic = "bench"
        t0 = time.monotonic()
        (spark.read.text(str(ds.text_dir)).select("value").write.format("kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save())
        load_s = time.monotonic() - t0
        s.log(f"kafka: loaded {ds.records} records into topic '{topic}' (2 partitions) in {load_s:.1f} s")

        def kafka() -> dict[str, Any]:
            df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest").load().select("value"))
            return _stream_to_noop(spark, df, holder.checkpoint("kafka"))

        out = _compare_sources(holder, s, ds, "kafka", kafka)
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


# ---------------------------------------------------------------------------------------------
# benchmark 5: end-to-end latency, produce() -> row visible in foreachBatch


def _latency_run(env: Env, s: Settings, holder: SparkHolder, duration: float, rate: float) -> dict[str, Any]:
    from osqueue.producer import Producer

    spark = holder.spark
    prefix = f"latency-{uuid.uuid4().hex[:8]}"
    # The queue exists (empty manifest) before the query starts.
    with Producer(env.uri(prefix), flush_interval=0.1, store_options=env.options()) as p:
        p.produce([b"warm-0:0"]).wait_durable(60)
    seen: dict[int, tuple[float, float]] = {}
    lock = threading.Lock()
    batches: list[dict[str, Any]] = []

    def on_batch(df: Any, batch_id: int) -> None:
        t_call = time.time()
        rows = df.select("value").collect()
        t_rows = time.time()
        with lock:
            batches.append({"batch": batch_id, "rows": len(rows), "collect_s": t_rows - t_call})
            for row in rows:
                key, ts = bytes(row.value).decode().split(":")
                if key.startswith("warm"):
                    continue
                seen[int(key)] = (t_call - int(ts) / 1e9, t_rows - int(ts) / 1e9)

    reader = spark.readStream.format("osqueue")
    for k, v in env.options().items():
        reader = reader.option(k, v)
    q = (reader.load(env.uri(prefix)).writeStream.foreachBatch(on_batch).trigger(processingTime="0 seconds")
         .option("checkpointLocation", holder.checkpoint("latency")).start())
    try:
        deadline = time.monotonic() + 60
        while not batches and time.monotonic() < deadline:  # the query is up: it has seen the warm-up entry
            time.sleep(0.05)
        durable: list[float] = []
        n = int(duration * rate)
        with Producer(env.uri(prefix), flush_interval=0.1, store_options=env.options()) as p:
            start = time.monotonic()
            for i in range(n):
                target = start + i / rate
                delay = target - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                t0 = time.time()
                h = p.produce([f"{i}:{time.time_ns()}".encode()])
                h.add_done_callback(lambda f, t0=t0: durable.append(time.time() - t0))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= n:
                    break
            time.sleep(0.05)
    finally:
        progress = [pr for pr in q.recentProgress if pr and int(pr.get("numInputRows", 0)) > 0]
        q.stop()
    # Where a micro-batch's time goes, by Spark's own phases (median over the batches with rows).
    phases: dict[str, list[float]] = {}
    for pr in progress:
        for k, v in (pr.get("durationMs") or {}).items():
            phases.setdefault(k, []).append(float(v))
    with lock:
        visible = sorted(v[1] * 1000 for v in seen.values())
        handed = sorted(v[0] * 1000 for v in seen.values())
        nb = len(batches)
        collect_ms = sorted(b["collect_s"] * 1000 for b in batches)
    if len(seen) < n:
        raise RuntimeError(f"latency: {len(seen)} of {n} records seen within 60 s after the last produce()")
    dur = sorted(d * 1000 for d in durable)
    return {
        "samples": len(visible),
        "p50_ms": _percentile(visible, 50),
        "p90_ms": _percentile(visible, 90),
        "p99_ms": _percentile(visible, 99),
        "max_ms": visible[-1],
        "handed_p50_ms": _percentile(handed, 50),
        "handed_p99_ms": _percentile(handed, 99),
        "durable_p50_ms": _percentile(dur, 50),
        "durable_p99_ms": _percentile(dur, 99),
        "micro_batches": nb,
        "collect_p50_ms": _percentile(collect_ms, 50),
        "phase_p50_ms": {k: _percentile(sorted(v), 50) for k, v in phases.items()},
        "visible_ms": [round(v, 1) for v in visible],
    }


def bench_latency(env: Env, s: Settings) -> dict[str, Any]:
    holder = s.spark
    duration = 3.0 if s.quick else 30.0
    rate = 20.0
    runs = []
    for r in range(1 if s.quick else s.repeats):  # --quick: one run (each is a query start + 3 s)
        run = _latency_run(env, s, holder, duration, rate)
        runs.append(run)
        s.log(
            f"latency run {r + 1}: {run['samples']} samples, produce -> visible p50 {run['p50_ms']:.0f} ms, "
            f"p99 {run['p99_ms']:.0f} ms (produce -> durable p50 {run['durable_p50_ms']:.0f} ms; "
            f"{run['micro_batches']} micro-batches)"
        )
    p50 = summarize([r["p50_ms"] for r in runs])
    p99 = summarize([r["p99_ms"] for r in runs])
    return {
        "description": f"one record produced every {1000 / rate:.0f} ms for {duration:g} s per run by a Python Producer "
        "(flush_interval 0.1 s) into a queue on the S3 server (through the latency proxy if any); the value carries "
        "time.time_ns() at produce(); a streaming query format('osqueue') -> foreachBatch with "
        "trigger(processingTime='0 seconds') (micro-batch: the source has no continuous mode) collects each "
        "micro-batch on the driver; latency = time after collect() - produce time (same process, same clock)",
        "trigger": "processingTime 0 (micro-batch; continuous mode needs a ContinuousStream, which the source does not implement)",
        "samples_per_run": summarize([r["samples"] for r in runs]),
        "p50_ms": p50,
        "p90_ms": summarize([r["p90_ms"] for r in runs]),
        "p99_ms": p99,
        "max_ms": summarize([r["max_ms"] for r in runs]),
        "handed_to_foreach_batch_p50_ms": summarize([r["handed_p50_ms"] for r in runs]),
        "produce_to_durable_p50_ms": summarize([r["durable_p50_ms"] for r in runs]),
        "produce_to_durable_p99_ms": summarize([r["durable_p99_ms"] for r in runs]),
        "collect_p50_ms": summarize([r["collect_p50_ms"] for r in runs]),
        "micro_batches": summarize([r["micro_batches"] for r in runs]),
        "micro_batch_phase_p50_ms": {
            k: summarize([r["phase_p50_ms"][k] for r in runs if k in r["phase_p50_ms"]])
            for k in sorted({k for r in runs for k in r["phase_p50_ms"]})
        },
        "samples_ms": [v for r in runs for v in r["visible_ms"]],
        "goal": "p50 <= 400 ms and p99 <= 1000 ms",
        "goal_met": bool(p50["median"] <= 400 and p99["median"] <= 1000),
    }


# ---------------------------------------------------------------------------------------------
# plots (matplotlib, Agg backend: no display needed)


def _goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measured ratio against its goal: (item, what, stat, goal, higher is better)."""
    b = result["benchmarks"]
    rows: list[dict[str, Any]] = []

    def add(item: str, what: str, stat: dict[str, Any] | None, goal: float, unit: str = "", higher: bool = True) -> None:
        if stat and stat.get("median") is not None:
            met = stat["median"] >= goal if higher else stat["median"] <= goal
            rows.append({"item": item, "what": what, "stat": stat, "goal": goal, "unit": unit, "higher": higher, "met": met})

    if "raw_put" in b:
        add("1", "JVM producer MB/s ÷ raw PUT MB/s", b["raw_put"].get("ratio_producer_to_raw_put"), 0.9)
    if "contention" in b:
        add("2", "8 producers ÷ 1 (batches/s, shared committer)", b["contention"]["modes"]["shared"]["speedup_8_vs_1"], 6.0, "x")
    if "spark_file" in b:
        add("3", "osqueue source rows/s ÷ text file source", b["spark_file"].get("ratio_osqueue_to_text"), 1.0)
    if "kafka" in b:
        add("4", "osqueue source rows/s ÷ Kafka source", b["kafka"].get("ratio_osqueue_to_kafka"), 1.0)
    if "latency" in b:
        add("5", "produce → visible in foreachBatch, p50", b["latency"]["p50_ms"], 400, " ms", higher=False)
        add("5", "produce → visible in foreachBatch, p99", b["latency"]["p99_ms"], 1000, " ms", higher=False)
    if "py_vs_jvm" in b:
        add("7", "Python producer MB/s ÷ JVM producer", b["py_vs_jvm"].get("ratio_python_to_jvm"), 0.5)
    return rows


def write_plots(result: dict[str, Any], out_dir: pathlib.Path, stem: str) -> list[str]:
    """PNG figures beside the JSON: contention curve, depth cost, latency distribution, the ratios
    against their goals and the Spark sources' rows/s. Returns the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = result["benchmarks"]
    written: list[str] = []
    title_suffix = f" ({'quick' if result['quick'] else 'full'} run {result['started']})"

    def save(fig: Any, name: str) -> None:
        path = out_dir / f"{stem}-{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path.name)

    def err(stats: Sequence[dict[str, Any]]) -> list[list[float]]:
        return [[st["median"] - st["min"] for st in stats], [st["max"] - st["median"] for st in stats]]

    if "contention" in b:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for mode, md in b["contention"]["modes"].items():
            xs = [r["producers"] for r in md["rows"]]
            st = [r["batches_per_s"] for r in md["rows"]]
            ax.errorbar(xs, [x["median"] for x in st], yerr=err(st), marker="o", capsize=3,
                        label=f"{mode} ({'one group committer' if mode == 'shared' else 'one committer each'})")
        one = b["contention"]["modes"]["shared"]["rows"][0]["batches_per_s"]["median"]
        xs = [r["producers"] for r in b["contention"]["modes"]["shared"]["rows"]]
        ax.plot(xs, [one * x for x in xs], "k:", label="linear (N × one producer)")
        ax.plot(xs, [one * 6 / 8 * x for x in xs], color="grey", ls="--", lw=0.8, label="goal: 8 producers ≥ 6× one")
        ax.set_xlabel("producers (threads, one manifest)")
        ax.set_ylabel("batches enqueued / s (median, min–max)")
        ax.set_xticks(xs)
        ax.set_title("Manifest contention" + title_suffix, fontsize=9)
        ax.legend(fontsize=8)
        save(fig, "contention")

    if "depth" in b:
        rows = b["depth"]["rows"]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        xs = [r["queued_entries"] for r in rows]
        st = [r["append_latency_ms"] for r in rows]
        ax.errorbar(xs, [x["median"] for x in st], yerr=err(st), marker="o", capsize=3, label="append latency (ms)")
        ax.set_xscale("log")
        ax.set_xlabel("queued entries in the manifest")
        ax.set_ylabel("append latency, ms (median, min–max)")
        ax2 = ax.twinx()
        ax2.plot(xs, [r["bytes_rewritten_per_append"] / 1e6 for r in rows], "s--", color="tab:red", label="MB rewritten per append")
        ax2.set_ylabel("MB rewritten per append", color="tab:red")
        ax.set_title("Cost vs queue depth" + title_suffix, fontsize=9)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
        save(fig, "depth")

    if "latency" in b and b["latency"].get("samples_ms"):
        lat = b["latency"]
        samples = sorted(lat["samples_ms"])
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9.6, 4.0))
        ax.hist(samples, bins=60, color="tab:blue", alpha=0.8)
        for q, style in (("p50_ms", "-"), ("p99_ms", "--")):
            ax.axvline(lat[q]["median"], color="k", ls=style, lw=1, label=f"{q[:3]} {lat[q]['median']:.0f} ms")
        ax.axvline(400, color="tab:green", ls=":", label="goal p50 ≤ 400 ms")
        ax.axvline(1000, color="tab:red", ls=":", label="goal p99 ≤ 1 s")
        ax.set_xlabel("produce() → row visible in foreachBatch, ms")
        ax.set_ylabel("records")
        ax.legend(fontsize=8)
        ax2.plot(samples, [i / len(samples) for i in range(1, len(samples) + 1)])
        ax2.set_xlim(left=0)
        ax2.set_xlabel("ms")
        ax2.set_ylabel("fraction of records (CDF)")
        ax2.axvline(400, color="tab:green", ls=":")
        ax2.axvline(1000, color="tab:red", ls=":")
        ax2.grid(True, which="both", alpha=0.3)
        fig.suptitle(f"End-to-end latency, {len(samples)} records over {lat['samples_per_run']['n']} runs, "
                     f"S3 +{result['s3']['latency_ms']:g} ms/request" + title_suffix, fontsize=9)
        save(fig, "latency")

    goals = _goals(result)
    if goals:
        fig, ax = plt.subplots(figsize=(8.8, 0.55 * len(goals) + 1.6))
        labels, vals, lo, hi, colors = [], [], [], [], []
        for g in goals:
            st, goal = g["stat"], g["goal"]
            # measured / goal, so that 1.0 is the goal for every row ("≥" rows) or goal / measured ("≤" rows)
            f = (lambda v: v / goal) if g["higher"] else (lambda v: goal / v if v else float("nan"))
            med, a, c = f(st["median"]), f(st["min"]), f(st["max"])
            labels.append(f"{g['item']}: {g['what']}\n{st['median']:.2f}{g['unit']} vs goal {'≥' if g['higher'] else '≤'} {goal:g}{g['unit']}")
            vals.append(med)
            lo.append(med - min(a, c))
            hi.append(max(a, c) - med)
            colors.append("tab:green" if g["met"] else "tab:red")
        ys = list(range(len(goals)))[::-1]
        ax.barh(ys, vals, xerr=[lo, hi], color=colors, alpha=0.8, capsize=3)
        ax.axvline(1.0, color="k", ls="--", lw=1)
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xlabel("measured ÷ goal (latency: goal ÷ measured); ≥ 1 meets the goal\nmedian, min–max over the repeats", fontsize=8)
        ax.set_title("Goals of issue 7" + title_suffix, fontsize=9)
        save(fig, "ratios")

    sources = [(n, k) for n, k in (("spark_file", "text"), ("kafka", "kafka")) if n in b and b[n].get("osqueue_rows_per_s")]
    if sources:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        names, st = [], []
        for n, k in sources:
            names += [f"osqueue\n({n} run)", {"text": "text files", "kafka": "Kafka"}[k]]
            st += [b[n]["osqueue_rows_per_s"], b[n][f"{k}_rows_per_s"]]
        ax.bar(range(len(names)), [x["median"] for x in st], yerr=err(st), capsize=4,
               color=["tab:blue", "tab:orange"] * len(sources))
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=8)
        ax.set_ylabel("rows/s, availableNow → noop (median, min–max)")
        ax.set_title("Spark streaming sources, same records" + title_suffix, fontsize=9)
        save(fig, "spark-sources")
    return written


# ---------------------------------------------------------------------------------------------
# report


def _markdown(result: dict[str, Any]) -> str:
    mf = result["machine"]
    lines = [
        f"# osqueue benchmarks ({'quick' if result['quick'] else 'full'} run)",
        "",
        f"- started {result['started']}, took {result['elapsed_s']:.0f} s; command: `{result['command']}`",
        f"- machine: {mf['cpu_count']} cores ({mf.get('cpu_model')}), {mf.get('memory_gib')} GiB, "
        f"{mf['platform']}; load average at start {mf.get('loadavg_at_start')}, at end {result.get('loadavg_at_end')}",
        f"- versions: " + ", ".join(f"{k} {v}" for k, v in mf["versions"].items()),
        f"- S3: {result['s3']['kind']} on loopback, injected latency {result['s3']['latency_ms']:g} ms per request "
        "(proxy in its own process)",
        "- each figure: median (min–max) over the repeats; timings are noisy (shared machine)",
        "",
    ]
    b = result["benchmarks"]
    goals = _goals(result)
    if goals:
        lines += ["## Goals", "", "| # | what | goal | measured (median, min–max) | verdict |", "| --- | --- | --- | --- | --- |"]
        if result["quick"]:
            lines[-4] = "## Goals (a --quick run: sizes too small for the verdicts to mean anything)"
        for g in goals:
            verdict = "met" if g["met"] else "**missed**"
            lines.append(
                f"| {g['item']} | {g['what']} | {'≥' if g['higher'] else '≤'} {g['goal']:g}{g['unit']} | "
                f"{_fmt(g['stat'], g['unit'], 2)} | {'(quick) ' + verdict if result['quick'] else verdict} |"
            )
        lines.append("")
    skipped = {n: v["skipped"] for n, v in b.items() if isinstance(v, dict) and "skipped" in v}
    for n, why in skipped.items():
        lines += [f"- `{n}` skipped: {why}"]
    if skipped:
        lines.append("")
    if result.get("plots"):
        lines += ["Plots: " + ", ".join(f"[{p}]({p})" for p in result["plots"]), ""]
    if "contention" in b:
        c = b["contention"]
        lines += ["## Manifest contention", "", c["description"] + f"; {c['duration_s']:g} s per run.", ""]
        for mode, md in c["modes"].items():
            lines += [
                f"### {mode}",
                "",
                "| producers | batches/s | CAS attempts/write | batches/write | p50 ms | p99 ms | duplicates |",
                "| --- | --- | --- | --- | --- | --- | --- |",
            ]
            for r in md["rows"]:
                lines.append(
                    f"| {r['producers']} | {_fmt(r['batches_per_s'])} | {_fmt(r['cas_attempts_per_write'], '', 2)} | "
                    f"{_fmt(r['batches_per_write'], '', 2)} | {_fmt(r['p50_ms'], '', 0)} | {_fmt(r['p99_ms'], '', 0)} | "
                    f"{r['duplicates']} |"
                )
            goal = "goal ≥ 6x" if mode == "shared" else "no goal: separate committers racing on the CAS"
            lines += ["", f"8 vs 1 producers: {_fmt(md['speedup_8_vs_1'], 'x', 2)} ({goal})", ""]
    if "depth" in b:
        lines += [
            "## Cost vs queue depth",
            "",
            b["depth"]["description"] + ".",
            "",
            "| queued entries | manifest bytes | bytes rewritten/append | append latency ms | append CPU ms |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in b["depth"]["rows"]:
            lines.append(
                f"| {r['queued_entries']} | {r['manifest_bytes']} | {r['bytes_rewritten_per_append']} | "
                f"{_fmt(r['append_latency_ms'])} | {_fmt(r['append_cpu_ms'], '', 3)} |"
            )
        lines.append("")
    if "py_vs_jvm" in b:
        p = b["py_vs_jvm"]
        lines += ["## Python producer vs JVM producer", "", p["description"] + ".", ""]
        lines.append(
            f"- Python: {_fmt(p['python_mb_per_s'], ' MB/s', 2)} without fixed cost, "
            f"{_fmt(p['python_entries_per_s'], ' entries/s', 0)} ({_fmt(p['python_mb_per_s_end_to_end'], ' MB/s', 2)} end to end; "
            f"fixed {_fmt(p['python_fixed_s'], ' s', 2)})"
        )
        if isinstance(p.get("jvm"), str):
            lines.append(f"- JVM: {p['jvm']}")
        else:
            lines += [
                f"- JVM: {_fmt(p['jvm_mb_per_s'], ' MB/s', 2)} without fixed cost "
                f"({_fmt(p['jvm_mb_per_s_end_to_end'], ' MB/s', 2)} end to end; fixed incl. JVM start {_fmt(p['jvm_startup_s'], ' s', 2)})",
                f"- ratio Python/JVM: {_fmt(p['ratio_python_to_jvm'], '', 2)} "
                f"(end to end: {_fmt(p['ratio_python_to_jvm_end_to_end'], '', 2)}); goal ≥ 0.5",
            ]
        lines.append("")
    if "requests" in b:
        q = b["requests"]
        lines += [
            "## Object-store requests per 1,000 entries",
            "",
            q["description"] + f"; {_fmt(q['batches'], ' batches', 0)}, {_fmt(q['entries_per_batch'], ' entries per batch', 0)}.",
            "",
            "| phase | PUT | GET | LIST | DELETE |",
            "| --- | --- | --- | --- | --- |",
        ]
        for phase in ("produce", "consume", "gc", "total"):
            lines.append(
                f"| {phase} | " + " | ".join(_fmt(q[phase][k], "", 2) for k in ("PUT", "GET", "LIST", "DELETE")) + " |"
            )
        lines.append("")
    if "raw_put" in b and "skipped" not in b["raw_put"]:
        r = b["raw_put"]
        lines += [
            "## JVM producer vs raw PUT",
            "",
            r["description"] + ".",
            "",
            "| | MB/s | seconds |",
            "| --- | --- | --- |",
            f"| producer (payload) | {_fmt(r['producer_mb_per_s'])} | {_fmt(r['producer_s'], '', 2)} |",
            f"| raw PUT (same objects) | {_fmt(r['raw_put_mb_per_s'])} | {_fmt(r['raw_put_s'], '', 2)} |",
            f"| BatchCodec.encode alone | | {_fmt(r['encode_s'], '', 2)} |",
            "",
            f"Ratio producer/raw PUT: {_fmt(r['ratio_producer_to_raw_put'], '', 2)} (goal ≥ 0.9); "
            f"{_fmt(r['batches'], ' batches', 0)} per run; entries verified: {r['entries_verified']}.",
            "",
        ]
    for n, other, label in (("spark_file", "text", "Spark's text file source"), ("kafka", "kafka", "Spark's Kafka source")):
        if n in b and "skipped" not in b[n]:
            r = b[n]
            lines += [
                f"## Spark source vs {label}",
                "",
                r["description"] + ".",
                "",
                "| source | rows/s | MB/s |",
                "| --- | --- | --- |",
                f"| osqueue | {_fmt(r['osqueue_rows_per_s'], '', 0)} | {_fmt(r['osqueue_mb_per_s'])} |",
                f"| {other} | {_fmt(r[other + '_rows_per_s'], '', 0)} | {_fmt(r[other + '_mb_per_s'])} |",
                "",
                f"Ratio osqueue/{other}: {_fmt(r['ratio_osqueue_to_' + other], '', 2)} (goal ≥ 1.0).",
                "",
            ]
            if n == "kafka":
                lines += [f"Versions: " + ", ".join(f"{k} {v}" for k, v in r["versions"].items())
                          + f"; loading the topic took {r['kafka_load_s']:.1f} s.", ""]
    if "latency" in b:
        r = b["latency"]
        lines += [
            "## End-to-end latency",
            "",
            r["description"] + ".",
            "",
            "| produce() → | p50 ms | p99 ms |",
            "| --- | --- | --- |",
            f"| durable (in the manifest) | {_fmt(r['produce_to_durable_p50_ms'], '', 0)} | {_fmt(r['produce_to_durable_p99_ms'], '', 0)} |",
            f"| micro-batch handed to foreachBatch | {_fmt(r['handed_to_foreach_batch_p50_ms'], '', 0)} | |",
            f"| row visible (after collect) | {_fmt(r['p50_ms'], '', 0)} | {_fmt(r['p99_ms'], '', 0)} |",
            "",
            f"{_fmt(r['samples_per_run'], ' samples', 0)} per run, {_fmt(r['micro_batches'], ' micro-batches', 0)} per run, "
            f"collect() p50 {_fmt(r['collect_p50_ms'], ' ms', 0)}; max {_fmt(r['max_ms'], ' ms', 0)}. Trigger: {r['trigger']}.",
            "",
            "A micro-batch with rows, by Spark's phases (`durationMs` of its progress; median per run, then over runs): "
            + ", ".join(f"{k} {_fmt(v, ' ms', 0)}" for k, v in r["micro_batch_phase_p50_ms"].items()) + ".",
            "",
        ]
    return "\n".join(lines)


def normalize_names(only: Sequence[str]) -> list[str]:
    """``--only`` values: names or comma-separated lists of names; '-' and '_' are the same."""
    names = [n.strip().replace("-", "_") for item in only for n in item.split(",") if n.strip()]
    for n in names:
        if n not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {n!r}: choose from {', '.join(BENCHMARKS)}")
    return names


def run_benchmarks(
    *,
    quick: bool,
    only: Sequence[str] = (),
    latency_ms: float = 20.0,
    out: str = "bench/results",
    endpoint: str | None = None,
    command: str = "osqueue bench",
    log: Callable[[str], None] = print,
    spark_mb: int = 0,
    record_bytes: int = 1024,
    plots: bool = True,
) -> tuple[dict[str, Any], pathlib.Path]:
    """Runs the selected benchmarks and writes ``bench-<time>[-quick].json`` and ``.md`` (and PNG
    plots when matplotlib is installed) to ``out``.

    Returns:
        The results and the JSON file's path.
    """
    names = normalize_names(only) or [n for n in BENCHMARKS if not (quick and n in QUICK_SKIPS)]
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    settings = Settings(quick, latency_ms, log, spark_mb=spark_mb, record_bytes=record_bytes)
    result: dict[str, Any] = {
        "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": quick,
        "command": command,
        "repeats": settings.repeats,
        "machine": machine_facts(),
        "benchmarks": {},
    }
    functions = {
        "contention": bench_contention,
        "depth": bench_depth,
        "py_vs_jvm": bench_py_vs_jvm,
        "requests": bench_requests,
        "raw_put": bench_raw_put,
        "spark_file": bench_spark_file,
        "kafka": bench_kafka,
        "latency": bench_latency,
    }
    # Spark's Kafka connector jars must be on the session's class path from the start.
    if "kafka" in names:
        try:
            settings.kafka = kafka_jars(log)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            settings.kafka_error = f"could not fetch the Kafka jars with Maven: {e}"
    if any(n in SPARK_BENCHMARKS for n in names):
        settings.spark = SparkHolder(settings, settings.kafka[1] if settings.kafka else ())
    with contextlib.ExitStack() as stack:
        if settings.spark is not None:
            stack.callback(settings.spark.close)
        env = stack.enter_context(_environment(latency_ms, endpoint, log))
        result["s3"] = {"kind": env.server_kind, "latency_ms": latency_ms}
        for name in names:
            log(f"== {name}")
            b0 = time.monotonic()
            load0 = _loadavg()
            result["benchmarks"][name] = functions[name](env, settings)
            result["benchmarks"][name]["elapsed_s"] = round(time.monotonic() - b0, 1)
            result["benchmarks"][name]["loadavg_before_after"] = [load0, _loadavg()]
    result["elapsed_s"] = time.monotonic() - t0
    with contextlib.suppress(OSError):
        result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out_dir = pathlib.Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{started.strftime('%Y%m%dT%H%M%SZ')}" + ("-quick" if quick else "")
    json_path = out_dir / f"{stem}.json"
    if plots:
        try:
            result["plots"] = write_plots(result, out_dir, stem)
        except ImportError as e:
            result["plots"] = []
            result["plots_skipped"] = f"matplotlib not installed ({e}); pip install '.[bench]'"
            log("plots skipped: matplotlib is not installed (pip install '.[bench]')")
    json_path.write_text(json.dumps(result, indent=1, default=_json_default) + "\n")
    (out_dir / f"{stem}.md").write_text(_markdown(result) + "\n")
    return result, json_path


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _json_default(o: object) -> object:
    return str(o)


def replot(json_path: str) -> list[str]:
    """(Re)writes the PNG plots of a results JSON beside it; returns their names."""
    path = pathlib.Path(json_path)
    result = json.loads(path.read_text())
    return write_plots(result, path.parent, path.stem)


def _main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "proxy":
        serve_proxy(argv[1], float(argv[2]))
        return
    if len(argv) == 2 and argv[0] == "plots":
        print("\n".join(replot(argv[1])))
        return
    raise SystemExit(
        "usage: python -m osqueue.bench proxy UPSTREAM LATENCY_MS | python -m osqueue.bench plots RESULTS.json "
        "(use `osqueue bench` otherwise)"
    )


if __name__ == "__main__":
    _main(sys.argv[1:])
