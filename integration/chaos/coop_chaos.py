"""Many producer processes of both languages in ``commit_mode="cooperative"`` on one local-store queue,
some killed with -9 mid-write and replaced (docs/adr/0007 part 1, docs/reliability.md "Cooperative
commit"). Each process makes one-entry ``produce()`` calls, waiting for each, and prints
``durable<TAB>sequence<TAB>value`` once it returned durable (the JVM's ``QueueTool produce --keep-going
--sync``, Python's child below). The checker then reads the whole queue and requires: no value twice,
no returned-durable value missing, each returned sequence holding its value, each producer's values in
call order, each (writer, batch) once and the writers section's ``last_batch`` exact.

    python -m integration.chaos.coop_chaos --py 8 --jvm 8 --calls 150 --kills 4 --out target/coop-chaos

With ``--store s3`` the queue is on a moto S3 server (tests/s3, its state in the run directory) and the
producers reach it through the fault proxy (tests/faults/fault_proxy.py) with ``--faults`` injected into
every request and ``--conditional-faults`` into the manifest's conditional PUTs (e.g. ``drop_reply=0.05``:
applied, reply lost). A call that fails under the faults is printed ``failed`` and may or may not be in
the queue (an unknown outcome), but at most once and in its producer's order; the checker reads the queue
from moto directly, not through the proxy:

    python -m integration.chaos.coop_chaos --py 8 --jvm 8 --calls 100 --kills 4 --store s3 \
        --faults 503=0.02,reset=0.01,delay=0.02 --conditional-faults drop_reply=0.05,503=0.02,reset=0.02 \
        --out target/coop-chaos-s3

The JVM children need the core jar (the wheel's, or OSQUEUE_JVM_CORE_JAR from ``bash .ci/sbt core/assembly``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from .. import jvm_tool

KEY = "ingest/manifest"
REPO = pathlib.Path(__file__).resolve().parents[2]
SEGMENT_ENTRIES = 64

PY_CHILD = """
import json, sys
from osqueue import Producer, OsqueueError
root, tag, calls, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
opts = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
p = Producer(root, flush_interval=0, commit_mode="cooperative", manifest_segment_entries=k, store_options=opts)
for i in range(calls):
    try:
        r = p.produce([f"{tag}-{i}".encode()]).result(timeout=300)
    except OsqueueError as e:  # an unknown outcome under injected faults: may or may not be in
        print(f"failed\\t{type(e).__name__}\\t{tag}-{i}", flush=True)
        continue
    print(f"durable\\t{r.sequence}\\t{tag}-{i}", flush=True)
try:
    p.close()
except OsqueueError as e:
    print(f"close failed: {e}", file=sys.stderr, flush=True)
