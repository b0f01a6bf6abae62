"""osqueue demo: producers → an embedded local-filesystem queue → a Spark streaming query, with a crash.

Run through `bash integration/demo.sh` (README's main job). Python producers write JSON events
into a queue directory while a PySpark streaming query counts them per source and action. Midway
(once the query has committed a micro-batch, with the producers paused half-way) the query is
killed with SIGKILL and restarted from its checkpoint; at the end the counts Spark
produced are compared with what the producers sent: they must match exactly.
"""

from __future__ import annotations

import argparse
import collections
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

import osqueue

HERE = pathlib.Path(__file__).resolve().parent
ACTIONS = ["view", "click", "purchase", "share"]
SOURCES = ["web", "mobile", "import"]


def say(msg: str) -> None:
    print(msg, flush=True)


class Halfway:
    """Where producers pause, half their events sent, until the crash has happened: however slowly
    Spark starts on this machine, the kill lands while events are still to come."""

    def __init__(self, producers: int) -> None:
        self._cond = threading.Condition()
        self._producers = producers
        self._waiting = 0
        self._open = False

    def wait(self) -> None:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: self._open)

    def all_waiting(self) -> bool:
        with self._cond:
            return self._waiting == self._producers

    def release(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()


def produce(
    queue: str,
    source: str,
    events: int,
    seconds: float,
    sent: collections.Counter,
    lock: threading.Lock,
    halfway: Halfway,
    stop: threading.Event,
) -> None:
    rng = random.Random(source)
    started = time.monotonic()
    with osqueue.Producer(queue, flush_interval=0.2) as producer:
        for i in range(events):
            if i == events // 2:
                halfway.wait()
                started = time.monotonic() - seconds * i / events  # the second half paced from now
            if stop.is_set():
                break
            # A steady trickle over `seconds`, so the query reads while producers still write.
            time.sleep(max(0.0, started + seconds * i / events - time.monotonic()))
            action = rng.choice(ACTIONS)
            producer.produce(
                [json.dumps({"user": rng.randrange(1000), "action": action, "n": i}).encode()], metadata=source.encode()
            )
            with lock:
                sent[f"{source}/{action}"] += 1
    # leaving the `with` block flushes: every event above is durable in the queue


def committed_counts(checkpoint: pathlib.Path, counts_dir: pathlib.Path) -> tuple[int, int]:
    """Micro-batches Spark has committed in its checkpoint, and the events they counted."""
    commits = [f for f in (checkpoint / "commits").glob("*") if f.name.isdigit()]
    counted = 0
    for f in commits:
        result = counts_dir / f"batch-{f.name}.json"
        if result.exists():  # written by foreachBatch before Spark commits the batch
            counted += sum(json.loads(result.read_text()).values())
    return len(commits), counted


def start_query(queue: str, work: pathlib.Path, *extra: str) -> subprocess.Popen:
    with open(work / "spark.log", "a") as log:
        return subprocess.Popen(
            [
                sys.executable,
                str(HERE / "demo_query.py"),
                queue,
                str(work / "checkpoint"),
                str(work / "counts"),
                *extra,
            ],
            stderr=log,
            start_new_session=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="demo-output", help="where the queue, checkpoint and results go")
    ap.add_argument("--events", type=int, default=3000, help="events per producer")
    ap.add_argument("--short", action="store_true", help="a small, quick run (CI)")
    args = ap.parse_args()
    events = 300 if args.short else args.events
    seconds = 20.0 if args.short else 45.0

    work = pathlib.Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    queue = str(work / "queue")
    say(f"osqueue demo: queue directory {queue} (no server: the queue is files with a CAS manifest)")

    sent: collections.Counter = collections.Counter()
    lock = threading.Lock()
    stop = threading.Event()
    halfway = Halfway(len(SOURCES))
    producers = [
        threading.Thread(target=produce, args=(queue, s, events, seconds, sent, lock, halfway, stop)) for s in SOURCES
    ]
    say(
        f"1. starting {len(SOURCES)} Python producers ({events} events each, over {seconds:.0f} s;"
        " they pause half-way until the crash below, so it lands mid-stream)"
    )
    for t in producers:
        t.start()

    say("2. starting the Spark streaming query (format('osqueue'), counts per source and action)")
    query = start_query(queue, work)
    counts_dir = work / "counts"
    deadline = time.time() + 300
    while time.time() < deadline and query.poll() is None:
        if halfway.all_waiting() and committed_counts(work / "checkpoint", counts_dir)[0] >= 1:
            break
        time.sleep(0.2)
    total = events * len(SOURCES)
    with lock:
        so_far = sum(sent.values())
    # The crash must land mid-stream, or the demo would prove nothing: the query is running, has
    # committed a micro-batch (so the restart resumes from a checkpoint), and events are left to count.
    alive = query.poll() is None
    committed, counted_so_far = committed_counts(work / "checkpoint", counts_dir)
    unfinished = sum(t.is_alive() for t in producers)
    say(f"3. simulating a crash: kill -9 the Spark query mid-stream ({so_far} of {total} events sent so far)")
    say(
        f"   at the kill: query {'running' if alive else 'NOT running'}, {committed} micro-batches committed"
        f" ({counted_so_far} of {total} events counted), {unfinished} of {len(SOURCES)} producers not finished"
    )
    if not (alive and committed >= 1 and counted_so_far < total):
        say(
            "   that is not a mid-stream crash (the query must be running, have committed a micro-batch,"
            " and have events left to count): the demo cannot show recovery; see Spark's log: "
            f"{work / 'spark.log'}"
        )
        stop.set()
        halfway.release()
        if alive:
            os.killpg(query.pid, signal.SIGKILL)
        for t in producers:
            t.join()
        return 1
    os.killpg(query.pid, signal.SIGKILL)
    query.wait()
    say("   restarting it from its checkpoint; the producers carry on")
    query = start_query(queue, work)
    halfway.release()
    for t in producers:
        t.join()
    say("4. producers are done; letting the query catch up, then stopping it")
    time.sleep(2)
    os.killpg(query.pid, signal.SIGTERM)
    query.wait()
    say("   draining what is left with Trigger.AvailableNow")
    drain = start_query(queue, work, "--available-now")
    if drain.wait() != 0:
        say("the final drain failed")
        return 1
    # The drain ended with its last micro-batch committed: the source dequeued it when it stopped.
    inspect = subprocess.run(
        [sys.executable, "-m", "osqueue", "inspect", queue, "--json"], capture_output=True, text=True, check=True
    )
    left = len(json.loads(inspect.stdout)["entries"])
    say(f"   queue after the drain (osqueue inspect --json): {left} entries queued")

    counted: collections.Counter = collections.Counter()
    for f in counts_dir.glob("batch-*.json"):
        counted.update(json.loads(f.read_text()))
    say("\nresults (sent by producers vs counted by Spark):")
    for key in sorted(set(sent) | set(counted)):
        mark = "" if sent[key] == counted[key] else "   <-- MISMATCH"
        say(f"  {key:18s} sent {sent[key]:6d}   counted {counted[key]:6d}{mark}")
    total_sent, total_counted = sum(sent.values()), sum(counted.values())
    say(f"  {'total':18s} sent {total_sent:6d}   counted {total_counted:6d}")
    say(f"\nper-batch results: {counts_dir}\nSpark's log: {work / 'spark.log'}")
    if sent == counted and left == 0:
        say("exact: every event counted exactly once, across a kill -9 and a restart")
        return 0
    if left:
        say(f"NOT drained: {left} entries still queued after the AvailableNow drain")
    if sent != counted:
        say("NOT exact: counts differ")
    return 1


if __name__ == "__main__":
    sys.exit(main())
