"""The chaos run (issue 6): producers, a Spark query and a zombie consumer on one S3 queue behind a
fault-injecting proxy, with SIGKILLs, then the exact checker (``integration.chaos.checker``).

    .venv/bin/python -m integration.chaos.run --entries 20000 --seed 1 --kills-producers 2 \\
        --kills-driver 1 --out /tmp/chaos-short

What runs, each in its own OS process (own session, so ``kill -9`` reaches the whole group):

- an S3 server (``tests/s3/s3server.py``, moto by default) and, in this process, the seeded
  ``FaultProxy`` (``tests/faults/fault_proxy.py``) in front of it; everything below except the
  zombie and the harness's own observations goes through the proxy;
- 4 producers: ``jvm0``/``jvm1`` (``QueueTool produce --sync true --keep-going true``) and
  ``py0``/``py1`` (``integration/chaos/py_producer.py``), each with ``entries / 4`` values to get
  resolved (acked or failed); a killed producer restarts as a new incarnation with what is left;
- the Spark driver (``integration/chaos/spark_driver.py``): ``format("osqueue")`` ->
  ``foreachBatch`` into ``out/batch-<id>.jsonl``, checkpoint in ``checkpoint/``; restarted after
  each kill and after each query failure (counted apart);
- the zombie consumer (``integration/chaos/zombie.py``), initialized before the query's first
  start, straight to the server (no faults: each of its attempts must meet the epoch check).

Kills happen at seeded points of the production progress (a fraction of the entries resolved),
so they land mid-run whatever the machine's speed. When the producers are done, the query drains
until it has delivered every sequence below the manifest's ``next_sequence``; then everything
stops and the checker writes ``report.json`` and ``report.md``. Exit status: the checker's.

With ``--subscriptions N`` (issue 26) the queue has N named subscriptions ``s0``..``s<N-1>``,
created before anything reads, and each has its own reader process instead of the one query:
``s0``.. are Spark drivers (``--subscription`` option, own checkpoint ``checkpoint/<name>``), the
last ``--native-readers`` (default N // 3) are native consumers (``integration/chaos/sub_consumer.py``),
all through the proxy, sinks in ``out/<name>/``. There is no zombie (readers of different
subscriptions never fence each other; fencing within one is the kills' restarts). The
``--kills-driver`` kill points go to the readers in turn (``s0``, ``s1``, ...). When every reader
delivered everything, each is told the last sequence (``stop-<name>``) and stops cleanly once it
acknowledged it; then a GC cycle runs straight to the server and the checker checks every
subscription (0 lost, 0 duplicated, in order), that every subscription's position in the final
head is ``next_sequence``, that the head holds no entry, and that the GC cycle found no batch
file still referenced.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]
for _p in (REPO / "tests" / "faults", REPO / "tests" / "s3"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from fault_proxy import FaultProxy  # noqa: E402

from integration.chaos import checker  # noqa: E402

PRODUCERS = ("jvm0", "jvm1", "py0", "py1")
PREFIX = "chaos"


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class CountingFaultProxy(FaultProxy):
    """The fault proxy, also counting requests by HTTP method and reply-dropped PUTs."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.by_method: collections.Counter[str] = collections.Counter()
        self.drop_reply_on_put = 0

    def decide(self, method: str, headers: Any) -> str | None:
        fault = super().decide(method, headers)
        with self._lock:
            self.by_method[method] += 1
            if fault == "drop_reply" and method == "PUT":
                self.drop_reply_on_put += 1
        return fault

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "counts": dict(self.counts),
                "injected": {k: self.counts[k] for k in ("503", "500", "stall", "reset", "drop_reply")},
                "injected_on_conditional": dict(self.injected_on_conditional),
                "by_method": dict(self.by_method),
                "drop_reply_on_put": self.drop_reply_on_put,
                "enabled": self.enabled,
            }


