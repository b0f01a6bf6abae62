"""S3: error mapping of conditional writes, client-side retries of landed writes, end to end.

The contract and concurrency tests parametrized over ``any_store`` (test_store.py,
test_queue.py) also run against S3.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from helpers import WrappedStore, assert_well_formed, lost_reply_hook, lying_precondition_hook

import osqueue.store as store_module
import osqueue.store.endpoint_conditions as endpoint_conditions_module
from osqueue.consumer import Consumer
from osqueue.errors import ConditionalWritesNotHonouredError, ErrorKind, StoreError
from osqueue.producer import Producer
from osqueue.queue import QueueConsumer, QueueProducer, RetryPolicy
from osqueue.store import (
    IF_MATCH_QUOTED,
    IF_MATCH_UNQUOTED,
    PRECONDITION_FAILED,
    EndpointConditions,
    ObjectVersion,
    S3Store,
    Written,
    delete_many,
    forget_endpoint_conditions,
    open_store,
)

KEY = "ingest/manifest"


class _Meta:
    endpoint_url = "http://fake-s3.invalid"


def _skip_probe(
    endpoint: str = _Meta.endpoint_url, forms: tuple[str, ...] = (IF_MATCH_QUOTED, IF_MATCH_UNQUOTED)
) -> None:
    """What a probe of the fake endpoint would have found (fake clients cannot be probed)."""
    forget_endpoint_conditions(endpoint)
    endpoint_conditions_module._endpoint_conditions[endpoint] = EndpointConditions(endpoint, forms)


class _FakeClient:
    """Raises a prepared error from put_object/get_object."""

    meta = _Meta()

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls: list[dict[str, Any]] = []
        _skip_probe()

    def head_object(self, **kw: Any) -> Any:
        raise self.error

    def put_object(self, **kw: Any) -> Any:
        self.calls.append(kw)
        raise self.error

    def get_object(self, **kw: Any) -> Any:
        raise self.error


def _client_error(status: int, code: str, retries: int = 0) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": "test"},
            "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": retries},
        },
        "PutObject",
    )


@pytest.mark.parametrize(
    "status,code,retries,expected",
    [
        (412, "PreconditionFailed", 0, "precondition"),
        (409, "ConditionalRequestConflict", 0, "precondition"),
        (404, "NoSuchKey", 0, "precondition"),  # If-Match on a missing object
        (412, "PreconditionFailed", 1, "unknown"),  # a retry of a write that may have landed
        (500, "InternalError", 2, "unknown"),
        (503, "SlowDown", 0, "unknown"),
        (403, "AccessDenied", 0, "rejected"),
        (400, "InvalidRequest", 0, "rejected"),
    ],
)
def test_conditional_put_error_mapping(status: int, code: str, retries: int, expected: str) -> None:
    client = _FakeClient(_client_error(status, code, retries))
    store = S3Store("bucket", "pre", client=client)
    if expected == "precondition":
        assert store.put_if_version_matches("ingest/manifest", b"x", ObjectVersion('"etag"')) is PRECONDITION_FAILED
        assert client.calls[0]["IfMatch"] == '"etag"' and client.calls[0]["Key"] == "pre/ingest/manifest"
    else:
        with pytest.raises(StoreError) as info:
            store.put_if_version_matches("ingest/manifest", b"x", ObjectVersion('"etag"'))
        assert info.value.outcome_known is (expected == "rejected")


def test_put_if_absent_uses_if_none_match_and_network_errors_are_unknown() -> None:
    client = _FakeClient(_client_error(412, "PreconditionFailed"))
    assert S3Store("bucket", client=client).put_if_absent("k", b"x") is PRECONDITION_FAILED
    assert client.calls[0]["IfNoneMatch"] == "*"
    network = S3Store("bucket", client=_FakeClient(EndpointConnectionError(endpoint_url="http://x")))
    with pytest.raises(StoreError) as info:
        network.put_if_absent("k", b"x")
    assert not info.value.outcome_known
    with pytest.raises(StoreError):
        network.get("k")


def test_get_missing_key_is_none_but_missing_bucket_is_an_error(s3_store: S3Store, s3_options: dict[str, str]) -> None:
    assert s3_store.get("nothing/here") is None
    with pytest.raises(StoreError):
        S3Store("osq-no-such-bucket-here", "", s3_options).get("k")


def test_keys_live_under_the_prefix(s3_store: S3Store, s3_bucket: str) -> None:
    s3_store.put("ingest/a.batch", b"a")
    raw = s3_store.client.list_objects_v2(Bucket=s3_bucket)
    assert [o["Key"] for o in raw["Contents"]] == ["queues/q1/ingest/a.batch"]
    assert [i.key for i in s3_store.list("ingest/")] == ["ingest/a.batch"]


def test_delete_many_deletes_every_key_in_one_request_and_a_missing_key_is_no_error(s3_store: S3Store) -> None:
    calls: list[str] = []
    s3_store._client.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
    for i in range(3):
        s3_store.put(f"q/m.intents/{i}.intent", b"x")
    delete_many(s3_store, ["q/m.intents/0.intent", "q/m.intents/1.intent", "q/m.intents/2.intent", "q/missing"])
    assert [o.key for o in s3_store.list("q/m.intents/")] == []
    assert calls.count("DeleteObjects") == 1 and "DeleteObject" not in calls


def test_client_side_retry_of_a_landed_conditional_write_is_resolved(s3_store: S3Store) -> None:
    """botocore retries a conditional PUT that had landed; the retry gets 412. The store reports
    an unknown outcome (not a plain conflict), and the producer finds its entry instead of
    appending it again."""
    forced = {"n": 0}

    def force_retry(response: Any, attempts: int, request_dict: dict[str, Any], **kwargs: Any) -> Any:
        headers = request_dict.get("headers", {})
        conditional = "If-Match" in headers or "If-None-Match" in headers
        if (
            conditional
            and attempts == 1
            and response is not None
            and response[0].status_code == 200
            and forced["n"] < 2
        ):
            forced["n"] += 1
            return 0  # "the reply was lost": retry at once
        return None

    s3_store.conditions()  # the probe's conditional PUTs go before the hook
    s3_store.client.meta.events.register_first("needs-retry.s3.PutObject", force_retry)
    # Directly: the retried create-if-absent reports an unknown outcome.
    with pytest.raises(StoreError, match="outcome unknown"):
        s3_store.put_if_absent("probe", b"1")
    assert s3_store.get("probe").data == b"1"
    # Through the queue: one entry, found by re-reading.
    qp = QueueProducer(s3_store, KEY, retry=RetryPolicy(base_delay=0.001, max_delay=0.01))
    assert qp.enqueue("ingest/a.batch", timeout=30).sequence == 0
    assert qp.enqueue("ingest/b.batch", timeout=30).sequence == 1
    qp.close()
    assert forced["n"] == 2
    assert assert_well_formed(s3_store) == ["ingest/a.batch", "ingest/b.batch"]


@pytest.mark.parametrize("fault", ["lost_reply", "lying_precondition"])
def test_concurrent_ambiguous_writes_on_s3_leave_no_duplicates(s3_store: S3Store, fault: str) -> None:
    rng = random.Random(11)
    lock = threading.Lock()

    def flaky() -> bool:
        with lock:
            return rng.random() < 0.3

    errors: list[BaseException] = []

    def work(t: int) -> None:
        store = WrappedStore(S3Store(s3_store._bucket, s3_store._prefix, client=s3_store.client))
        store.on_conditional = lost_reply_hook(flaky) if fault == "lost_reply" else lying_precondition_hook(flaky)
        qp = QueueProducer(store, KEY, retry=RetryPolicy(base_delay=0.001, max_delay=0.02))
        try:
            for i in range(5):
                qp.enqueue(f"ingest/t{t}-{i}.batch", timeout=60)
        except BaseException as e:  # pragma: no cover
            errors.append(e)
        finally:
            qp.close()

    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert sorted(assert_well_formed(s3_store)) == sorted(f"ingest/t{t}-{i}.batch" for t in range(4) for i in range(5))


def test_producers_and_consumer_end_to_end_through_an_s3_uri(s3_bucket: str, s3_options: dict[str, str]) -> None:
    uri = f"s3a://{s3_bucket}/team/queue"
    producers = [Producer(uri, store_options=s3_options, flush_interval=0.01, compression="zstd") for _ in range(2)]
    sent: list[bytes] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        p = producers[t % 2]
        handles = []
        for i in range(10):
            rec = f"t{t}-{i}".encode()
            with lock:
                sent.append(rec)
            handles.append(p.produce([rec], b"meta"))
        for h in handles:
            h.wait_durable(60)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for p in producers:
        p.close()
    store = open_store(uri, s3_options)
    assert isinstance(store.put_if_absent("marker", b"x"), Written)
    got: list[bytes] = []
    with Consumer(uri, store_options=s3_options) as c:
        for batch in c:
            got.extend(batch.entries)
            c.ack(batch.sequence)
    assert sorted(got) == sorted(sent)
    assert assert_well_formed(store) == []  # everything acked and dequeued on close


def test_s3_timeouts_come_from_the_s3a_options_as_on_the_jvm() -> None:
    from osqueue.errors import InvalidConfigError

    opts = {
        "fs.s3a.endpoint": "127.0.0.1:9",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": "a",
        "fs.s3a.secret.key": "b",
        "fs.s3a.connection.establish.timeout": "2s",
        "fs.s3a.connection.timeout": "1500",
    }
    client = S3Store("b", options=opts)._client
    assert (client.meta.config.connect_timeout, client.meta.config.read_timeout) == (2.0, 1.5)
    assert client.meta.endpoint_url == "http://127.0.0.1:9"
    default = S3Store("b", options={"fs.s3a.endpoint": "http://127.0.0.1:9"})._client
    assert (default.meta.config.connect_timeout, default.meta.config.read_timeout) == (10, 60)
    assert default.meta.config.retries["total_max_attempts"] == 3
    # S3A's fs.s3a.attempts.maximum counts retries: 7 retries = 8 attempts (the JVM store reads it the same way)
    assert S3Store("b", options={"fs.s3a.attempts.maximum": "7"})._client.meta.config.retries["total_max_attempts"] == 8
    with pytest.raises(InvalidConfigError, match="fs.s3a.attempts.maximum"):
        S3Store("b", options={"fs.s3a.attempts.maximum": "-1"})
    with pytest.raises(InvalidConfigError, match="fs.s3a.connection.timeout"):
        S3Store("b", options={"fs.s3a.connection.timeout": "soon"})


def test_a_server_that_never_answers_gives_store_error_after_the_read_timeout() -> None:
    import socket
    import time

    with socket.socket() as server:  # accepts connections (the kernel does) and never replies
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        port = server.getsockname()[1]
        store = S3Store(
            "b",
            options={
                "fs.s3a.endpoint": f"http://127.0.0.1:{port}",
                "fs.s3a.access.key": "a",
                "fs.s3a.secret.key": "b",
                "fs.s3a.connection.timeout": "300ms",
            },
        )
        started = time.monotonic()
        with pytest.raises(StoreError):
            store.get(KEY)
        # 3 attempts of 0.3 s plus backoff, not the 60 s default (generous bound for a loaded machine)
        assert time.monotonic() - started < 20


# --- What the endpoint does with conditional writes (docs/format.md §8) ---------------------------


class _TagServer:
    """A fake S3 client with one object whose If-Match matches only the ``form`` given (Ceph RGW:
    unquoted), or never (``form=None``: a server that does not honour If-Match)."""

    meta = _Meta()

    def __init__(self, form: str | None) -> None:
        self.form = form
        self.etag = '"0cc175b9c0f1b6a831c399e269772661"'
        self.if_match_sent: list[str] = []
        self.heads = 0

    def put_object(self, **kw: Any) -> Any:
        sent = kw["IfMatch"]
        self.if_match_sent.append(sent)
        if self.form is None or sent != store_module.if_match_value(self.etag, self.form):
            raise _client_error(412, "PreconditionFailed")
        self.etag = f'"{len(self.if_match_sent):032x}"'
        return {"ETag": self.etag}

    def head_object(self, **kw: Any) -> Any:
        self.heads += 1
        return {"ETag": self.etag}


def test_a_412_while_the_tag_is_unchanged_is_retried_once_in_the_other_form_which_is_then_kept() -> None:
    server = _TagServer(IF_MATCH_UNQUOTED)
    _skip_probe()  # as if the probe had found quoted first
    store = S3Store("bucket", "", client=server)
    first = store.put_if_version_matches("m", b"1", ObjectVersion(server.etag))
    assert isinstance(first, Written)
    assert server.if_match_sent == ['"0cc175b9c0f1b6a831c399e269772661"', "0cc175b9c0f1b6a831c399e269772661"]
    assert store.conditions().if_match_form == IF_MATCH_UNQUOTED  # remembered for the endpoint
    second = S3Store("bucket", "", client=server).put_if_version_matches("m", b"2", first.version)
    assert isinstance(second, Written) and len(server.if_match_sent) == 3  # no quoted try any more
    # A real conflict (the tag changed) is a plain failed precondition, with no retry.
    assert store.put_if_version_matches("m", b"3", first.version) is PRECONDITION_FAILED
    assert len(server.if_match_sent) == 4


def test_if_match_failing_while_the_tag_never_changes_is_reported_as_not_honoured_not_as_contention() -> None:
    server = _TagServer(None)
    _skip_probe()
    store = S3Store("bucket", "", client=server)
    with pytest.raises(ConditionalWritesNotHonouredError) as info:
        store.put_if_version_matches("m", b"1", ObjectVersion(server.etag))
    assert info.value.endpoint == _Meta.endpoint_url and info.value.kind is ErrorKind.CONFIGURATION
    assert "did not change" in str(info.value) and server.etag in str(info.value)
    # Through the queue: the consumer's takeover says so at once, not "too many concurrent writers"
    # (ConflictRetriesExhaustedError after the whole retry budget).
    from osqueue.format import empty_manifest

    raw = empty_manifest()
    store.get = lambda key: store_module.VersionedObject(raw, ObjectVersion(server.etag))  # type: ignore[method-assign]
    consumer = QueueConsumer(
        store, "ingest/manifest", retry=RetryPolicy(base_delay=0.001, max_delay=0.002, max_attempts=5)
    )
    sent = len(server.if_match_sent)
    with pytest.raises(ConditionalWritesNotHonouredError):
        consumer.initialize()
    assert len(server.if_match_sent) == sent + 2  # one write, once in each form: no retry loop


def test_once_a_replace_landed_412s_skip_the_head_three_in_a_row_per_key_then_the_next_is_checked() -> None:
    """Issue 29: a contended writer's conflicts cost one request each, not two (docs/format.md §8)."""
    server = _TagServer(IF_MATCH_QUOTED)
    _skip_probe()  # the verdict seeded, no replace landed in it yet
    store = S3Store("bucket", "", client=server)
    assert store.put_if_version_matches("m", b"0", ObjectVersion('"ffff"')) is PRECONDITION_FAILED
    assert server.heads == 1  # the form not confirmed yet: the form rule's HEAD
    landed = store.put_if_version_matches("m", b"1", ObjectVersion(server.etag))
    assert isinstance(landed, Written)
    for conflicts in range(1, 4):  # another writer moves the tag each time: real conflicts
        server.etag = f'"moved-{conflicts}"'
        assert store.put_if_version_matches("m", b"x", landed.version) is PRECONDITION_FAILED
        assert server.heads == 1
    assert store.put_if_version_matches("m", b"x", landed.version) is PRECONDITION_FAILED
    assert server.heads == 2  # the 4th in a row is checked; the tag changed, so the count restarts
    assert store.put_if_version_matches("m", b"x", landed.version) is PRECONDITION_FAILED
    assert server.heads == 2
    assert store.put_if_version_matches("other", b"x", landed.version) is PRECONDITION_FAILED
    assert server.heads == 2  # the form is confirmed for the endpoint, the count kept per key
    fresh = S3Store("bucket", "", client=server)  # another store on the endpoint: the same verdict
    assert fresh.put_if_version_matches("m", b"x", landed.version) is PRECONDITION_FAILED
    assert server.heads == 2


