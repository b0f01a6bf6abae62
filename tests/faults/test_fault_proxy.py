"""Producers writing through a fault-injecting proxy in front of a real S3 server (issue 6):
4 Python producer threads; the same with a consumer dequeuing concurrently; 2 JVM QueueTool
processes. Figures and the fault mix: docs/reliability.md.

Invariants checked after each run, on the manifest read directly from the server:
- sequences are contiguous (the decoder checks it) and no batch location appears twice;
- no entry value appears twice (no duplicate delivery of any produce() call);
- every entry a producer reported durable is present, at the sequence/location it was told;
- every entry present was produced by some call (nothing invented), and the calls present but not
  reported durable are all calls whose handle FAILED (an ``AmbiguousCommitError`` handle means
  "unknown": its entries may or may not be in the queue; other failures too, because a failed
  flush may have landed before the failure was seen). A handle never stays pending.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "tests" / "s3", pathlib.Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from fault_proxy import KINDS, FaultProxy  # noqa: E402
from fixtures import new_bucket, run_s3_server  # noqa: E402

from osqueue import errors  # noqa: E402
from osqueue.format import decode_batch, decode_manifest  # noqa: E402

# Figures of the last runs, printed at the end of each test (pytest -s shows them).
RESULTS: dict[str, Any] = {}


@pytest.fixture(scope="module")
def s3():
    with run_s3_server("moto") as server:
        yield server


def _client(endpoint: str, server, **cfg: Any):
    import boto3
    from botocore.config import Config

    base = dict(
        s3={"addressing_style": "path"},
        request_checksum_calculation="when_required",
        retries={"mode": "standard", "max_attempts": 3},
        connect_timeout=1,
        read_timeout=1,
    )
    base.update(cfg)
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=server.region,
        config=Config(**base),
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
    )


def _queue_contents(server, bucket: str, prefix: str) -> tuple[Any, dict[int, tuple[str, list[bytes]]]]:
    """The manifest (read without the proxy) and, per sequence, (location, records)."""
    c = _client(server.endpoint, server, read_timeout=30)
    raw = c.get_object(Bucket=bucket, Key=f"{prefix}/ingest/manifest")["Body"].read()
    m = decode_manifest(raw, "manifest")
    out = {}
    for e in m.entries:
        data = c.get_object(Bucket=bucket, Key=f"{prefix}/{e.location}")["Body"].read()
        out[e.sequence] = (e.location, decode_batch(data, e.location))
    return m, out


def _check_invariants(
    m, contents, durable: dict[bytes, tuple[int, str]], failed: dict[bytes, str], produced: set[bytes]
) -> dict[str, int]:
    seqs = [e.sequence for e in m.entries]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True
    locations = [e.location for e in m.entries]
    assert len(set(locations)) == len(locations), "a batch location appears twice"
    seen: collections.Counter[bytes] = collections.Counter()
    where: dict[bytes, tuple[int, str]] = {}
    for seq, (loc, records) in contents.items():
        for r in records:
            seen[r] += 1
            where[r] = (seq, loc)
    dups = {r: n for r, n in seen.items() if n > 1}
    assert not dups, f"duplicated entries: {sorted(dups)[:10]}"
    assert set(seen) <= produced, f"entries nobody produced: {sorted(set(seen) - produced)[:10]}"
    missing = [v for v in durable if v not in seen]
    assert not missing, f"entries reported durable are missing: {missing[:10]}"
    moved = [v for v, at in durable.items() if where[v] != at]
    assert not moved, f"entries not where the producer was told: {moved[:10]}"
    unexplained = [v for v in seen if v not in durable and v not in failed]
    assert not unexplained, f"entries present that no handle reported: {unexplained[:10]}"
    failed_present = sum(1 for v in failed if v in seen)
    return {
        "acked": len(durable),
        "failed_handles": len(failed),
        "failed_but_present": failed_present,
        "failed_absent": len(failed) - failed_present,
        "lost": len(missing),
        "duplicated": len(dups),
    }


def test_proxy_forwards_and_counts_each_fault_kind(s3) -> None:
    bucket = new_bucket(s3)
    with FaultProxy(s3.endpoint, seed=1) as proxy:
        c = _client(proxy.endpoint, s3, retries={"mode": "standard", "total_max_attempts": 1}, read_timeout=1)
        # forwarding: PUT, conditional PUT, GET, HEAD, LIST, DELETE
        c.put_object(Bucket=bucket, Key="a", Body=b"hello")
        etag = c.put_object(Bucket=bucket, Key="b", Body=b"v1", IfNoneMatch="*")["ETag"]
        c.put_object(Bucket=bucket, Key="b", Body=b"v2", IfMatch=etag)
        assert c.get_object(Bucket=bucket, Key="b")["Body"].read() == b"v2"
        assert c.head_object(Bucket=bucket, Key="a")["ContentLength"] == 5
        assert sorted(o["Key"] for o in c.list_objects_v2(Bucket=bucket)["Contents"]) == ["a", "b"]
        from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

        with pytest.raises(ClientError) as e412:
            c.put_object(Bucket=bucket, Key="b", Body=b"x", IfNoneMatch="*")
        assert e412.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        assert proxy.injected() == {k: 0 for k in KINDS}

        # each kind, forced with rate 1 (conditional PUTs only for drop_reply)
        for kind, status in (("503", 503), ("500", 500)):
            proxy.rates = {kind: 1.0}
            with pytest.raises(ClientError) as e:
                c.get_object(Bucket=bucket, Key="a")
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
        proxy.rates = {"reset": 1.0}
        with pytest.raises((ConnectionClosedError, EndpointConnectionError, ConnectionError, OSError)):
            c.get_object(Bucket=bucket, Key="a")
        proxy.rates, proxy.stall_seconds = {"stall": 1.0}, 1.5
        t0 = time.monotonic()
        with pytest.raises((ReadTimeoutError, ConnectionClosedError, OSError)):
            c.get_object(Bucket=bucket, Key="a")
        assert time.monotonic() - t0 < 5
        # delay: forwarded, the reply late but within the client's timeout
        proxy.rates, proxy.delay_seconds = {"delay": 1.0}, 0.3
        t0 = time.monotonic()
        assert c.get_object(Bucket=bucket, Key="a")["Body"].read() == b"hello"
        assert time.monotonic() - t0 >= 0.3
        # drop_reply on a conditional PUT: the write is applied, the client sees a reset.
        proxy.rates, proxy.conditional_rates = {}, {"drop_reply": 1.0}
        c.get_object(Bucket=bucket, Key="a")  # not conditional: forwarded normally
        with pytest.raises((ConnectionClosedError, OSError)):
            c.put_object(Bucket=bucket, Key="c", Body=b"landed", IfNoneMatch="*")
        proxy.conditional_rates = None
        assert c.get_object(Bucket=bucket, Key="c")["Body"].read() == b"landed"
        assert proxy.injected() == {"503": 1, "500": 1, "stall": 1, "reset": 1, "drop_reply": 1, "delay": 1}
        assert proxy.injected_on_conditional["drop_reply"] == 1

    # Determinism: the same seed gives the same decisions in the same order.
    def decisions(seed: int) -> list:
        p = FaultProxy(s3.endpoint, seed=seed, rates={"503": 0.2, "reset": 0.1}, conditional_rates={"drop_reply": 0.5})
        return [p.decide("PUT" if i % 3 else "GET", {"If-Match": "x"} if i % 3 else {}) for i in range(200)]

    assert decisions(7) == decisions(7) and decisions(7) != decisions(8)


def _python_run(
    s3, seed: int, threads: int = 4, calls: int = 30, scale: float = 1.0, consume: bool = False
) -> dict[str, Any]:
    """Producers through the proxy; with ``consume``, a consumer (direct to the server, no faults)
    reads, acks and dequeues concurrently, so dequeued entries can make a lost reply undecidable."""
    from osqueue import Consumer, Producer
    from osqueue.store import S3Store

    bucket = new_bucket(s3)
    prefix = "q"
    rates = {k: v * scale for k, v in {"503": 0.03, "500": 0.02, "reset": 0.02, "stall": 0.005}.items()}
    conditional = {
        k: v * scale for k, v in {"503": 0.02, "500": 0.01, "reset": 0.01, "drop_reply": 0.03, "stall": 0.005}.items()
    }
    durable: dict[bytes, tuple[int, str]] = {}
    failed: dict[bytes, str] = {}
    produced: set[bytes] = set()
    lock = threading.Lock()
    errors_seen: list[BaseException] = []

    # Every 25th conditional PUT loses its reply on top of the random 3%: at least 4% are ambiguous.
    with FaultProxy(
        s3.endpoint, seed=seed, rates=rates, conditional_rates=conditional, stall_seconds=1.5, drop_reply_every=25
    ) as proxy:

        def worker(t: int) -> None:
            # The store's own S3A-style options, with short timeouts so stalls become errors quickly.
            store = S3Store(
                bucket,
                prefix,
                options={
                    "fs.s3a.endpoint": proxy.endpoint,
                    "fs.s3a.path.style.access": "true",
                    "fs.s3a.access.key": s3.access_key,
                    "fs.s3a.secret.key": s3.secret_key,
                    "fs.s3a.endpoint.region": s3.region,
                    "fs.s3a.connection.establish.timeout": "1s",
                    "fs.s3a.connection.timeout": "1s",
                },
            )
            producer = Producer(store=store, flush_interval=0.005)
            try:
                for i in range(calls):
                    value = f"py{t}-{i}".encode()
                    with lock:
                        produced.add(value)
                    h = producer.produce([value])
                    try:
                        d = h.wait_durable(timeout=120)
                        with lock:
                            durable[value] = (d.sequence, d.location)
                    except errors.OsqueueError as e:
                        with lock:
                            failed[value] = type(e).__name__
            except BaseException as e:  # noqa: BLE001 - reported below
                errors_seen.append(e)
            finally:
                try:
                    producer.close(timeout=60)
                except errors.OsqueueError:
                    pass

        consumed: dict[int, tuple[str, list[bytes]]] = {}
        done = threading.Event()

        def consumer_loop() -> None:
            store = S3Store(bucket, prefix, client=_client(s3.endpoint, s3, read_timeout=30))
            c = Consumer(store=store)
            try:
                while True:
                    # Read `done` before the manifest: a None read after the producers finished is then
                    # final (read after it, an entry appended between the read and `done` was left behind).
                    finished = done.is_set()
                    b = c.next_batch()
                    if b is None:
                        if finished:
                            break
                        time.sleep(0.005)
                        continue
                    consumed[b.sequence] = (b.location, list(b.entries))
                    c.ack(b.sequence)
                    c.flush()  # dequeue at once: the widest window for undecidable lost replies
            except BaseException as e:  # noqa: BLE001 - reported below
                errors_seen.append(e)
            finally:
                c.close()

        t0 = time.monotonic()
        ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        ct = threading.Thread(target=consumer_loop) if consume else None
        if ct is not None:
            ct.start()
        for th in ts:
            th.start()
        for th in ts:
            th.join(300)
        done.set()
        if ct is not None:
            ct.join(120)
        elapsed = time.monotonic() - t0
        assert not any(th.is_alive() for th in ts), "a producer thread hung"
        assert ct is None or not ct.is_alive(), "the consumer hung"
        assert not errors_seen, errors_seen
        counts = dict(proxy.counts)
        injected = proxy.injected()
        on_conditional = dict(proxy.injected_on_conditional)

    m, contents = _queue_contents(s3, bucket, prefix)
    if consume:
        assert not contents, "the consumer left entries behind"
        assert not set(consumed) & set(contents)
        contents = {**consumed, **contents}
        seqs = sorted(contents)
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True
    figures = _check_invariants(m, contents, durable, failed, produced)
    figures.update(
        injected=injected,
        injected_on_conditional_puts=on_conditional,
        requests=counts.get("requests", 0),
        conditional_puts=counts.get("conditional_puts", 0),
        seconds=round(elapsed, 1),
        failure_kinds=dict(collections.Counter(failed.values())),
    )
    return figures


def test_python_producers_and_a_dequeuing_consumer_through_faults(s3) -> None:
    f = _python_run(s3, seed=31, consume=True)
    RESULTS["python+consumer seed=31"] = f
    print(json.dumps(f, indent=1, sort_keys=True))
    assert f["lost"] == 0 and f["duplicated"] == 0
    assert f["injected_on_conditional_puts"].get("drop_reply", 0) >= 0.03 * f["conditional_puts"], f


@pytest.mark.parametrize("seed", [11])
def test_python_producers_through_faults_keep_the_manifest_exact(s3, seed: int) -> None:
    f = _python_run(s3, seed)
    RESULTS[f"python seed={seed}"] = f
    print(json.dumps(f, indent=1, sort_keys=True))
    total_faults = sum(f["injected"].values())
    assert f["requests"] > 0 and total_faults >= 0.05 * f["requests"], f
    assert f["injected_on_conditional_puts"].get("drop_reply", 0) >= 0.03 * f["conditional_puts"], f
    # Most calls succeed despite the faults (the queue resolves lost replies by re-reading).
    assert f["acked"] >= 0.8 * 4 * 30, f
    assert f["lost"] == 0 and f["duplicated"] == 0


def test_python_producers_through_faults_on_localstack() -> None:
    """The same run against LocalStack's S3 (its own conditional-write implementation)."""
    with run_s3_server("localstack") as server:
        f = _python_run(server, seed=13)
    RESULTS["python seed=13 localstack"] = f
    print(json.dumps(f, indent=1, sort_keys=True))
    assert f["requests"] > 0 and sum(f["injected"].values()) >= 0.05 * f["requests"], f
    assert f["injected_on_conditional_puts"].get("drop_reply", 0) >= 0.03 * f["conditional_puts"], f
    assert f["lost"] == 0 and f["duplicated"] == 0


