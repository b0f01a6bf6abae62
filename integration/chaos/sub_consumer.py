"""A native reader of one named subscription in the chaos run (``--subscriptions N``): an
``osqueue.Consumer(store=..., subscription=NAME)`` through the fault proxy, in its own process group,
killed with SIGKILL and restarted like the Spark drivers.

    python -m integration.chaos.sub_consumer --endpoint URL --bucket B --prefix P \\
        --subscription NAME --out DIR --stop-file FILE

Each delivered batch goes to ``OUT/batch-<sequence>.jsonl`` (``[sequence, index, value, location]``
per line, the Spark driver's format), written to a temp file and renamed BEFORE its ack, so a batch
redelivered after a kill (delivered, not yet acknowledged) rewrites the same file. Prints one
``batch <sequence>: <n> rows, sequences <s>..<s>`` line per delivery (the harness reads it). Once
``--stop-file`` holds a sequence S and the consumer acknowledged S, it closes (its coalesced acks
are written) and exits 0. A store error ends the process with status 3 (the harness restarts it).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

from integration.chaos.py_producer import add_queue_args, s3_client


def acked_before(store, name: str) -> int:  # type: ignore[no-untyped-def]
    """The subscription's recorded position (its next unacknowledged sequence) in the head."""
    from osqueue.format import parse_head

    obj = store.get("ingest/manifest")
    head = parse_head(obj.data, "ingest/manifest")
    return next(s.next for s in head.sections.subscriptions if s.name == name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    add_queue_args(ap)
    ap.add_argument("--subscription", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--ack-interval", type=float, default=0.2)
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stop = pathlib.Path(args.stop_file)

    from osqueue import Consumer
    from osqueue.store import S3Store

    store = S3Store(
        args.bucket,
        args.prefix,
        client=s3_client(args.endpoint, args.region, args.access_key, args.secret_key, args.timeout),
    )
    until: int | None = None
    try:
        with Consumer(store=store, subscription=args.subscription, run_gc=False, ack_interval=args.ack_interval) as c:
            print(f"{time.time():.3f} started subscription {args.subscription}", flush=True)
            while True:
                b = c.next_batch()
                if b is None:
                    if until is None and stop.exists() and stop.read_text().strip():
                        until = int(stop.read_text())
                    if until is not None and (c.last_acked_sequence or -1) >= until:
                        break
                    if (
                        until is not None
                        and c.last_acked_sequence is None
                        and acked_before(store, args.subscription) > until
                    ):
                        break  # a restart after everything was acknowledged: nothing left to deliver
                    time.sleep(0.05)
                    continue
                tmp = out / f".batch-{b.sequence}.tmp"
                with open(tmp, "w", encoding="utf-8") as f:
                    for i, e in enumerate(b.entries):
                        f.write(json.dumps([b.sequence, i, e.decode(), b.location]) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, out / f"batch-{b.sequence}.jsonl")
                c.ack(b.sequence)
                s = b.sequence
                print(f"{time.time():.3f} batch {s}: {len(b.entries)} rows, sequences {s}..{s}", flush=True)
    except Exception as e:  # noqa: BLE001 - the harness reads this line and restarts us
        print(f"{time.time():.3f} query failed: {type(e).__name__}: {str(e)[:2000]}", flush=True)
        return 3
    print(f"{time.time():.3f} stopped after sequence {until}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
