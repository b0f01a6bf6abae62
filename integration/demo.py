"""osqueue demo: producers → an embedded local-filesystem queue → a Spark streaming query, with a crash.

Run through `bash integration/demo.sh` (README's main job). Python producers write JSON events
into a queue directory while a PySpark streaming query counts them per source and action. Midway
the query is killed with SIGKILL and restarted from its checkpoint; at the end the counts Spark
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


def produce(queue: str, source: str, events: int, seconds: float, sent: collections.Counter,
            lock: threading.Lock) -> None:
    rng = random.Random(source)
    started = time.monotonic()
    with osqueue.Producer(queue, flush_interval=0.2) as producer:
        for i in range(events):
            # A steady trickle over `seconds`, so the crash below lands while producers still write.
            time.sleep(max(0.0, started + seconds * i / events - time.monotonic()))
            action = rng.choice(ACTIONS)
            producer.produce([json.dumps({"user": rng.randrange(1000), "action": action, "n": i}).encode()],
                             metadata=source.encode())
            with lock:
                sent[f"{source}/{action}"] += 1
    # leaving the `with` block flushes: every event above is durable in the queue


def start_query(queue: str, work: pathlib.Path, *extra: str) -> subprocess.Popen:
    with open(work / "spark.log", "a") as log:
        return subprocess.Popen(
            [sys.executable, str(HERE / "demo_query.py"), queue, str(work / "checkpoint"), str(work / "counts"), *extra],
            stderr=log, start_new_session=True)


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
    producers = [threading.Thread(target=produce, args=(queue, s, events, seconds, sent, lock)) for s in SOURCES]
    say(f"1. starting {len(SOURCES)} Python producers ({events} events each, over {seconds:.0f} s)")
    for t in producers:
        t.start()

    say("2. starting the Spark streaming query (format('osqueue'), counts per source and action)")
    query = start_query(queue, work)
    counts_dir = work / "counts"
    deadline = time.time() + 300
    while len(list(counts_dir.glob("batch-*.json"))) < 3 and time.time() < deadline and query.poll() is None:
        time.sleep(0.1)
    with lock:
        so_far = sum(sent.values())
    say(f"3. simulating a crash: kill -9 the Spark query mid-stream ({so_far} of {events * len(SOURCES)} events sent so far)")
    os.killpg(query.pid, signal.SIGKILL)
    query.wait()
    say("   restarting it from its checkpoint")
    query = start_query(queue, work)
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
    if sent == counted:
        say("exact: every event counted exactly once, across a kill -9 and a restart")
        return 0
    say("NOT exact: counts differ")
    return 1


if __name__ == "__main__":
    sys.exit(main())
