"""A native Python consumer of one named subscription, run as its own process (the kill -9 test of
test_subscriptions_kill.py): `python subscription_consumer_job.py QUEUE SUBSCRIPTION OUT [--until S]`.

Each delivered batch goes to OUT/seq-<sequence>.json, written atomically (temp + rename) before its
ack, so a batch redelivered after a kill -9 (delivered, not yet acknowledged) overwrites the same
file: the output is idempotent per sequence, as a sink must be for exactly-once. Every delivery is
also appended to OUT/deliveries-<pid>.log (one sequence a line), so the test can check the order.
Acks are coalesced (`ack_interval`). With `--until S` it exits (closing: the acks are written) once
it has acknowledged sequence S; `--until-file F` does the same with the S written into F later
(F read while idle); otherwise it polls forever.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

from osqueue import Consumer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("queue")
    ap.add_argument("subscription")
    ap.add_argument("out")
    ap.add_argument("--until", type=int)
    ap.add_argument("--until-file", help="a file that will hold --until's sequence")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = (out / f"deliveries-{os.getpid()}.log").open("a")
    with Consumer(args.queue, subscription=args.subscription, run_gc=False, ack_interval=0.2) as c:
        while True:
            b = c.next_batch()
            if b is None:
                if args.until is None and args.until_file and os.path.exists(args.until_file):
                    text = pathlib.Path(args.until_file).read_text().strip()
                    args.until = int(text) if text else None
                if args.until is not None and (c.last_acked_sequence or -1) >= args.until:
                    break
                time.sleep(0.05)
                continue
            rows = [e.decode() for e in b.entries]
            tmp = out / f".seq-{b.sequence}.tmp"
            tmp.write_text(json.dumps(rows))
            os.replace(tmp, out / f"seq-{b.sequence}.json")
            log.write(f"{b.sequence}\n")
            log.flush()
            c.ack(b.sequence)
            print(f"sequence {b.sequence}: {len(rows)} rows", flush=True)
    log.close()


if __name__ == "__main__":
    main()