class S3:
    """The S3 server process (tests/s3/s3server.py) and a direct boto3 client."""

    def __init__(self, kind: str, run: pathlib.Path) -> None:
        self.err = open(run / "s3server.err", "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "s3" / "s3server.py"), "--kind", kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"s3server.py --kind {kind} did not start: see {run / 's3server.err'}")
        info = json.loads(line)
        self.endpoint, self.region = info["endpoint"], info["region"]
        self.access_key, self.secret_key = info["access_key"], info["secret_key"]

    def client(self, timeout: float = 30.0):
        from integration.chaos.py_producer import s3_client

        return s3_client(self.endpoint, self.region, self.access_key, self.secret_key, timeout)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


class Tail:
    """Reads the complete lines appended to a file since the last call."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path, self.offset, self.partial = path, 0, b""

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        return [x.decode("utf-8", "replace") for x in complete]


class Child:
    """One incarnation of a killable process (its own session)."""

    def __init__(
        self,
        kind: str,
        name: str,
        incarnation: int,
        argv: list[str],
        stdout: pathlib.Path,
        stderr: pathlib.Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.kind, self.name, self.incarnation = kind, name, incarnation
        self.log = stdout
        out = open(stdout, "ab")
        err = open(stderr, "ab") if stderr else subprocess.STDOUT
        self.proc = subprocess.Popen(
            argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO, start_new_session=True, env=env
        )
        out.close()
        if stderr:
            err.close()
        self.started = time.monotonic()
        self.tail = Tail(stdout)
        self.killed = False

    def kill(self) -> None:
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def alive(self) -> bool:
        return self.proc.poll() is None


class Harness:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.run = pathlib.Path(args.out).resolve()
        if self.run.exists():
            shutil.rmtree(self.run)
        for d in ("producers", "out", "spark", "checkpoint"):
            (self.run / d).mkdir(parents=True)
        for name in PRODUCERS:
            (self.run / "producers" / name).mkdir()
        self.rng = random.Random(args.seed)
        self.events = open(self.run / "events.jsonl", "a", buffering=1)
        self.t0 = time.monotonic()
        self.stop_monitor = threading.Event()
        self.manifest_footer: Any = None
        self.max_segments = 0  # the most segments a sampled head listed
        self.lock = threading.Lock()
        self.resolved = collections.Counter()  # producer name -> entries acked or failed, all incarnations
        self.incarnations = collections.Counter()
        self.producers: dict[str, Child | None] = {n: None for n in PRODUCERS}
        self.finished: set[str] = set()
        self.driver: Child | None = None
        self.driver_starts = 0
        self.driver_batches_since_start = 0
        self.max_delivered = -1
        n = args.subscriptions
        native = n // 3 if args.native_readers < 0 else min(args.native_readers, n - 1 if n else 0)
        self.subs = [f"s{i}" for i in range(n)]
        self.native = set(self.subs[n - native :]) if native else set()
        self.readers: dict[str, Child | None] = dict.fromkeys(self.subs)
        self.reader_starts = collections.Counter()
        self.reader_batches = collections.Counter()  # micro-batches since the reader's last start
        self.reader_delivered = dict.fromkeys(self.subs, -1)
        self.reader_up: dict[str, float | None] = dict.fromkeys(self.subs)  # when its query/consumer started
        for name in self.subs:
            (self.run / "out" / name).mkdir()
            (self.run / "checkpoint" / name).mkdir()
        self.zombie: subprocess.Popen | None = None

    def event(self, event: str, **kw: Any) -> None:
        self.events.write(json.dumps({"t": round(time.monotonic() - self.t0, 2), "event": event, **kw}) + "\n")

    # -- infrastructure -------------------------------------------------------------------------

    def fault_rates(self) -> tuple[dict[str, float], dict[str, float]]:
        a = self.args
        e, c = a.error_rate, a.cas_error_rate
        rates = {"503": 0.30 * e, "500": 0.25 * e, "reset": 0.25 * e, "stall": 0.10 * e, "drop_reply": 0.10 * e}
        cond = {"503": 0.35 * c, "500": 0.25 * c, "reset": 0.3 * c, "stall": 0.1 * c, "drop_reply": a.drop_reply_rate}
        return rates, cond

    def store_options(self, endpoint: str) -> dict[str, str]:
        s = self.s3
        return {
            "fs.s3a.endpoint": endpoint,
            "fs.s3a.access.key": s.access_key,
            "fs.s3a.secret.key": s.secret_key,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.endpoint.region": s.region,
            "fs.s3a.connection.timeout": str(int(self.args.timeout * 1000)),
            "fs.s3a.connection.request.timeout": str(int(self.args.timeout * 1000) + 2000),
        }

    def read_footer(self):
        """The manifest's head (v1 or segmented, docs/format.md §2.2: epoch, next_sequence, depth) and its bytes."""
        from osqueue.format import parse_head

        try:
            raw = self.direct.get_object(Bucket=self.bucket, Key=f"{PREFIX}/ingest/manifest")["Body"].read()
        except self.direct.exceptions.NoSuchKey:
            return None, None
        return parse_head(raw, "manifest"), raw

    def monitor(self) -> None:
        """Samples the manifest (straight from the server) once a second: epoch and sequences."""
        last_epoch, last_write = None, 0.0
        with open(self.run / "epochs.jsonl", "a", buffering=1) as f:
            while not self.stop_monitor.wait(1.0):
                try:
                    footer, _ = self.read_footer()
                except Exception as e:  # noqa: BLE001 - the server is busy; try again
                    log(f"monitor: {type(e).__name__}: {e}")
                    continue
                if footer is None:
                    continue
                self.manifest_footer = footer
                self.max_segments = max(self.max_segments, len(footer.refs))
                now = time.monotonic() - self.t0
                if footer.epoch != last_epoch or now - last_write >= 10:
                    f.write(
                        json.dumps(
                            {
                                "t": round(now, 1),
                                "epoch": footer.epoch,
                                "next_sequence": footer.next_sequence,
                                "entries": footer.depth,
                                "segments": len(footer.refs),  # the head's refs (segments and index objects)
                            }
                        )
                        + "\n"
                    )
                    last_epoch, last_write = footer.epoch, now

    # -- children -------------------------------------------------------------------------------

    def start_producer(self, name: str) -> None:
        a = self.args
        target = a.entries // len(PRODUCERS) + (1 if PRODUCERS.index(name) < a.entries % len(PRODUCERS) else 0)
        remaining = target - self.resolved[name]
        if remaining <= 0:
            self.finished.add(name)
            self.producers[name] = None
            return
        k = self.incarnations[name]
        self.incarnations[name] += 1
        logf = self.run / "producers" / name / f"inc-{k}.log"
        errf = self.run / "producers" / name / f"inc-{k}.err"
        tag = f"{name}-{k}"
        rate = a.entries / len(PRODUCERS) / a.produce_seconds if a.produce_seconds > 0 else 0.0
        if name.startswith("jvm"):
            from integration import jvm_tool

            flush_ms = max(5, int(a.chunk * 1000 / rate * 0.8)) if rate else 5
            argv = jvm_tool.command(
                "produce",
                self.uri,
                tag,
                str(remaining),
                "--per-call",
                str(a.chunk),
                "--flush-ms",
                str(flush_ms),
                "--sync",
                "true",
                "--keep-going",
                "true",
                *(["--segment-entries", str(a.segment_entries)] if a.segment_entries < (1 << 31) - 1 else []),
                store_options=self.store_options(self.proxy.endpoint),
            )
            # QueueTool prints per entry; the attempted range is the whole incarnation's.
            with open(logf, "a") as f:
                f.write(f"attempt\t{tag}\t0\t{remaining}\n")
                f.write(f"per-call\t{tag}\t{a.chunk}\n")
            child = Child("producer-jvm", name, k, argv, logf, errf)
        else:
            s = self.s3
            argv = [
                sys.executable,
                "-m",
                "integration.chaos.py_producer",
                "--endpoint",
                self.proxy.endpoint,
                "--region",
                s.region,
                "--access-key",
                s.access_key,
                "--secret-key",
                s.secret_key,
                "--bucket",
                self.bucket,
                "--prefix",
                PREFIX,
                "--name",
                name,
                "--incarnation",
                str(k),
                "--count",
                str(remaining),
                "--chunk",
                str(a.chunk),
                "--rate",
                f"{rate:.3f}",
                "--timeout",
                str(a.timeout),
                "--log",
                str(logf),
                "--segment-entries",
                str(a.segment_entries),
            ]
            child = Child("producer-py", name, k, argv, errf)
            child.tail = Tail(logf)
        self.producers[name] = child
        self.event("start", kind=child.kind, name=name, incarnation=k, count=remaining)

    def start_driver(self) -> None:
        a = self.args
        k = self.driver_starts
        self.driver_starts += 1
        opts = self.store_options(self.proxy.endpoint)
        opts.update({"gcInterval": a.gc_interval})
        argv = [
            sys.executable,
            "-m",
            "integration.chaos.spark_driver",
            "--queue",
            self.uri,
            "--checkpoint",
            str(self.run / "checkpoint"),
            "--out",
            str(self.run / "out"),
            "--options",
            json.dumps(opts),
            "--max-batches",
            str(a.max_batches),
            "--trigger-ms",
            str(a.trigger_ms),
        ]
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
        self.driver = Child("driver", "driver", k, argv, self.run / "spark" / f"driver-{k}.log", env=env)
        self.driver_batches_since_start = 0
        self.event("start", kind="driver", incarnation=k)

    def start_reader(self, name: str) -> None:
        """(Re)starts the reader of subscription ``name`` (a Spark driver or a native consumer)."""
        a = self.args
        k = self.reader_starts[name]
        self.reader_starts[name] += 1
        stop = self.run / f"stop-{name}"
        if name in self.native:
            s = self.s3
            argv = [sys.executable, "-m", "integration.chaos.sub_consumer", "--endpoint", self.proxy.endpoint,
                    "--region", s.region, "--access-key", s.access_key, "--secret-key", s.secret_key,
                    "--bucket", self.bucket, "--prefix", PREFIX, "--subscription", name,
                    "--out", str(self.run / "out" / name), "--stop-file", str(stop), "--timeout", str(a.timeout)]  # fmt: skip
            kind = "consumer"
        else:
            opts = self.store_options(self.proxy.endpoint)
            opts.update({"gcInterval": a.gc_interval, "subscription": name})
            argv = [sys.executable, "-m", "integration.chaos.spark_driver", "--queue", self.uri,
                    "--checkpoint", str(self.run / "checkpoint" / name), "--out", str(self.run / "out" / name),
                    "--options", json.dumps(opts), "--max-batches", str(a.max_batches),
                    "--trigger-ms", str(a.trigger_ms), "--stop-file", str(stop)]  # fmt: skip
            kind = "driver"
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
        self.readers[name] = Child(kind, name, k, argv, self.run / "spark" / f"{name}-{k}.log", env=env)
        self.reader_batches[name] = 0
        self.reader_up[name] = None
        self.event("start", kind=kind, name=name, incarnation=k)

    def poll_readers(self) -> None:
        for name, r in self.readers.items():
            if r is None:
                continue
            for line in r.tail.lines():
                m = re.search(r" batch (\d+): (\d+) rows, sequences (\d+)\.\.(\d+)", line)
                if m:
                    self.reader_batches[name] += 1
                    self.reader_delivered[name] = max(self.reader_delivered[name], int(m.group(4)))
                elif " batch " in line and "empty" in line:
                    self.reader_batches[name] += 1
                elif " started query " in line or " started subscription " in line:
                    self.reader_up[name] = time.monotonic()
            rc = r.proc.poll()
            if rc is not None and not r.killed and not (rc == 0 and (self.run / f"stop-{name}").exists()):
                why = ""
                for line in reversed(r.log.read_text(errors="replace").splitlines()):
                    if "query failed:" in line or "Exception" in line:
                        why = line[-300:]
                        break
                self.event("query_failed", kind=r.kind, name=name, incarnation=r.incarnation, rc=rc, why=why)
                log(f"reader {name}-{r.incarnation} exited {rc}: {why[:200]}; restarting")
                time.sleep(1.0)
                self.start_reader(name)

    def kill_reader(self, i: int) -> bool:
        """Kills the i-th kill point's reader (in turn) once it is processing (it delivered since its
        start, or its query has been running for 60 s: mid-way through a first micro-batch, slow on a
        loaded machine, or with nothing to deliver); False: not yet."""
        name = self.subs[i % len(self.subs)]
        r = self.readers[name]
        up = self.reader_up[name]
        if self.reader_batches[name] == 0 and (up is None or time.monotonic() - up < 60):
            return False
        r.kill()
        self.poll_readers()
        self.event("kill", kind=r.kind, name=name, incarnation=r.incarnation)
        log(f"kill -9 reader {name}-{r.incarnation} ({r.kind}) at {100 * self.progress():.0f}% produced, "
            f"after {self.reader_batches[name]} batches")  # fmt: skip
        time.sleep(self.rng.uniform(0.5, 3.0))
        self.start_reader(name)
        return True

    def create_subscriptions(self) -> None:
        """Creates s0..s<N-1> straight on the server (earliest: they read from the first entry)."""
        from osqueue.queue.subscriptions import Subscriptions
        from osqueue.store import S3Store

        store = S3Store(self.bucket, PREFIX, client=self.direct)
        subs = Subscriptions(store, "ingest/manifest")
        for name in self.subs:
            subs.create(name)

    def stop_readers(self) -> bool:
        """Tells every reader the last sequence; waits until each acknowledged it and exited 0."""
        f, _ = self.read_footer()
        last = f.next_sequence - 1
        for name in self.subs:
            tmp = self.run / f".stop-{name}"
            tmp.write_text(str(last))
            os.replace(tmp, self.run / f"stop-{name}")
        log(f"readers told to stop after sequence {last}")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            self.poll_readers()  # restarts a reader that failed; a restarted one drains and stops too
            if all(r is not None and r.proc.poll() == 0 for r in self.readers.values()):
                self.event("readers_stopped", last=last)
                return True
            time.sleep(0.25)
        log("readers did not all stop within 180 s")
        return False

    def final_gc(self) -> dict[str, Any]:
        """One GC cycle straight to the server: with every subscription past every entry, no batch
        file may still be referenced (the queue's grace period may keep recent unreferenced ones)."""
        from osqueue.gc import GarbageCollector
        from osqueue.store import S3Store

        store = S3Store(self.bucket, PREFIX, client=self.direct)
        r = GarbageCollector(store, grace_period=0).run_once()
        left = [i.key for i in store.list("ingest/") if i.key.endswith(".batch")]
        return {"deleted": len(r.deleted), "failed": len(r.failed), "kept_referenced": r.kept_referenced,
                "kept_in_grace": r.kept_in_grace, "kept_newer_than_oldest": r.kept_newer_than_oldest,
                "grace_period_ms": r.grace_period_ms, "batch_files_left": len(left)}  # fmt: skip

    def start_zombie(self) -> int:
        s = self.s3
        zlog = self.run / "zombie.log"
        self.zombie = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "integration.chaos.zombie",
                "--endpoint",
                s.endpoint,
                "--region",
                s.region,
                "--access-key",
                s.access_key,
                "--secret-key",
                s.secret_key,
                "--bucket",
                self.bucket,
                "--prefix",
                PREFIX,
                "--log",
                str(zlog),
            ],
            cwd=REPO,
            stdout=open(self.run / "zombie.err", "ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if zlog.exists():
                for line in zlog.read_text().splitlines():
                    if line.startswith("init\t"):
                        return int(line.split("\t")[1])
            if self.zombie.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"the zombie consumer did not initialize: see {self.run / 'zombie.err'}")

    # -- bookkeeping ----------------------------------------------------------------------------

    def poll_producers(self) -> None:
        for name, child in list(self.producers.items()):
            if child is None:
                continue
            self.poll_producers_one(name, child)
            rc = child.proc.poll()
            if rc is None or child.killed:
                continue
            ok = rc == 0 or (child.kind == "producer-jvm" and rc == 3)
            self.event("exit", kind=child.kind, name=name, incarnation=child.incarnation, rc=rc)
            if not ok:
                log(f"{name}-{child.incarnation} exited {rc} (see its .err): restarting")
            self.start_producer(name)  # marks it finished when nothing is left

    def poll_driver(self) -> None:
        d = self.driver
        if d is None:
            return
        for line in d.tail.lines():
            m = re.search(r" batch (\d+): (\d+) rows, sequences (\d+)\.\.(\d+)", line)
            if m:
                self.driver_batches_since_start += 1
                self.max_delivered = max(self.max_delivered, int(m.group(4)))
            elif " batch " in line and "empty" in line:
                self.driver_batches_since_start += 1
        rc = d.proc.poll()
        if rc is not None and not d.killed:
            why = ""
            for line in reversed(d.log.read_text(errors="replace").splitlines()):
                if "query failed:" in line or "Exception" in line:
                    why = line[-300:]
                    break
            self.event("query_failed", kind="driver", incarnation=d.incarnation, rc=rc, why=why)
            log(f"driver {d.incarnation} exited {rc}: {why[:200]}; restarting")
            time.sleep(1.0)
            self.start_driver()

    def progress(self) -> float:
        return sum(self.resolved.values()) / max(1, self.args.entries)

    def kill_producer(self, i: int) -> None:
        kinds = ["jvm", "py"] if (i + self.args.seed) % 2 == 0 else ["py", "jvm"]
        for kind in kinds:
            running = [n for n, c in self.producers.items() if c is not None and c.alive() and n.startswith(kind)]
            if running:
                name = self.rng.choice(running)
                child = self.producers[name]
                child.kill()
                self.poll_producers_one(name, child)
                self.event("kill", kind=child.kind, name=name, incarnation=child.incarnation)
                log(f"kill -9 {name}-{child.incarnation} at {100 * self.progress():.0f}% produced")
                time.sleep(self.rng.uniform(0.5, 3.0))
                self.start_producer(name)
                return
        log("producer kill skipped: no producer running")
        self.event("kill_skipped", kind="producer")

    def poll_producers_one(self, name: str, child: Child) -> None:
        """Counts the entries resolved in the lines the incarnation logged since the last call."""
        for line in child.tail.lines():
            p = line.split("\t")
            if p[0] in ("acked", "failed") and len(p) in (5, 7):  # Python, per call
                self.resolved[name] += int(p[3])
            elif p[0] in ("durable", "failed") and len(p) in (3, 4):  # JVM, per entry
                self.resolved[name] += 1

    def kill_driver(self) -> None:
        d = self.driver
        d.kill()
        self.poll_driver()
        self.event("kill", kind="driver", incarnation=d.incarnation)
        log(
            f"kill -9 Spark driver {d.incarnation} at {100 * self.progress():.0f}% produced, "
            f"after {self.driver_batches_since_start} micro-batches"
        )
        time.sleep(self.rng.uniform(0.5, 3.0))
        self.start_driver()

    # -- the run --------------------------------------------------------------------------------

    def main(self) -> int:
        a = self.args
        meta = {"args": vars(a), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        log(f"run directory {self.run}")
        self.s3 = S3(a.server, self.run)
        log(f"{a.server} S3 server up")
        rates, cond = self.fault_rates()
        self.proxy = CountingFaultProxy(
            self.s3.endpoint,
            seed=a.seed,
            rates=rates,
            conditional_rates=cond,
            stall_seconds=a.timeout + 2.0,
            drop_reply_every=a.drop_reply_every or None,
        )
        self.proxy.start()
        self.direct = self.s3.client()
        self.bucket = f"chaos-{a.seed}-{int(time.time())}"
        self.direct.create_bucket(Bucket=self.bucket)
        self.uri = f"s3a://{self.bucket}/{PREFIX}"
        meta.update(bucket=self.bucket, queue=self.uri, rates=rates, conditional_rates=cond)
        (self.run / "run.json").write_text(json.dumps(meta, indent=1))
        mon = threading.Thread(target=self.monitor, daemon=True)
        mon.start()
        rc = 1
        subs = bool(self.subs)
        try:
            if subs:
                self.create_subscriptions()
                log(f"subscriptions {', '.join(self.subs)} created (native readers: {sorted(self.native) or 'none'})")
                for name in self.subs:
                    self.start_reader(name)
            else:
                zepoch = self.start_zombie()
                log(f"zombie consumer initialized the queue at epoch {zepoch}")
                self.start_driver()
            for name in PRODUCERS:
                self.start_producer(name)
            log(
                f"4 producers ({a.entries:,} entries, {a.chunk} per call) and "
                f"{f'{len(self.subs)} readers' if subs else 'the Spark driver'} started; "
                f"faults: {json.dumps(rates)} / CAS {json.dumps(cond)}"
            )
            pkills = sorted(self.rng.uniform(0.1, 0.8) for _ in range(a.kills_producers))
            dkills = sorted(self.rng.uniform(0.15, 0.85) for _ in range(a.kills_driver))
            meta.update(producer_kill_points=pkills, driver_kill_points=dkills)
            deadline = self.t0 + a.max_minutes * 60
            last_report, pk, dk, driver_wait_since = 0.0, 0, 0, None
            while time.monotonic() < deadline:
                self.poll_producers()
                self.poll_readers() if subs else self.poll_driver()
                prog = self.progress()
                if pk < len(pkills) and prog >= pkills[pk]:
                    self.kill_producer(pk)
                    pk += 1
                if dk < len(dkills) and prog >= dkills[dk]:
                    # Kill a driver that is processing (not one still starting), or after 90 s.
                    driver_wait_since = driver_wait_since or time.monotonic()
                    if subs:
                        if self.kill_reader(dk):
                            dk += 1
                            driver_wait_since = None
                    elif self.driver_batches_since_start > 0 or time.monotonic() - driver_wait_since > 90:
                        self.kill_driver()
                        dk += 1
                        driver_wait_since = None
                done = len(self.finished) == len(PRODUCERS)
                footer = self.manifest_footer
                if done and pk >= len(pkills) and dk >= len(dkills) and footer is not None:
                    if self.proxy.enabled and a.quiet_drain:
                        self.proxy.enabled = False
                        log("producers done: fault injection off for the drain")
                    f2, _ = self.read_footer()
                    delivered = min(self.reader_delivered.values()) if subs else self.max_delivered
                    if delivered >= f2.next_sequence - 1:
                        log(f"drained: every sink delivered every sequence up to {f2.next_sequence - 1}")
                        rc = 0
                        if subs:
                            rc = 0 if self.stop_readers() else 1
                            meta["final_gc"] = self.final_gc()
                            log(f"final GC cycle: {json.dumps(meta['final_gc'])}")
                        break
                if time.monotonic() - last_report >= a.report_every:
                    last_report = time.monotonic()
                    snap = self.proxy.snapshot()
                    inj = sum(snap["injected"].values())
                    log(
                        f"produced {sum(self.resolved.values()):,}/{a.entries:,} ({100 * prog:.0f}%), "
                        f"next_sequence {footer.next_sequence if footer else '-'}, delivered through "
                        f"{self.reader_delivered if subs else self.max_delivered}, kills {pk}+{dk}, requests {snap['counts'].get('requests', 0):,}, "
                        f"faults {inj:,}, producers done {len(self.finished)}"
                    )
                time.sleep(0.25)
            else:
                log(f"TIMEOUT after {a.max_minutes} min: checking what there is")
        finally:
            meta["seconds"] = round(time.monotonic() - self.t0, 1)
            self.shutdown()
            meta["drained"] = rc == 0
            meta["max_segments_listed"] = self.max_segments  # > 0: the run went through segmented heads
            (self.run / "run.json").write_text(json.dumps(meta, indent=1))
        report = checker.check(self.run)
        report["meta"] = meta
        (self.run / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=list) + "\n")
        md = checker.markdown(report)
        (self.run / "report.md").write_text(md)
        print(md, flush=True)
        log(f"{report['verdict']} in {meta['seconds']} s; report: {self.run / 'report.md'}")
        return 0 if (rc == 0 and report["verdict"] == "PASS") else 1

    def shutdown(self) -> None:
        for child in [*self.producers.values(), self.driver, *self.readers.values()]:
            if child is not None and child.alive():
                child.killed = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
        if self.zombie is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.zombie.pid, signal.SIGKILL)
            self.zombie.wait()
        self.stop_monitor.set()
        with contextlib.suppress(Exception):
            _, raw = self.read_footer()
            if raw is not None:
                (self.run / "manifest-final.bin").write_bytes(raw)
        (self.run / "proxy.json").write_text(json.dumps(self.proxy.snapshot(), indent=1))
        self.proxy.stop()
        self.s3.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m integration.chaos.run", description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=20000, help="entries to get resolved, over the 4 producers")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kills-producers", type=int, default=2)
    ap.add_argument("--kills-driver", type=int, default=1, help="reader kills (with --subscriptions: in turn)")
    ap.add_argument("--subscriptions", type=int, default=0, help="N named subscriptions, each its own reader")
    ap.add_argument("--native-readers", type=int, default=-1,
                    help="how many of the N readers are native consumers (default N // 3; the rest Spark)")  # fmt: skip
    ap.add_argument("--out", required=True, help="run directory (replaced)")
    ap.add_argument("--server", choices=("moto", "localstack"), default="moto")
    ap.add_argument(
        "--error-rate",
        type=float,
        default=0.05,
        help="fault rate of non-conditional requests (503 30%%, 500 25%%, reset 25%%, stall 10%%, drop_reply 10%%)",
    )
    ap.add_argument(
        "--cas-error-rate",
        type=float,
        default=0.04,
        help="503/500/reset/stall rate of conditional PUTs (the manifest's CAS writes)",
    )
    ap.add_argument("--drop-reply-rate", type=float, default=0.03, help="drop_reply rate of conditional PUTs")
    ap.add_argument("--drop-reply-every", type=int, default=0, help="also drop the reply of every n-th conditional PUT")
    ap.add_argument("--chunk", type=int, default=100, help="entries per produce() call")
    ap.add_argument(
        "--segment-entries",
        type=int,
        default=(1 << 31) - 1,
        help="K of the producers (Python: manifest_segment_entries; JVM: QueueTool --segment-entries; small: "
        "segmented manifests)",
    )
    ap.add_argument(
        "--produce-seconds",
        type=float,
        default=60.0,
        help="pace the producers to spread the entries over this long (0: as fast as they go)",
    )
    ap.add_argument("--timeout", type=float, default=3.0, help="S3 client socket timeout (s); stalls last 2 s more")
    ap.add_argument("--max-batches", type=int, default=200, help="maxBatchesPerTrigger of the query")
    ap.add_argument("--trigger-ms", type=int, default=500)
    ap.add_argument("--gc-interval", default="1m", help="the query's gcInterval")
    ap.add_argument("--quiet-drain", action="store_true", help="turn faults off once the producers are done")
    ap.add_argument("--max-minutes", type=float, default=30.0)
    ap.add_argument("--report-every", type=float, default=10.0)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return Harness(parse_args(argv)).main()


if __name__ == "__main__":
    sys.exit(main())