def test_a_server_that_stops_honouring_if_match_after_a_landed_replace_is_named_within_four_attempts() -> None:
    server = _TagServer(IF_MATCH_QUOTED)
    _skip_probe()
    store = S3Store("bucket", "", client=server)
    landed = store.put_if_version_matches("m", b"1", ObjectVersion(server.etag))
    assert isinstance(landed, Written)
    server.form = None  # from now on it fails every If-Match, the tag unchanged
    for _ in range(3):
        assert store.put_if_version_matches("m", b"2", landed.version) is PRECONDITION_FAILED
    with pytest.raises(ConditionalWritesNotHonouredError, match="while the object did not change"):
        store.put_if_version_matches("m", b"2", landed.version)


def test_a_412_in_a_form_other_than_the_confirmed_one_is_checked_not_trusted() -> None:
    """Only a 412 in the form a replace landed in is taken without the HEAD: with the endpoint's form
    learned wrong after a landed replace (as S3StoreSuite does on Ceph RGW), the next write still
    corrects it and lands, rather than failing as a conflict."""
    server = _TagServer(IF_MATCH_UNQUOTED)
    _skip_probe()
    store = S3Store("bucket", "", client=server)
    landed = store.put_if_version_matches("m", b"1", ObjectVersion(server.etag))
    assert isinstance(landed, Written) and store.conditions().confirmed == IF_MATCH_UNQUOTED
    store.conditions().learned(IF_MATCH_QUOTED)  # the endpoint's form learned wrong
    heads = server.heads
    again = store.put_if_version_matches("m", b"2", landed.version)
    assert isinstance(again, Written) and server.heads == heads + 1
    assert store.conditions().if_match_form == IF_MATCH_UNQUOTED == store.conditions().confirmed