# -- JVM producers (QueueTool in the connector jar) ----------------------------------------------


def _jvm_command(*args: str, store_options: dict[str, str]) -> list[str]:
    import pyspark

    import osqueue

    jars = pathlib.Path(pyspark.__file__).parent / "jars"
    cp = os.environ.get("OSQUEUE_FAULTS_JAR") or str(osqueue.jar_path())
    opts = [x for k, v in store_options.items() for x in ("--opt", f"{k}={v}")]
    return [shutil.which("java") or "java", "-cp", f"{cp}:{jars}/*", "osqueue.tools.QueueTool", *args, *opts]


def _jvm_supports_keep_going(store_options: dict[str, str]) -> bool:
    p = subprocess.run(_jvm_command("help", store_options={}), capture_output=True, text=True, timeout=60)
    return "--keep-going" in p.stderr


@pytest.mark.jvm
@pytest.mark.skipif(shutil.which("java") is None, reason="no java")
def test_jvm_producers_through_faults_keep_the_manifest_exact(s3) -> None:
    try:
        import pyspark  # noqa: F401

        import osqueue

        osqueue.jar_path()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no connector jar or pyspark: {e}")
    bucket = new_bucket(s3)
    rates = {"503": 0.04, "500": 0.03, "reset": 0.03, "stall": 0.005}
    conditional = {"503": 0.02, "500": 0.01, "reset": 0.01, "drop_reply": 0.03, "stall": 0.005}
    with FaultProxy(
        s3.endpoint, seed=23, rates=rates, conditional_rates=conditional, stall_seconds=2.5, drop_reply_every=25
    ) as proxy:
        opts = {
            "fs.s3a.endpoint": proxy.endpoint,
            "fs.s3a.access.key": s3.access_key,
            "fs.s3a.secret.key": s3.secret_key,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.endpoint.region": s3.region,
            "fs.s3a.connection.timeout": "1000",
            "fs.s3a.connection.request.timeout": "2000",
        }
        keep_going = _jvm_supports_keep_going(opts)
        extra = ["--keep-going", "true"] if keep_going else []
        count = 40
        t0 = time.monotonic()
        procs = [
            subprocess.Popen(
                _jvm_command(
                    "produce",
                    f"s3a://{bucket}/q",
                    f"jvm{t}",
                    str(count),
                    "--per-call",
                    "1",
                    "--flush-ms",
                    "5",
                    "--sync",
                    "true",
                    *extra,
                    store_options=opts,
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for t in range(2)
        ]
        outs = [p.communicate(timeout=240) for p in procs]
        elapsed = time.monotonic() - t0
        injected, counts, on_cond = proxy.injected(), dict(proxy.counts), dict(proxy.injected_on_conditional)

    produced = {f"jvm{t}-{i}".encode() for t in range(2) for i in range(count)}
    durable: dict[bytes, tuple[int, str]] = {}
    failed: dict[bytes, str] = {}
    for (out, err), p in zip(outs, procs):
        if keep_going:
            assert p.returncode in (0, 3), f"QueueTool exited {p.returncode}: {err[:1500]} [...] {err[-500:]}"
            for line in out.splitlines():
                parts = line.split("\t")
                if parts[0] == "durable":
                    durable[parts[3].encode()] = (int(parts[1]), parts[2])
                elif parts[0] == "failed":
                    failed[parts[2].encode()] = parts[1]
        else:
            # Without --keep-going the tool stops at its first failed handle and prints nothing per
            # entry: everything it produced counts as "failed or durable, unknown which".
            assert p.returncode in (0, 2), f"QueueTool exited {p.returncode}: {err[:1500]} [...] {err[-500:]}"
    if not keep_going:
        failed = {v: "unknown" for v in produced}
    m, contents = _queue_contents(s3, bucket, "q")
    f = _check_invariants(m, contents, durable, failed, produced)
    f.update(
        injected=injected,
        injected_on_conditional_puts=on_cond,
        requests=counts.get("requests", 0),
        conditional_puts=counts.get("conditional_puts", 0),
        seconds=round(elapsed, 1),
        keep_going=keep_going,
        failure_kinds=dict(collections.Counter(failed.values())),
    )
    RESULTS["jvm seed=23"] = f
    print(json.dumps(f, indent=1, sort_keys=True))
    assert sum(injected.values()) >= 0.05 * f["requests"], f
    assert on_cond.get("drop_reply", 0) >= 0.03 * f["conditional_puts"], f
    assert f["lost"] == 0 and f["duplicated"] == 0
    if keep_going:
        assert len(durable) + len(failed) == 2 * count
        assert f["acked"] >= 0.7 * 2 * count, f


def test_drop_reply_every_nth_conditional_put_is_exact(s3) -> None:
    p = FaultProxy(s3.endpoint, seed=3, drop_reply_every=4)
    got = [p.decide("PUT", {"If-None-Match": "*"} if i % 2 else {}) for i in range(40)]
    assert got.count("drop_reply") == 5 and p.injected()["drop_reply"] == 5
    assert all(g is None for i, g in enumerate(got) if i % 2 == 0)
