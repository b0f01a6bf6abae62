"""Many producer processes of both languages in ``commit_mode="cooperative"`` on one local-store queue,
some killed with -9 mid-write and replaced (docs/adr/0007 part 1, docs/reliability.md "Cooperative
commit"). Each process makes one-entry ``produce()`` calls, waiting for each, and prints
``durable<TAB>sequence<TAB>value`` once it returned durable (the JVM's ``QueueTool produce --keep-going
--sync``, Python's child below). The checker then reads the whole queue and requires: no value twice,
no returned-durable value missing, each returned sequence holding its value, each producer's values in
call order, each (writer, batch) once and the writers section's ``last_batch`` exact.

    python -m integration.chaos.coop_chaos --py 8 --jvm 8 --calls 150 --kills 4 --out target/coop-chaos

The JVM children need the core jar (the wheel's, or OSQUEUE_JVM_CORE_JAR from ``bash .ci/sbt core/assembly``).
"""

from __future__ import annotations

import argparse
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
import sys
from osqueue import Producer
root, tag, calls, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
p = Producer(root, flush_interval=0, commit_mode="cooperative", manifest_segment_entries=k)
for i in range(calls):
    r = p.produce([f"{tag}-{i}".encode()]).result(timeout=120)
    print(f"durable\\t{r.sequence}\\t{tag}-{i}", flush=True)
p.close()
print("done", flush=True)
"""


@dataclass
class Child:
    tag: str
    lang: str
    proc: subprocess.Popen
    durable: dict[str, int] = field(default_factory=dict)  # value -> the sequence its produce() returned
    killed: bool = False
    reader: threading.Thread | None = None

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.rstrip("\n").split("\t")
            if parts[0] == "durable":  # JVM: durable seq location value; Python: durable seq value
                self.durable[parts[-1]] = int(parts[1])


def _start(root: pathlib.Path, tag: str, lang: str, calls: int) -> Child:
    if lang == "py":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"), *sys.path])}
        cmd = [sys.executable, "-c", PY_CHILD, str(root), tag, str(calls), str(SEGMENT_ENTRIES)]
    else:
        env = dict(os.environ)
        cmd = jvm_tool.command(
            "produce",
            str(root),
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
        )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    c = Child(tag, lang, proc)
    c.reader = threading.Thread(target=c.read, daemon=True)
    c.reader.start()
    return c


def _queue(root: pathlib.Path) -> tuple[list[tuple[int, str, tuple[bytes, int] | None]], dict]:
    """(sequence, value, writer sequence) of every entry in the queue, and the writers section."""
    from osqueue.format import decode_batch
    from osqueue.format.manifest_head import parse_head
    from osqueue.format.writer_sequence import sequence_of, writers_of
    from osqueue.queue import ManifestStore
    from osqueue.store import LocalFileSystemStore

    store = LocalFileSystemStore(str(root))
    obj = store.get(KEY)
    assert obj is not None, "no manifest"
    out = []
    for e in ManifestStore(store, KEY).decode(obj.data).entries:
        batch = store.get(e.location)
        assert batch is not None, f"entry {e.sequence}: batch {e.location} is missing"
        for v in decode_batch(batch.data, e.location):
            out.append((e.sequence, v.decode(), sequence_of(bytes(e.extension))))
    return out, writers_of(parse_head(obj.data, KEY).sections, KEY)


def run(root: pathlib.Path, py: int, jvm: int, calls: int, kills: int, seed: int = 1, deadline_s: float = 600) -> dict:
    """Runs the producers (killing ``kills`` of them with -9 mid-write, each replaced by a fresh one under a
    new tag) and checks the queue. Returns the report; raises AssertionError on any violation."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    children = [_start(root, f"py{i}", "py", calls) for i in range(py)]
    children += [_start(root, f"jvm{i}", "jvm", calls) for i in range(jvm)]
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
                if len(c.durable) >= at or c.proc.poll() is not None:
                    if c.proc.poll() is None:
                        os.kill(c.proc.pid, signal.SIGKILL)
                        c.killed = True
                    del pending[v]
                    replacements.append(_start(root, f"{c.tag}r", c.lang, calls // 2))
            time.sleep(0.02)
        for c in children + replacements:
            c.proc.wait(timeout=max(1.0, deadline_s - (time.monotonic() - started)))
            assert c.reader is not None
            c.reader.join(timeout=30)
            if not c.killed:
                err = c.proc.stderr.read() if c.proc.stderr else ""
                assert c.proc.returncode == 0, f"{c.tag} exited {c.proc.returncode}: {err[-2000:]}"
                assert len(c.durable) == (calls if not c.tag.endswith("r") else calls // 2), (c.tag, len(c.durable))
    finally:
        for c in children + replacements:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
    produced_s = time.monotonic() - started

    entries, writers = _queue(root)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--py", type=int, default=8, help="Python producer processes")
    ap.add_argument("--jvm", type=int, default=8, help="JVM producer processes")
    ap.add_argument("--calls", type=int, default=150, help="one-entry produce() calls per process")
    ap.add_argument("--kills", type=int, default=4, help="processes killed with -9 mid-write (each replaced)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True, help="run directory (replaced): the queue and report.json")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    report = run(out / "queue", a.py, a.jvm, a.calls, a.kills, a.seed)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