@pytest.mark.parametrize(
    "drop,what",
    [
        (("if-match", "if-none-match"), "If-None-Match: * replaced it"),
        (("if-none-match",), "If-None-Match: * replaced it"),
        (("if-match",), "If-Match set to a wrong entity tag replaced it"),
    ],
)
def test_the_probe_refuses_a_server_that_ignores_conditions(
    s3_endpoint: dict[str, str], s3_bucket: str, s3_options: dict[str, str], drop: tuple[str, ...], what: str
) -> None:
    """Real HTTP: a loopback proxy in front of the test server drops the condition headers, so
    the server answers 200 where S3 answers 412. No queue may be written through it."""
    if s3_endpoint.get("kind") == "ceph":
        pytest.skip(
            "the proxy forwards SigV4 signatures over the dropped headers: only moto, which does not check them"
        )
    from ignoring_proxy import IgnoringProxy

    with IgnoringProxy(s3_endpoint["endpoint"], drop) as proxy:
        endpoint = proxy.endpoint
        options = {**s3_options, "fs.s3a.endpoint": endpoint}
        uri = f"s3://{s3_bucket}/team/q"
        with pytest.raises(ConditionalWritesNotHonouredError) as info:
            with Producer(uri, store_options=options, flush_interval=0.01) as p:
                p.produce([b"x"]).wait_durable(30)
        assert info.value.endpoint == endpoint and what in str(info.value)
        assert f"team/q/{store_module.PROBE_KEY_PREFIX}" in str(
            info.value
        )  # the scratch object, under the queue's prefix
        assert proxy.requests.count("PUT") >= 2
        # The verdict is kept for the endpoint: the next store is refused without a conditional PUT.
        puts = proxy.requests.count("PUT")
        store = open_store(uri, options)
        with pytest.raises(ConditionalWritesNotHonouredError):
            store.put_if_absent("ingest/manifest", b"x")
        with pytest.raises(ConditionalWritesNotHonouredError):
            Consumer(uri, store_options=options)
        assert proxy.requests.count("PUT") == puts
    forget_endpoint_conditions(endpoint)
    # No manifest (nor owner record) was written, and the probe deleted its scratch object; a batch file
    # uploaded before the refusal would be an orphan for GC (the owner record's conditional create comes first).
    keys = [o.key for o in S3Store(s3_bucket, "", s3_options).list("")]
    assert all(k.startswith("team/q/ingest/") and k.endswith(".batch") for k in keys), keys


