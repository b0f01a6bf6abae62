"""One Python producer incarnation of the chaos run (its own OS process, killed with SIGKILL).

    python -m integration.chaos.py_producer --endpoint URL --bucket B --prefix P --name py0
        --incarnation 3 --count N --chunk C --log FILE [--rate R] [--window W]

Produces ``<name>-<incarnation>-<n>`` for n in [0, count) in ``produce()`` calls of ``chunk``
entries, and appends to ``--log`` (line-buffered, so a SIGKILL loses at most the line being
written):

    attempt <TAB> tag <TAB> n0 <TAB> k                       before produce(values n0..n0+k-1)
    acked   <TAB> tag <TAB> n0 <TAB> k <TAB> seq <TAB> location <TAB> start_index
    failed  <TAB> tag <TAB> n0 <TAB> k <TAB> ErrorClass      the handle failed: outcome unknown
    done    <TAB> tag                                        every handle resolved, producer closed

where tag = ``<name>-<incarnation>``. An attempted call with neither line is unknown as well.
The S3 client is built here (short timeouts, few retries) and handed to ``S3Store(client=...)``:
the Python store has no timeout options of its own.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time


def s3_client(endpoint: str, region: str, access_key: str, secret_key: str, timeout: float):
    import boto3
    from botocore.config import Config

    cfg = Config(
        s3={"addressing_style": "path"},
        request_checksum_calculation="when_required",
        retries={"mode": "standard", "max_attempts": 3},
        connect_timeout=timeout,
        read_timeout=timeout,
        max_pool_connections=20,
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        config=cfg,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
    )


def add_queue_args(ap: argparse.ArgumentParser) -> None:
    """Where the chaos queue is: the S3 endpoint, its dummy credentials, bucket and prefix."""
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--access-key", default="test")
    ap.add_argument("--secret-key", default="test")
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", required=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    add_queue_args(ap)
    ap.add_argument("--name", required=True)
    ap.add_argument("--incarnation", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--rate", type=float, default=0.0, help="entries per second (0: as fast as it goes)")
    ap.add_argument("--window", type=int, default=4, help="produce() calls in flight")
    ap.add_argument("--flush-interval", type=float, default=0.05)
    ap.add_argument("--timeout", type=float, default=3.0, help="boto3 connect/read timeout (s)")
    ap.add_argument("--log", required=True)
    ap.add_argument("--segment-entries", type=int, default=(1 << 31) - 1, help="manifest_segment_entries (K)")
    args = ap.parse_args(argv)

    from osqueue import OsqueueError, Producer
    from osqueue.store import S3Store

    tag = f"{args.name}-{args.incarnation}"
    log = open(args.log, "a", buffering=1, encoding="utf-8")  # line-buffered: one write per line
    store = S3Store(
        args.bucket,
        args.prefix,
        client=s3_client(args.endpoint, args.region, args.access_key, args.secret_key, args.timeout),
    )
    producer = Producer(store=store, flush_interval=args.flush_interval, manifest_segment_entries=args.segment_entries)
    pending: collections.deque = collections.deque()

    def resolve(limit: int) -> None:
        """Logs the resolved handles in call order; waits while more than ``limit`` are pending."""
        while pending and (pending[0][2].done() or len(pending) > limit):
            n0, k, h = pending.popleft()
            try:
                d = h.wait_durable(timeout=600)
                log.write(f"acked\t{tag}\t{n0}\t{k}\t{d.sequence}\t{d.location}\t{d.start_index}\n")
            except OsqueueError as e:
                log.write(f"failed\t{tag}\t{n0}\t{k}\t{type(e).__name__}\n")

    t0 = time.monotonic()
    for n0 in range(0, args.count, args.chunk):
        k = min(args.chunk, args.count - n0)
        if args.rate > 0:
            ahead = n0 / args.rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        values = [f"{tag}-{n}".encode() for n in range(n0, n0 + k)]
        log.write(f"attempt\t{tag}\t{n0}\t{k}\n")
        pending.append((n0, k, producer.produce(values, metadata=args.name.encode())))
        resolve(args.window - 1)
    resolve(0)
    try:
        producer.close(timeout=600)
    except OsqueueError as e:
        print(f"close: {type(e).__name__}: {e}", file=sys.stderr)
    log.write(f"done\t{tag}\n")
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
