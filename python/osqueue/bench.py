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

BENCHMARKS = ("contention", "depth", "py_vs_jvm", "requests")
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

    def __post_init__(self) -> None:
        self.repeats = 2 if self.quick else 3


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
        with Producer(store=produce_store, flush_interval=0.1, metrics=registry) as p:
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
    return "\n".join(lines)


def run_benchmarks(
    *,
    quick: bool,
    only: Sequence[str] = (),
    latency_ms: float = 20.0,
    out: str = "bench/results",
    endpoint: str | None = None,
    command: str = "osqueue bench",
    log: Callable[[str], None] = print,
) -> tuple[dict[str, Any], pathlib.Path]:
    """Runs the selected benchmarks and writes ``bench-<time>[-quick].json`` and ``.md`` to ``out``.

    Returns:
        The results and the JSON file's path.
    """
    names = list(only) or list(BENCHMARKS)
    for n in names:
        if n not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {n!r}: choose from {', '.join(BENCHMARKS)}")
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    settings = Settings(quick, latency_ms, log)
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
    }
    with _environment(latency_ms, endpoint, log) as env:
        result["s3"] = {"kind": env.server_kind, "latency_ms": latency_ms}
        for name in names:
            log(f"== {name}")
            b0 = time.monotonic()
            result["benchmarks"][name] = functions[name](env, settings)
            result["benchmarks"][name]["elapsed_s"] = round(time.monotonic() - b0, 1)
    result["elapsed_s"] = time.monotonic() - t0
    with contextlib.suppress(OSError):
        result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out_dir = pathlib.Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{started.strftime('%Y%m%dT%H%M%SZ')}" + ("-quick" if quick else "")
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json.dumps(result, indent=1, default=_json_default) + "\n")
    (out_dir / f"{stem}.md").write_text(_markdown(result) + "\n")
    return result, json_path


def _json_default(o: object) -> object:
    return str(o)


def _main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "proxy":
        serve_proxy(argv[1], float(argv[2]))
        return
    raise SystemExit("usage: python -m osqueue.bench proxy UPSTREAM LATENCY_MS (use `osqueue bench` otherwise)")


if __name__ == "__main__":
    _main(sys.argv[1:])