def test_the_probe_accepts_the_test_server_and_learns_its_if_match_form(
    s3_endpoint: dict[str, str], s3_store: S3Store
) -> None:
    forget_endpoint_conditions(s3_store.endpoint)
    conditions = s3_store.conditions()
    expected = IF_MATCH_UNQUOTED if s3_endpoint.get("kind") == "ceph" else IF_MATCH_QUOTED
    assert conditions.refusal is None and conditions.if_match_form == expected
    assert s3_store.list("") == []  # the scratch object is gone


def test_a_probe_request_that_fails_is_probed_again_not_reported(s3_bucket: str, s3_options: dict[str, str]) -> None:
    """A 5xx during the probe is no verdict: the probe runs again on a new scratch object, and the
    caller's write goes on (found by the fault-proxy run, where a producer died of one 500)."""
    from botocore.awsrequest import AWSResponse

    # No client-side retry, as in the fault runs: botocore's own retry would hide the failure.
    s3_store = S3Store(s3_bucket, "", {**s3_options, "fs.s3a.attempts.maximum": "0"})

    failed: list[str] = []

    def first_probe_put_fails(request: Any, **_: Any) -> AWSResponse | None:
        if request.method == "PUT" and store_module.PROBE_KEY_PREFIX in request.url and not failed:
            failed.append(request.url)
            body = b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
            return AWSResponse(request.url, 500, {}, _Raw(body))
        return None

    forget_endpoint_conditions(s3_store.endpoint)
    s3_store.client.meta.events.register_first("before-send.s3.PutObject", first_probe_put_fails)
    try:
        s3_store.put_if_absent("k", b"v")
    finally:
        s3_store.client.meta.events.unregister("before-send.s3.PutObject", first_probe_put_fails)
    assert failed, "the hook never failed a probe request: the test proves nothing"
    assert s3_store.get("k").data == b"v"
    assert [o.key for o in s3_store.list("")] == ["k"]  # both scratch objects gone