print("done", flush=True)
"""


@dataclass(frozen=True)
class StoreSpec:
    """Where the queue is: ``uri`` with ``options`` for the producers (through the fault proxy) and
    ``read_options`` for the checker (the server itself)."""

    uri: str
    options: dict[str, str] | None = None
    read_options: dict[str, str] | None = None


@dataclass
class Child:
    tag: str
    lang: str
    proc: subprocess.Popen
    durable: dict[str, int] = field(default_factory=dict)  # value -> the sequence its produce() returned
    failed: dict[str, str] = field(default_factory=dict)  # value -> the error its produce() raised
    killed: bool = False
    reader: threading.Thread | None = None

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.rstrip("\n").split("\t")
            if parts[0] == "durable":  # JVM: durable seq location value; Python: durable seq value
                self.durable[parts[-1]] = int(parts[1])
            elif parts[0] == "failed":  # both: failed ErrorClass value
                self.failed[parts[-1]] = parts[1]

    def calls_done(self) -> int:
        return len(self.durable) + len(self.failed)


def _start(store: StoreSpec, tag: str, lang: str, calls: int) -> Child:
    if lang == "py":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"), *sys.path])}
        cmd = [sys.executable, "-c", PY_CHILD, store.uri, tag, str(calls), str(SEGMENT_ENTRIES)]
        if store.options:
            cmd.append(json.dumps(store.options))
    else:
        env = dict(os.environ)
        cmd = jvm_tool.command(
            "produce",
            store.uri,
            tag,
            str(calls),
            "--sync",
            "true",
            "--keep-going",
            "true",
            "--flush-ms",
            "0",
            "--commit-mode",
            "cooperative",
            "--segment-entries",
            str(SEGMENT_ENTRIES),
            store_options=store.options,
        )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    c = Child(tag, lang, proc)
    c.reader = threading.Thread(target=c.read, daemon=True)
    c.reader.start()
    return c


def _queue(spec: StoreSpec) -> tuple[list[tuple[int, str, tuple[bytes, int] | None]], dict]:
    """(sequence, value, writer sequence) of every entry in the queue, and the writers section."""
    from osqueue.format import decode_batch
    from osqueue.format.manifest_head import parse_head
    from osqueue.format.writer_sequence import sequence_of, writers_of
    from osqueue.queue import ManifestStore
    from osqueue.store import open_store

    store = open_store(spec.uri, spec.read_options)
    obj = store.get(KEY)
    assert obj is not None, "no manifest"
    out = []
    for e in ManifestStore(store, KEY).decode(obj.data).entries:
        batch = store.get(e.location)
        assert batch is not None, f"entry {e.sequence}: batch {e.location} is missing"
        for v in decode_batch(batch.data, e.location):
            out.append((e.sequence, v.decode(), sequence_of(bytes(e.extension))))
    return out, writers_of(parse_head(obj.data, KEY).sections, KEY)


def run(
    root: pathlib.Path | StoreSpec,
    py: int,
    jvm: int,
    calls: int,
    kills: int,
    seed: int = 1,
    deadline_s: float = 600,
    *,
    faults: bool = False,
) -> dict:
    """Runs the producers (killing ``kills`` of them with -9 mid-write, each replaced by a fresh one under a
    new tag) and checks the queue. ``root``: a local directory, or a :class:`StoreSpec`. ``faults``: calls may
    fail (their values then may or may not be in, once at most). Returns the report; raises AssertionError
    on any violation."""
    rng = random.Random(seed)
    if isinstance(root, StoreSpec):
        spec = root
    else:
        root.mkdir(parents=True, exist_ok=True)
        spec = StoreSpec(str(root))
    started = time.monotonic()
    children = [_start(spec, f"py{i}", "py", calls) for i in range(py)]
    children += [_start(spec, f"jvm{i}", "jvm", calls) for i in range(jvm)]
    victims = rng.sample(range(len(children)), min(kills, len(children)))
    kill_at = {v: rng.randint(max(1, calls // 5), max(1, calls // 2)) for v in victims}
    pending = dict(kill_at)
    replacements: list[Child] = []
    try:
        while pending:
            if time.monotonic() - started > deadline_s:
                raise AssertionError(f"timed out waiting to kill {sorted(pending)}")
            for v, at in list(pending.items()):
                c = children[v]
                if c.calls_done() >= at or c.proc.poll() is not None:
                    if c.proc.poll() is None:
                        os.kill(c.proc.pid, signal.SIGKILL)
                        c.killed = True
                    del pending[v]
                    replacements.append(_start(spec, f"{c.tag}r", c.lang, calls // 2))
            time.sleep(0.02)
        for c in children + replacements:
            c.proc.wait(timeout=max(1.0, deadline_s - (time.monotonic() - started)))
            assert c.reader is not None
            c.reader.join(timeout=30)
            if not c.killed:
                err = c.proc.stderr.read() if c.proc.stderr else ""
                ok = (0, 3) if faults else (0,)  # QueueTool --keep-going exits 3 when a call failed
                assert c.proc.returncode in ok, f"{c.tag} exited {c.proc.returncode}: {err[-2000:]}"
                assert c.calls_done() == (calls if not c.tag.endswith("r") else calls // 2), (c.tag, c.calls_done())
                assert faults or not c.failed, (c.tag, c.failed)
    finally:
        for c in children + replacements:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
    produced_s = time.monotonic() - started

    entries, writers = _queue(spec)
    values = [v for _, v, _ in entries]
    dup = len(values) - len(set(values))
    at = {v: s for s, v, _ in entries}
    missing = [v for c in children + replacements for v in c.durable if v not in at]
    wrong_seq = [v for c in children + replacements for v, s in c.durable.items() if v in at and at[v] != s]
    out_of_order = []
    for c in children + replacements:
        mine = [int(v.rsplit("-", 1)[1]) for v in values if v.rsplit("-", 1)[0] == c.tag]
        if mine != sorted(mine):
            out_of_order.append(c.tag)
    seqs = [w for _, _, w in entries]
    by_writer: dict[bytes, list[int]] = {}
    for w in seqs:
        assert w is not None, "an entry without a writer sequence"
        by_writer.setdefault(w[0], []).append(w[1])
    report = {
        "processes": len(children) + len(replacements),
        "python": sum(c.lang == "py" for c in children + replacements),
        "jvm": sum(c.lang == "jvm" for c in children + replacements),
        "killed": sum(c.killed for c in children),
        "returned_durable": sum(len(c.durable) for c in children + replacements),
        "failed_calls": sum(len(c.failed) for c in children + replacements),
        "failed_but_in": sum(v in at for c in children + replacements for v in c.failed),
        "failures": dict(
            collections.Counter(e for c in children + replacements for e in c.failed.values()).most_common()
        ),
        "entries": len(values),
        "duplicates": dup,
        "missing": len(missing),
        "wrong_sequence": len(wrong_seq),
        "out_of_order": out_of_order,
        "writers": len(by_writer),
        "writer_batches_twice": len(seqs) - len(set(seqs)),
        "writers_in_order": all(ns == sorted(ns) and len(set(ns)) == len(ns) for ns in by_writer.values()),
        "last_batch_exact": {w: r.last_batch for w, r in writers.items()}
        == {w: max(ns) for w, ns in by_writer.items()},
        "produce_s": round(produced_s, 1),
    }
    assert dup == 0 and not missing and not wrong_seq and not out_of_order, report
    assert report["writer_batches_twice"] == 0 and report["writers_in_order"] and report["last_batch_exact"], report
    return report


def _rates(text: str) -> dict[str, float]:
    """``503=0.02,reset=0.01`` -> {"503": 0.02, "reset": 0.01}."""
    out = {}
    for part in filter(None, text.split(",")):
        kind, _, rate = part.partition("=")
        out[kind.strip()] = float(rate)
    return out


@contextlib.contextmanager
def s3_behind_faults(
    state_dir: pathlib.Path,
    seed: int,
    faults: dict,
    conditional: dict,
    delay_s: float,
    drop_reply_every: int | None = None,
):
    """A moto server (state in ``state_dir``) and a fresh bucket, behind the fault proxy: yields the
    :class:`StoreSpec` and the proxy (its ``counts`` say what was injected)."""
    for p in (REPO / "tests" / "s3", REPO / "tests" / "faults"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    from fault_proxy import FaultProxy
    from fixtures import new_bucket, run_s3_server

    state_dir.parent.mkdir(parents=True, exist_ok=True)  # s3server.py creates (and removes) state_dir
    with run_s3_server("moto", state_dir=state_dir) as s3:
        bucket = new_bucket(s3)
        with FaultProxy(
            s3.endpoint,
            seed=seed,
            rates=faults,
            conditional_rates=conditional or None,
            delay_seconds=delay_s,
            drop_reply_every=drop_reply_every,
        ) as proxy:

            def options(endpoint: str) -> dict[str, str]:
                return {
                    "fs.s3a.endpoint": endpoint,
                    "fs.s3a.access.key": s3.access_key,
                    "fs.s3a.secret.key": s3.secret_key,
                    "fs.s3a.path.style.access": "true",
                    "fs.s3a.endpoint.region": s3.region,
                    "fs.s3a.connection.establish.timeout": "2s",
                    "fs.s3a.connection.timeout": "5s",
                }

            yield StoreSpec(f"s3a://{bucket}/chaos", options(proxy.endpoint), options(s3.endpoint)), proxy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--py", type=int, default=8, help="Python producer processes")
    ap.add_argument("--jvm", type=int, default=8, help="JVM producer processes")
    ap.add_argument("--calls", type=int, default=150, help="one-entry produce() calls per process")
    ap.add_argument("--kills", type=int, default=4, help="processes killed with -9 mid-write (each replaced)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--store", choices=("local", "s3"), default="local", help="local files, or moto S3 behind the proxy"
    )
    ap.add_argument("--faults", default="", help="s3: fault rates for every request, e.g. 503=0.02,reset=0.01")
    ap.add_argument(
        "--conditional-faults", default="", help="s3: fault rates for conditional PUTs instead, e.g. drop_reply=0.05"
    )
    ap.add_argument("--delay-s", type=float, default=0.2, help="s3: how long a 'delay' fault holds a request")
    ap.add_argument("--deadline-s", type=float, default=1200)
    ap.add_argument("--out", required=True, help="run directory (replaced): the queue and report.json")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    if a.store == "local":
        report = run(out / "queue", a.py, a.jvm, a.calls, a.kills, a.seed, a.deadline_s)
    else:
        faults, conditional = _rates(a.faults), _rates(a.conditional_faults)
        with s3_behind_faults((out / "s3-state").resolve(), a.seed, faults, conditional, a.delay_s) as (spec, proxy):
            try:
                report = run(spec, a.py, a.jvm, a.calls, a.kills, a.seed, a.deadline_s, faults=True)
            finally:
                counts = {k: v for k, v in sorted(proxy.counts.items())}
                (out / "proxy.json").write_text(json.dumps(counts, indent=1))
        report["store"] = "moto behind the fault proxy"
        report["faults"] = {"every_request": faults, "conditional_puts": conditional}
        report["injected"] = counts
    report["load"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
