"""The zombie consumer of the chaos run: a native ``osqueue.Consumer`` that initializes the queue
BEFORE the Spark query's first start (so the query's start fences it), then keeps trying to
read, ack and dequeue every ``--interval`` seconds until killed.

    python -m integration.chaos.zombie --endpoint URL --bucket B --prefix P --log FILE

Log lines (line-buffered):

    init    <TAB> epoch                       the consumer owns the queue with this epoch
    go      <TAB> manifest_epoch              the manifest's epoch moved past ours: attempts start
    attempt <TAB> n <TAB> kind <TAB> outcome <TAB> detail

``outcome`` is ``fenced`` (FencedError: the expected one), ``landed`` (the call returned: a read
or a dequeue went through although a newer consumer owns the queue) or ``error`` (anything else).
Kinds, in turn: ``next_batch``, ``ack_through`` and ``flush`` go through the public API (after the
first FencedError the Consumer remembers it and raises without a request); ``read`` and
``dequeue_through`` go to the Consumer's manifest layer, which re-reads the manifest and checks
the epoch on every call, so each of these attempts reaches the store.
"""

from __future__ import annotations

import argparse
import sys
import time

from integration.chaos.py_producer import add_queue_args, s3_client

KINDS = ("next_batch", "read", "ack_through", "dequeue_through", "flush")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    add_queue_args(ap)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--log", required=True)
    args = ap.parse_args(argv)

    from osqueue import Consumer, FencedError
    from osqueue.format import parse_head
    from osqueue.store import S3Store

    log = open(args.log, "a", buffering=1, encoding="utf-8")
    client = s3_client(args.endpoint, args.region, args.access_key, args.secret_key, 10.0)
    store = S3Store(args.bucket, args.prefix, client=client)
    consumer = Consumer(store=store)
    own = consumer.epoch
    log.write(f"init\t{own}\n")

    def manifest_footer():
        obj = store.get("ingest/manifest")
        return None if obj is None else parse_head(obj.data, "ingest/manifest")

    # Wait for the Spark query to fence us (its start bumps the epoch). Never act before that:
    # until then we really are the queue's consumer, and a dequeue would remove entries.
    while True:
        f = manifest_footer()
        if f is not None and f.epoch != own:
            log.write(f"go\t{f.epoch}\n")
            break
        time.sleep(args.interval)

    queue = getattr(consumer, "_queue", None)  # the manifest layer (osqueue.QueueConsumer)
    n = 0
    while True:
        kind = KINDS[n % len(KINDS)]
        if queue is None and kind in ("read", "dequeue_through"):
            kind = "next_batch"
        detail = ""
        try:
            if kind == "next_batch":
                b = consumer.next_batch()
                detail = "none" if b is None else f"got sequence {b.sequence}"
                if b is not None:
                    consumer.ack(b.sequence)
            elif kind == "read":
                m = queue.read()
                detail = f"read {len(m.entries)} entries"
            elif kind in ("ack_through", "dequeue_through"):
                f = manifest_footer()
                target = f.next_sequence - 1 if f is not None else 0
                if kind == "ack_through":
                    consumer.ack_through(target)
                else:
                    queue.dequeue_through(target)
                detail = f"through {target}"
            else:
                consumer.flush()
            outcome = "landed"
        except FencedError as e:
            outcome, detail = (
                "fenced",
                f"own {e.own_epoch} current {e.current_epoch}" if hasattr(e, "own_epoch") else str(e),
            )
        except Exception as e:  # noqa: BLE001 - logged and counted
            outcome, detail = "error", f"{type(e).__name__}: {str(e)[:200]}"
        log.write(f"attempt\t{n}\t{kind}\t{outcome}\t{detail}\n")
        n += 1
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