class _Raw:
    """The raw body of a fake botocore response."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data


_PRODUCER_PROCESS = """
import sys
from osqueue.producer import Producer
uri, endpoint, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
options = {"fs.s3a.endpoint": endpoint, "fs.s3a.access.key": "test", "fs.s3a.secret.key": "test",
           "fs.s3a.path.style.access": "true", "fs.s3a.endpoint.region": "us-east-1"}
with Producer(uri, store_options=options, flush_interval=0.005) as p:
    handles = [p.produce([f"{name}-{i:04d}".encode()]) for i in range(count)]
    for h in handles:
        h.wait_durable(120)
"""


def test_two_producer_processes_then_a_consumer_reads_each_entry_once_in_order_and_a_second_consumer_fences_it(
    s3_endpoint: dict[str, str], s3_bucket: str, s3_options: dict[str, str]
) -> None:
    """The issue's acceptance run (Ceph RGW with OSQUEUE_S3_KIND=ceph): 2 processes x 500 entries,
    each flush a manifest CAS contending with the other process."""
    import os
    import pathlib
    import subprocess
    import sys

    from osqueue.errors import FencedError

    uri, per_process = f"s3://{s3_bucket}/acceptance/q", 500
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(pathlib.Path(__file__).resolve().parents[2] / "python"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PRODUCER_PROCESS, uri, s3_endpoint["endpoint"], name, str(per_process)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for name in ("a", "b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode(errors="replace")[-3000:]
    got: list[bytes] = []
    first = Consumer(uri, store_options=s3_options)
    batch = first.next_batch()
    while batch is not None:
        got.extend(batch.entries)
        first.ack(batch.sequence)
        batch = first.next_batch()
    assert len(got) == 2 * per_process and len(set(got)) == len(got)
    for name in ("a", "b"):
        mine = [e for e in got if e.startswith(f"{name}-".encode())]
        assert mine == [f"{name}-{i:04d}".encode() for i in range(per_process)]  # in order per producer
    first.flush()  # the acks are durable: a new consumer starts after them
    with Producer(uri, store_options=s3_options, flush_interval=0.01) as p:
        p.produce([b"late"]).wait_durable(60)
    second = Consumer(uri, store_options=s3_options)
    assert second.epoch == first.epoch + 1
    with pytest.raises(FencedError):
        late = first.next_batch()
        assert late is not None
        first.ack(late.sequence)
        first.flush()
    late = second.next_batch()
    assert late is not None and late.entries == [b"late"]
    second.ack(late.sequence)
    second.close()


def test_a_server_whose_if_match_never_matches_is_refused_by_the_probe_and_at_run_time(
    s3_endpoint: dict[str, str], s3_bucket: str, s3_options: dict[str, str]
) -> None:
    """Real HTTP: a proxy sends every If-Match with a tag no object has. The probe refuses the
    endpoint; and a store past the probe (the verdict seeded) gets the same error from a write
    instead of a retry loop ending in "too many concurrent writers"."""
    if s3_endpoint.get("kind") == "ceph":
        pytest.skip("the proxy forwards SigV4 signatures over the changed header: only moto, which does not check them")
    from ignoring_proxy import IgnoringProxy

    with IgnoringProxy(s3_endpoint["endpoint"], drop=(), spoil_if_match=True) as proxy:
        options = {**s3_options, "fs.s3a.endpoint": proxy.endpoint}
        try:
            store = S3Store(s3_bucket, "q", options)
            with pytest.raises(ConditionalWritesNotHonouredError, match="with If-Match set to its own entity tag"):
                store.conditions()
            _skip_probe(proxy.endpoint)
            from osqueue.format import empty_manifest

            created = store.put_if_absent("ingest/manifest", empty_manifest())
            assert isinstance(created, Written)
            with pytest.raises(ConditionalWritesNotHonouredError, match="while the object did not change"):
                store.put_if_version_matches("ingest/manifest", b"n", created.version)
            consumer = QueueConsumer(store, "ingest/manifest", retry=RetryPolicy(base_delay=0.001, max_delay=0.002))
            with pytest.raises(ConditionalWritesNotHonouredError):
                consumer.initialize()
        finally:
            forget_endpoint_conditions(proxy.endpoint)
